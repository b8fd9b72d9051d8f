package cronguard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/cronguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/robfig/cron/v3"
)

// noon is a fixed clock reading, so that direct Run calls share a tick.
var noon = time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)

// everySecond is the Spec of jobs whose Run the tests call directly.
var everySecond = cronguard.Spec("* * * * * *")

// One tick runs once across instances, whichever constructor made the job;
// NoDedupe lets every instance run it, one after the other.
func TestOneRunPerTick(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 3)
	tests := []struct {
		name  string
		make  func(l *guard.Locker, name string, run func(), opts ...cronguard.Option) cron.Job
		opts  []cronguard.Option
		runs  int32
		skips int
	}{
		{"Func", funcJob, nil, 1, 2},
		{"Job", plainJob, nil, 1, 2},
		{"Wrapper", wrapped, nil, 1, 2},
		{"Func with NoDedupe", funcJob, []cronguard.Option{cronguard.NoDedupe()}, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "once-" + strings.ReplaceAll(tt.name, " ", "-")
			rec := &recLogger{}
			var runs atomic.Int32
			opts := append([]cronguard.Option{everySecond, cronguard.Clock(fixedClock(noon)), cronguard.Logger(rec.logger())}, tt.opts...)
			for _, l := range lockers {
				tt.make(l, name, func() { runs.Add(1) }, opts...).Run()
			}
			if got := runs.Load(); got != tt.runs {
				t.Errorf("%d runs, want %d", got, tt.runs)
			}
			skips := rec.all("cronguard: skip")
			if len(skips) != tt.skips {
				t.Fatalf("%d skips, want %d; log:\n%s", len(skips), tt.skips, rec)
			}
			for _, e := range skips {
				if e.kv["reason"] != "tick already claimed" || e.kv["job"] != name || !noon.Equal(e.kv["tick"].(time.Time)) {
					t.Errorf("skip logged as %v", e.kv)
				}
			}
		})
	}
}

func funcJob(l *guard.Locker, name string, run func(), opts ...cronguard.Option) cron.Job {
	return cronguard.Func(l, name, func(context.Context) error { run(); return nil }, opts...)
}

func plainJob(l *guard.Locker, name string, run func(), opts ...cronguard.Option) cron.Job {
	return cronguard.Job(l, name, cron.FuncJob(run), opts...)
}

func wrapped(l *guard.Locker, name string, run func(), opts ...cronguard.Option) cron.Job {
	return cron.NewChain(cronguard.Wrapper(l, name, opts...)).Then(cron.FuncJob(run))
}

// The run's context carries the job's name, its tick and the lease's
// fencing token; other contexts carry none.
func TestRunContext(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 1)
	at := time.Date(2026, 1, 10, 10, 20, 30, 0, time.UTC)
	var got string
	cronguard.Func(lockers[0], "ctx", func(ctx context.Context) error {
		tick, ok := cronguard.Tick(ctx)
		token, hasToken := guard.TokenFrom(ctx, cronguard.JobName(ctx))
		got = fmt.Sprintf("%s %v %v token %v %v", cronguard.JobName(ctx), tick.UTC(), ok, token > 0, hasToken)
		return nil
	}, cronguard.Spec("@every 1h"), cronguard.Clock(fixedClock(at))).Run()
	if want := "ctx 2026-01-10 10:00:00 +0000 UTC true token true true"; got != want {
		t.Errorf("run context: %q, want %q", got, want)
	}
	if name := cronguard.JobName(t.Context()); name != "" {
		t.Errorf("JobName outside a run = %q", name)
	}
	if tick, ok := cronguard.Tick(t.Context()); ok || !tick.IsZero() {
		t.Errorf("Tick outside a run = %v, %v", tick, ok)
	}
}

// Deleting the lock key during a run cancels the job's context at the next
// renewal, with a cause matching guard.ErrLeaseLost, logged at Error.
func TestLeaseLostCancelsJob(t *testing.T) {
	t.Parallel()
	srv, lockers := newFleet(t, 1)
	admin := srv.Client(t)
	rec := &recLogger{}
	var cause error
	job := cronguard.Func(lockers[0], "lost", func(ctx context.Context) error {
		if err := admin.Del(ctx, "guard:{lost}").Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return ctx.Err()
		case <-time.After(5 * time.Second):
			return errors.New("the lost lease went unnoticed")
		}
	}, everySecond, cronguard.TTL(900*time.Millisecond), cronguard.Logger(rec.logger()))
	start := time.Now()
	job.Run()
	if !errors.Is(cause, guard.ErrLeaseLost) {
		t.Errorf("job context cause = %v, want guard.ErrLeaseLost", cause)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("loss noticed after %v, want within a renewal (300ms)", d)
	}
	// guard logs the loss at Error if it has a logger; the adapter names
	// the job and the tick, once, at Warn, as every adapter does.
	lost := rec.all("cronguard: lease lost during the run")
	if len(lost) != 1 {
		t.Fatalf("want one entry for the loss; log:\n%s", rec)
	}
	if err, _ := lost[0].kv["err"].(error); lost[0].level != "warn" || !errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("want it at Warn with guard.ErrLeaseLost; log:\n%s", rec)
	}
}

