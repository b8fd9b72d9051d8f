package cronguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/cronguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/robfig/cron/v3"
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

// A wiring mistake fails when the job is made, not by a job that quietly
// never runs: Job, Func and Wrapper panic with an error matching
// guard.ErrInvalid that says what is wrong.
func TestWiringMistakesPanic(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 1)
	l := lockers[0]
	spec := cronguard.Spec("* * * * * *")
	fn := func(context.Context) error { return nil }
	tests := []struct {
		name string
		make func()
		want string
	}{
		{"Func: nil locker", func() { cronguard.Func(nil, "j", fn, spec) }, "nil *guard.Locker"},
		{"Func: empty name", func() { cronguard.Func(l, "", fn, spec) }, "empty job name"},
		{"Func: nil func", func() { cronguard.Func(l, "j", nil, spec) }, "nil func"},
		{"Func: bad option", func() { cronguard.Func(l, "j", fn, spec, cronguard.Wait(-1)) }, "Wait(-1ns)"},
		{"Func: no Spec", func() { cronguard.Func(l, "j", fn) }, "no Spec"},
		{"Job: nil job", func() { cronguard.Job(l, "j", nil, spec) }, "nil cron.Job"},
		{"Job: nil locker", func() { cronguard.Job(nil, "j", cron.FuncJob(func() {}), spec) }, "nil *guard.Locker"},
		{"Wrapper: bad option", func() { cronguard.Wrapper(l, "j", spec, cronguard.TTL(0)) }, "TTL(0s)"},
		{"Wrapper: nil job", func() { cronguard.Wrapper(l, "j", spec)(nil) }, "nil cron.Job"},
		{"Wrapper: no Spec", func() { cronguard.Wrapper(l, "j") }, "no Spec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := mustPanic(t, tt.make)
			if err == nil {
				return
			}
			if !errors.Is(err, guard.ErrInvalid) || !strings.Contains(err.Error(), tt.want) ||
				!strings.HasPrefix(err.Error(), "cronguard: ") {
				t.Errorf("panicked with %q, want guard.ErrInvalid with %q", err, tt.want)
			}
		})
	}
}

// The user's report: three instances, each with its own cron, schedule
// "@every 2s" and start a little apart, so each fires at its own phase.
// Without a Spec the job cannot see that the schedule is an interval, so it
// must refuse to be made; it must never run a tick on several instances.
func TestEveryWithoutSpec(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 3)
	const spec = "@every 2s"
	var ta tally
	var jobs []cron.Job
	for _, l := range lockers {
		var job cron.Job
		refused := false
		func() {
			defer func() {
				if r := recover(); r != nil {
					refused = true
					if err, _ := r.(error); !errors.Is(err, guard.ErrInvalid) {
						t.Errorf("refused with %v, want guard.ErrInvalid", r)
					}
				}
			}()
			job = cronguard.Func(l, "every-2s-no-spec", func(ctx context.Context) error {
				tick, _ := cronguard.Tick(ctx)
				ta.add(tick)
				return nil
			})
		}()
		if refused {
			return // refused at wiring time: the promise cannot be broken
		}
		jobs = append(jobs, job)
	}
	start := time.Now()
	var stops []func()
	for i, job := range jobs {
		time.Sleep(time.Until(start.Add(time.Duration(i) * 700 * time.Millisecond)))
		stops = append(stops, startCron(t, spec, job))
	}
	time.Sleep(time.Until(start.Add(6500 * time.Millisecond)))
	for _, stop := range stops {
		stop()
	}
	ta.mu.Lock()
	defer ta.mu.Unlock()
	buckets := map[int64]int{}
	for tick, n := range ta.runs {
		buckets[tick-tick%2] += n
	}
	for b, n := range buckets {
		if n != 1 {
			t.Errorf("the 2s bucket at %v ran %d times, want once", time.Unix(b, 0).UTC(), n)
		}
	}
}

// Redis unreachable is an error, logged at Error, never taken for contention.
func TestRedisDownIsAnError(t *testing.T) {
	t.Parallel()
	srv, lockers := newFleet(t, 1)
	srv.Kill(t)
	for _, opts := range [][]cronguard.Option{nil, {cronguard.NoDedupe(), cronguard.Wait(300 * time.Millisecond)}} {
		rec := &recLogger{}
		ran := false
		cronguard.Func(lockers[0], "down", func(context.Context) error { ran = true; return nil },
			append([]cronguard.Option{cronguard.Spec("* * * * * *"), cronguard.Logger(rec.logger())}, opts...)...).Run()
		if ran || len(rec.all("cronguard: skip")) != 0 {
			t.Errorf("ran: %v; want no run and no skip; log:\n%s", ran, rec)
		}
		var errs int
		for _, e := range rec.entries {
			if e.level == "error" && strings.HasPrefix(e.msg, "cronguard: job not run") {
				errs++
			}
		}
		if errs != 1 {
			t.Errorf("want one Error line; log:\n%s", rec)
		}
	}
}

// CronLogger(nil) discards, as a nil Logger option would be refused: it
// must not panic at cron's first log line.
func TestCronLoggerNilDiscards(t *testing.T) {
	l := cronguard.CronLogger(nil)
	l.Info("schedule", "entry", 1)
	l.Error(errors.New("boom"), "panic", "entry", 1)
}
