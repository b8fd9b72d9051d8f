package gocronguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/gocronguard"
	"github.com/jobguard/jobguard/guard"
)

// mustPanic calls f and returns the error it panicked with, failing the
// test if it did not panic with an error.
func mustPanic(t *testing.T, f func()) (err error) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Errorf("did not panic")
			return
		}
		var ok bool
		if err, ok = r.(error); !ok {
			t.Errorf("panicked with %T %v, want an error", r, r)
		}
	}()
	f()
	return nil
}

// A wiring mistake fails when the Locker or Task is made: Locker and Task
// panic with an error matching guard.ErrInvalid that says what is wrong,
// and Validate returns the Locker's.
func TestWiringMistakes(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 1)
	l := lockers[0]
	fn := func(context.Context) error { return nil }
	lockerTests := []struct {
		name   string
		locker *guard.Locker
		opts   []gocronguard.Option
		want   string
	}{
		{"nil locker", nil, nil, "nil *guard.Locker"},
		{"nil option", l, []gocronguard.Option{nil}, "nil Option"},
		{"prefix with }", l, []gocronguard.Option{gocronguard.Prefix("a}")}, `Prefix("a}")`},
		{"nil key func", l, []gocronguard.Option{gocronguard.KeyFunc(nil)}, "KeyFunc(nil)"},
		{"prefix and key func", l, []gocronguard.Option{gocronguard.Prefix("a:"), gocronguard.KeyFunc(strings.ToLower)}, "both Prefix and KeyFunc"},
		{"zero window", l, []gocronguard.Option{gocronguard.Window(0)}, "Window(0s)"},
		{"negative min hold", l, []gocronguard.Option{gocronguard.MinHold(-1)}, "MinHold(-1ns)"},
		{"zero TTL", l, []gocronguard.Option{gocronguard.TTL(0)}, "TTL(0s)"},
		{"TTL too short for renewals", l, []gocronguard.Option{gocronguard.TTL(time.Nanosecond)}, "gocronguard: guard: invalid argument"},
		{"nil logger", l, []gocronguard.Option{gocronguard.Logger(nil)}, "Logger(nil)"},
	}
	for _, tt := range lockerTests {
		t.Run("Locker: "+tt.name, func(t *testing.T) {
			err := gocronguard.Validate(tt.locker, tt.opts...)
			if !errors.Is(err, guard.ErrInvalid) || !strings.Contains(err.Error(), tt.want) ||
				!strings.HasPrefix(err.Error(), "gocronguard: ") {
				t.Errorf("Validate = %v, want guard.ErrInvalid with %q", err, tt.want)
			}
			if perr := mustPanic(t, func() { gocronguard.Locker(tt.locker, tt.opts...) }); perr == nil || perr.Error() != err.Error() {
				t.Errorf("Locker panicked with %v, want Validate's error", perr)
			}
		})
	}

	taskTests := []struct {
		name string
		make func()
		want string
	}{
		{"nil locker", func() { gocronguard.Task(nil, "j", fn) }, "nil *guard.Locker"},
		{"empty name", func() { gocronguard.Task(l, "", fn) }, "empty job name"},
		{"name with }", func() { gocronguard.Task(l, "a}", fn) }, `job name "a}"`},
		{"nil func", func() { gocronguard.Task(l, "j", nil) }, "nil func"},
		{"bad option", func() { gocronguard.Task(l, "j", fn, gocronguard.Window(-time.Second)) }, "Window(-1s)"},
		{"Prefix", func() { gocronguard.Task(l, "j", fn, gocronguard.Prefix("a:")) }, "Prefix or KeyFunc given to Task"},
		{"KeyFunc", func() { gocronguard.Task(l, "j", fn, gocronguard.KeyFunc(strings.ToLower)) }, "Prefix or KeyFunc given to Task"},
	}
	for _, tt := range taskTests {
		t.Run("Task: "+tt.name, func(t *testing.T) {
			err := mustPanic(t, tt.make)
			if err == nil {
				return
			}
			if !errors.Is(err, guard.ErrInvalid) || !strings.Contains(err.Error(), tt.want) ||
				!strings.HasPrefix(err.Error(), "gocronguard: ") {
				t.Errorf("panicked with %q, want guard.ErrInvalid with %q", err, tt.want)
			}
		})
	}

	if err := gocronguard.Validate(l, gocronguard.Prefix(""), gocronguard.Window(time.Hour), gocronguard.NoDedupe(),
		gocronguard.MinHold(time.Second), gocronguard.TTL(10*time.Second), gocronguard.Logger((&recLogger{}).logger())); err != nil {
		t.Errorf("Validate of a good configuration: %v", err)
	}
}