// A panic is recovered and logged with its stack, and the lease is
// released: another instance can take the job at once.
func TestPanicIsRecovered(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 2)
	boom := errors.New("boom")
	tests := []struct {
		name string
		job  func(rec *recLogger) cron.Job
	}{
		{"Func", func(rec *recLogger) cron.Job {
			return cronguard.Func(lockers[0], "panic-func", func(context.Context) error { panic(boom) }, everySecond, cronguard.Logger(rec.logger()))
		}},
		{"Job", func(rec *recLogger) cron.Job {
			return cronguard.Job(lockers[0], "panic-job", cron.FuncJob(func() { panic("boom") }), everySecond, cronguard.Logger(rec.logger()))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recLogger{}
			tt.job(rec).Run() // must not panic
			logged := rec.all("cronguard: panic")
			if len(logged) != 1 {
				t.Fatalf("want one panic logged; log:\n%s", rec)
			}
			e := logged[0]
			if !strings.Contains(e.err.Error(), "boom") || (tt.name == "Func" && !errors.Is(e.err, boom)) {
				t.Errorf("panic logged as %v", e.err)
			}
			if stack, _ := e.kv["stack"].(string); !strings.Contains(stack, "TestPanicIsRecovered") {
				t.Errorf("stack does not show where it panicked:\n%s", stack)
			}
			key := "panic-" + strings.ToLower(tt.name)
			le, err := lockers[1].Acquire(t.Context(), key, guard.Wait(0))
			if err != nil {
				t.Fatalf("another instance cannot take %q after the panic: %v", key, err)
			}
			_ = le.Release(t.Context())
		})
	}
}

// Canceling the BaseContext cancels a running job's context; ticks that
// come after it are skipped without running.
func TestBaseContext(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 1)

	t.Run("canceled during a run", func(t *testing.T) {
		base, cancel := context.WithCancel(context.Background())
		rec := &recLogger{}
		started := make(chan struct{})
		var cause error
		job := cronguard.Func(lockers[0], "shutdown-during", func(ctx context.Context) error {
			close(started)
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
				return ctx.Err()
			case <-time.After(5 * time.Second):
				return errors.New("shutdown went unnoticed")
			}
		}, everySecond, cronguard.BaseContext(base), cronguard.Logger(rec.logger()))
		done := make(chan struct{})
		go func() {
			defer close(done)
			job.Run()
		}()
		<-started
		cancel()
		<-done
		if !errors.Is(cause, context.Canceled) {
			t.Errorf("job context cause = %v, want context.Canceled", cause)
		}
		if len(rec.all("cronguard: job stopped")) != 1 || len(rec.all("cronguard: job failed")) != 0 {
			t.Errorf("want the stop logged at Info, not as a failure; log:\n%s", rec)
		}
	})

	t.Run("canceled before a tick", func(t *testing.T) {
		base, cancel := context.WithCancel(context.Background())
		cancel()
		rec := &recLogger{}
		ran := false
		cronguard.Func(lockers[0], "shutdown-before", func(context.Context) error {
			ran = true
			return nil
		}, everySecond, cronguard.BaseContext(base), cronguard.Logger(rec.logger())).Run()
		skips := rec.all("cronguard: skip")
		if ran || len(skips) != 1 || skips[0].kv["reason"] != "base context done" {
			t.Errorf("ran: %v; want a skip logged; log:\n%s", ran, rec)
		}
	})
}

