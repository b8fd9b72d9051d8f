package asynqguard_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// A key that stays busy is logged once per interval, not at every attempt;
// another key gets its own line.
func TestBusyLoggedOncePerKey(t *testing.T) {
	srv := redistest.Start(t)
	a := asynq.NewTask("email:welcome", []byte("a"))
	b := asynq.NewTask("email:welcome", []byte("b"))
	hold(t, srv, keyOf(a.Type(), a.Payload()))
	hold(t, srv, keyOf(b.Type(), b.Payload()))
	log, buf := newLogger()
	mw := asynqguard.Middleware(newLocker(t, srv), asynqguard.Logger(log))
	var runs atomic.Int64
	for range 5 {
		for _, task := range []*asynq.Task{a, b} {
			if err := mw(counting(&runs, nil)).ProcessTask(t.Context(), task); !errors.Is(err, asynqguard.ErrBusy) {
				t.Fatalf("err = %v, want ErrBusy", err)
			}
		}
	}
	if n := len(buf.lines("level=INFO", "key busy; retry later")); n != 2 {
		t.Fatalf("5 busy attempts on each of 2 keys: %d lines, want 2:\n%s", n, buf)
	}
	for _, task := range []*asynq.Task{a, b} {
		if n := len(buf.lines("level=INFO", "key busy; retry later", "lock_key="+keyOf(task.Type(), task.Payload()))); n != 1 {
			t.Errorf("5 busy attempts: %d lines for key %q, want 1:\n%s", n, task.Payload(), buf)
		}
	}
}

// A duplicate skipped, revoked or archived because its key is busy is
// logged at Info once per interval per key, and at Debug otherwise: a
// fleet's duplicates repeat it.
func TestBusyDuplicatesLoggedOncePerKey(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		policy asynqguard.Option
		msg    string
	}{
		{asynqguard.Skip(), "skipped duplicate: key busy"},
		{asynqguard.Revoke(), "revoked duplicate: key busy"},
		{asynqguard.Archive(), "archived duplicate: key busy"},
	} {
		task := asynq.NewTask("report:daily", []byte(tc.msg))
		hold(t, srv, keyOf(task.Type(), task.Payload()))
		log, buf := newLogger()
		mw := asynqguard.Middleware(newLocker(t, srv), tc.policy, asynqguard.Logger(log))
		var runs atomic.Int64
		for range 5 {
			_ = mw(counting(&runs, nil)).ProcessTask(t.Context(), task)
		}
		if runs.Load() != 0 {
			t.Fatalf("%s: the handler ran %d times under a held key", tc.msg, runs.Load())
		}
		if info, debug := len(buf.lines("level=INFO", tc.msg)), len(buf.lines("level=DEBUG", tc.msg)); info != 1 || debug != 4 {
			t.Errorf("5 duplicates: %d lines at Info and %d at Debug, want 1 and 4:\n%s", info, debug, buf)
		}
	}
}

// With one logger for the Locker and the middleware, as the docs wire
// them, a busy key is one line: the middleware's, not guard's too.
func TestBusyIsOneLineWithOneLogger(t *testing.T) {
	srv := redistest.Start(t)
	task := asynq.NewTask("email:welcome", []byte("shared"))
	hold(t, srv, keyOf(task.Type(), task.Payload()))
	log, buf := newLogger()
	mw := asynqguard.Middleware(newLocker(t, srv, guard.WithLogger(log)), asynqguard.Logger(log))
	var runs atomic.Int64
	_ = mw(counting(&runs, nil)).ProcessTask(t.Context(), task)
	if n := len(buf.lines("level=INFO")); n != 1 || len(buf.lines("level=INFO", "key busy; retry later")) != 1 {
		t.Errorf("one busy attempt: %d lines at Info, want the middleware's one:\n%s", n, buf)
	}
}

// Wiring the middleware around a nil handler fails at once.
func TestNilHandlerPanics(t *testing.T) {
	srv := redistest.Start(t)
	mw := asynqguard.Middleware(newLocker(t, srv))
	defer func() {
		if p, _ := recover().(error); !errors.Is(p, guard.ErrInvalid) {
			t.Errorf("panicked with %v, want an error matching guard.ErrInvalid", p)
		}
	}()
	mw(nil)
}

// Redis unreachable is an error that spends a retry, never a busy key.
func TestRedisDownIsNotBusy(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	srv.Kill(t)
	for _, opts := range [][]asynqguard.Option{nil, {asynqguard.WaitFor(300 * time.Millisecond)}} {
		var runs atomic.Int64
		err := asynqguard.Middleware(l, opts...)(counting(&runs, nil)).ProcessTask(t.Context(), asynq.NewTask("t", nil))
		if err == nil || errors.Is(err, asynqguard.ErrBusy) || errors.Is(err, guard.ErrNotAcquired) ||
			!asynqguard.IsFailure(err) || runs.Load() != 0 {
			t.Errorf("Redis down: err = %v, runs = %d; want a failure that is not busy", err, runs.Load())
		}
	}
}