// A tick that finds the job running elsewhere skips it, or with Wait(d)
// waits for that run to end.
func TestBusy(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 2)
	tests := []struct {
		name   string
		wait   time.Duration
		ran    bool
		reason string
	}{
		{"skip", 0, false, "still running"},
		{"wait long enough", 3 * time.Second, true, ""},
		{"wait too short", 100 * time.Millisecond, false, "still running after waiting 100ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "busy-" + strings.ReplaceAll(tt.name, " ", "-")
			held, err := lockers[1].Acquire(t.Context(), name)
			if err != nil {
				t.Fatal(err)
			}
			releaseAfter := 400 * time.Millisecond
			released := make(chan struct{})
			timer := time.AfterFunc(releaseAfter, func() {
				defer close(released)
				_ = held.Release(context.Background())
			})
			defer func() { timer.Stop(); _ = held.Release(context.Background()) }()
			rec := &recLogger{}
			var ran bool
			var ranAt time.Duration
			start := time.Now()
			cronguard.Func(lockers[0], name, func(context.Context) error {
				ran, ranAt = true, time.Since(start)
				return nil
			}, everySecond, cronguard.Wait(tt.wait), cronguard.Logger(rec.logger())).Run()
			if ran != tt.ran {
				t.Fatalf("ran = %v, want %v; log:\n%s", ran, tt.ran, rec)
			}
			if ran && ranAt < releaseAfter {
				t.Errorf("ran after %v, before the other run ended (%v)", ranAt, releaseAfter)
			}
			skips := rec.all("cronguard: skip")
			if tt.reason == "" && len(skips) != 0 || tt.reason != "" && (len(skips) != 1 || skips[0].kv["reason"] != tt.reason) {
				t.Errorf("want skip reason %q; log:\n%s", tt.reason, rec)
			}
			<-released
		})
	}
}

// Contention is logged once per interval per job, not at every tick: the
// next line after the interval says how many skips it stands for.
func TestStillRunningLoggedOncePerInterval(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 2)
	const name = "busy-log"
	held, err := lockers[1].Acquire(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())

	var now atomic.Int64
	now.Store(noon.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	rec := &recLogger{}
	ran := false
	job := cronguard.Func(lockers[0], name, func(context.Context) error { ran = true; return nil },
		cronguard.Spec("* * * * * *"), cronguard.Clock(clock), cronguard.Logger(rec.logger()))
	for range 5 {
		job.Run()
		now.Add(int64(time.Second))
	}
	if ran {
		t.Fatal("ran while the lease was held elsewhere")
	}
	skips := rec.info("cronguard: skip")
	if len(skips) != 1 || skips[0].kv["reason"] != "still running" {
		t.Fatalf("5 busy ticks in 5s: want one skip logged at Info; log:\n%s", rec)
	}
	now.Add(int64(time.Minute))
	job.Run()
	skips = rec.info("cronguard: skip")
	if len(skips) != 2 || skips[1].kv["reason"] != "still running" || skips[1].kv["repeated"] != int64(4) {
		t.Fatalf("a busy tick a minute later: want a second skip with repeated=4; log:\n%s", rec)
	}
}

// MinHold keeps the lease after a fast job returns.
func TestMinHold(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 2)
	const hold = 800 * time.Millisecond
	start := time.Now()
	cronguard.Func(lockers[0], "min-hold", func(context.Context) error { return nil }, everySecond, cronguard.MinHold(hold)).Run()
	if _, err := lockers[1].Acquire(t.Context(), "min-hold", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("Acquire right after a run with MinHold: %v, want guard.ErrNotAcquired", err)
	}
	le, err := lockers[1].Acquire(t.Context(), "min-hold", guard.Wait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = le.Release(t.Context())
	if d := time.Since(start); d < hold-50*time.Millisecond {
		t.Errorf("acquired %v after the run started, before MinHold %v", d, hold)
	}
}

// Errors are logged at Error: the job's own, and Redis's.
func TestErrorsAreLogged(t *testing.T) {
	t.Parallel()
	srv, lockers := newFleet(t, 1)

	rec := &recLogger{}
	nope := errors.New("nope")
	cronguard.Func(lockers[0], "fails", func(context.Context) error { return nope }, everySecond, cronguard.Logger(rec.logger())).Run()
	if e := rec.all("cronguard: job failed"); len(e) != 1 || !errors.Is(e[0].err, nope) {
		t.Errorf("want the job's error logged; log:\n%s", rec)
	}

	closed := newLocker(t, srv.Addr())
	_ = closed.Close()
	rec = &recLogger{}
	ran := false
	cronguard.Func(closed, "closed", func(context.Context) error { ran = true; return nil }, everySecond, cronguard.Logger(rec.logger())).Run()
	if e := rec.all("cronguard: skip"); ran || len(e) != 1 || e[0].kv["reason"] != "locker closed" {
		t.Errorf("ran: %v; want a skip for the closed Locker at Info; log:\n%s", ran, rec)
	}

	// A TTL the Locker cannot schedule is a wiring mistake (TestInvalidConfiguration).
	if err := cronguard.Validate(lockers[0], "tiny-ttl", everySecond, cronguard.TTL(time.Nanosecond)); !errors.Is(err, guard.ErrInvalid) {
		t.Errorf("Validate with a TTL the Locker cannot schedule: %v, want guard.ErrInvalid", err)
	}
}

// An invalid configuration fails when the job is made: Validate returns
// the error, and Func, Job and Wrapper panic with it.
func TestInvalidConfiguration(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 1)
	l := lockers[0]
	tests := []struct {
		name   string
		locker *guard.Locker
		job    string
		opts   []cronguard.Option
		want   string
	}{
		{"nil locker", nil, "j", nil, "nil *guard.Locker"},
		{"empty name", l, "", nil, "empty job name"},
		{"name with a brace", l, "a}b", nil, `job name "a}b": must not contain '}'`},
		{"nil option", l, "j", []cronguard.Option{nil}, "nil Option"},
		{"no spec", l, "j", nil, "no Spec: a job cannot see the schedule"},
		{"bad spec", l, "j", []cronguard.Option{cronguard.Spec("every day")}, `Spec("every day"): expected 5 to 6 fields`},
		{"bad descriptor", l, "j", []cronguard.Option{cronguard.Spec("@every soon")}, `Spec("@every soon"): failed to parse duration`},
		{"spec the Parser rejects", l, "j", []cronguard.Option{cronguard.Parser(cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)),
			cronguard.Spec("@daily")}, `Spec("@daily")`},
		{"nil parser", l, "j", []cronguard.Option{cronguard.Parser(nil), everySecond}, "Parser(nil)"},
		{"nil schedule", l, "j", []cronguard.Option{cronguard.Schedule(nil)}, "Schedule(nil)"},
		{"zero every", l, "j", []cronguard.Option{cronguard.Schedule(cron.ConstantDelaySchedule{})}, "Schedule(every 0s): the delay must be positive"},
		{"Spec and Schedule", l, "j", []cronguard.Option{everySecond, cronguard.Schedule(cron.Every(time.Minute))}, "both Spec and Schedule"},
		{"negative wait", l, "j", []cronguard.Option{everySecond, cronguard.Wait(-time.Second)}, "Wait(-1s): must be >= 0"},
		{"negative min hold", l, "j", []cronguard.Option{everySecond, cronguard.MinHold(-time.Second)}, "MinHold(-1s): must be >= 0"},
		{"zero TTL", l, "j", []cronguard.Option{everySecond, cronguard.TTL(0)}, "TTL(0s): must be positive"},
		{"TTL the Locker cannot schedule", l, "j", []cronguard.Option{everySecond, cronguard.TTL(time.Nanosecond)}, ""},
		//lint:ignore SA1012 the case checks that a nil context is rejected
		{"nil base context", l, "j", []cronguard.Option{everySecond, cronguard.BaseContext(nil)}, "BaseContext(nil)"},
		{"nil logger", l, "j", []cronguard.Option{everySecond, cronguard.Logger(nil)}, "Logger(nil)"},
		{"first error wins", l, "j", []cronguard.Option{everySecond, cronguard.Wait(-1), cronguard.TTL(-1)}, "Wait(-1ns)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := cronguard.Validate(tt.locker, tt.job, tt.opts...)
			if !errors.Is(err, guard.ErrInvalid) || !strings.HasPrefix(err.Error(), "cronguard: ") ||
				!strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want guard.ErrInvalid with %q", err, tt.want)
			}
			ran := false
			fn := func(context.Context) error { ran = true; return nil }
			for what, make := range map[string]func(){
				"Func":    func() { cronguard.Func(tt.locker, tt.job, fn, tt.opts...) },
				"Job":     func() { cronguard.Job(tt.locker, tt.job, cron.FuncJob(func() {}), tt.opts...) },
				"Wrapper": func() { cronguard.Wrapper(tt.locker, tt.job, tt.opts...) },
			} {
				if p := mustPanic(t, make); p == nil || p.Error() != err.Error() {
					t.Errorf("%s panicked with %v, want Validate's error", what, p)
				}
			}
			if ran {
				t.Error("the job ran")
			}
		})
	}

	t.Run("valid", func(t *testing.T) {
		for _, opt := range []cronguard.Option{cronguard.Spec("* * * * *"), cronguard.Spec("*/5 * * * * *"),
			cronguard.Spec("@every 5m"), cronguard.Spec("@daily"), cronguard.Spec("CRON_TZ=Europe/Berlin 0 3 * * *"),
			cronguard.Schedule(cron.Every(time.Minute)), cronguard.NoDedupe()} {
			if err := cronguard.Validate(l, "j", opt, cronguard.Wait(0), cronguard.MinHold(0),
				cronguard.TTL(time.Second), cronguard.Logger(slog.New(slog.DiscardHandler)),
				cronguard.BaseContext(t.Context()), cronguard.Parser(cron.NewParser(cron.SecondOptional|cron.Minute|
					cron.Hour|cron.Dom|cron.Month|cron.Dow|cron.Descriptor))); err != nil {
				t.Errorf("Validate: %v", err)
			}
		}
	})
}
