package gocronguard_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/jobguard/jobguard/gocronguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// These tests run real gocron schedulers, one per instance, each with its
// own Redis client and guard.Locker, against a real redis-server.

// Three instances with the Locker on their schedulers run the same
// every-second job, which takes 1ms: each tick runs on exactly one of
// them, and gocron sees the others' runs skipped with ErrTickClaimed.
func TestFleetRunsEachTickOnce(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 3)
	var ta tally
	var claimed atomic.Int32
	var stopping atomic.Bool
	var shutdowns []func()
	for _, l := range lockers {
		lk := recordingLocker{Locker: gocronguard.Locker(l), window: time.Second, ta: &ta}
		s, shutdown := newScheduler(t, gocron.WithDistributedLocker(lk))
		mustNewJob(t, s, everySecond(), gocron.NewTask(func() { time.Sleep(time.Millisecond) }),
			gocron.WithName("report"),
			gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
				switch {
				case errors.Is(err, gocronguard.ErrTickClaimed):
					claimed.Add(1)
				case stopping.Load() && errors.Is(err, context.Canceled):
					// A tick firing as the scheduler shuts down: gocron
					// cancels the context its Lock call runs under.
				default:
					t.Errorf("lock error: %v", err)
				}
			})))
		s.Start()
		shutdowns = append(shutdowns, shutdown)
	}
	time.Sleep(3500 * time.Millisecond)
	stopping.Store(true)
	for _, shutdown := range shutdowns {
		shutdown()
	}
	ticks := ta.check(t, 2)
	if n := int(claimed.Load()); n < len(ticks) {
		t.Errorf("%d runs skipped as claimed for %d ticks on three instances, want at least %d", n, len(ticks), len(ticks))
	}
}

// A DurationJob of 1s on instances started 350ms apart fires at a
// different phase on each; with Window(1s), each epoch-aligned 1s window
// runs once, and the Task's context tells the run its tick.
func TestFleetDurationJobRunsOncePerWindow(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 3)
	var ta tally
	start := time.Now()
	var shutdowns []func()
	for i, l := range lockers {
		time.Sleep(time.Until(start.Add(time.Duration(i) * 350 * time.Millisecond)))
		s, shutdown := newScheduler(t)
		mustNewJob(t, s, gocron.DurationJob(time.Second), gocronguard.Task(l, "every-1s", func(ctx context.Context) error {
			tick, ok := gocronguard.Tick(ctx)
			if !ok {
				t.Error("no tick in the run's context")
			}
			ta.add(tick)
			return nil
		}, gocronguard.Window(time.Second)), gocron.WithName("every-1s"))
		s.Start()
		shutdowns = append(shutdowns, shutdown)
	}
	time.Sleep(time.Until(start.Add(4700 * time.Millisecond)))
	for _, shutdown := range shutdowns {
		shutdown()
	}
	for _, tick := range ta.check(t, 2) {
		if !tick.Equal(tick.Truncate(time.Second)) {
			t.Errorf("tick %v does not start an epoch-aligned 1s window", tick)
		}
	}
}

// A 1.6s job on a one-second schedule, with a 1s lease TTL, never runs on
// two instances at once: its lease is renewed for as long as it runs, and
// the runs that come meanwhile are skipped on every instance, logged once
// per instance, not at every run.
func TestFleetLongJobNeverOverlaps(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 3, guard.WithTTL(time.Second))
	recs := []*recLogger{{}, {}, {}}
	var running, overlaps atomic.Int32
	var mu sync.Mutex
	var starts []time.Time
	var shutdowns []func()
	for i, l := range lockers {
		s, shutdown := newScheduler(t, gocron.WithDistributedLocker(gocronguard.Locker(l, gocronguard.Logger(recs[i].logger()))))
		mustNewJob(t, s, everySecond(), gocron.NewTask(func(ctx context.Context) {
			if running.Add(1) > 1 {
				overlaps.Add(1)
			}
			defer running.Add(-1)
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			select {
			case <-time.After(1600 * time.Millisecond):
			case <-ctx.Done(): // shutdown at the end of the test
			}
		}), gocron.WithName("rebuild"))
		s.Start()
		shutdowns = append(shutdowns, shutdown)
	}
	time.Sleep(4500 * time.Millisecond)
	for _, shutdown := range shutdowns {
		shutdown()
	}

	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d runs overlapped another", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) < 2 {
		t.Fatalf("%d runs, want at least 2", len(starts))
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < 1600*time.Millisecond {
			t.Errorf("run %d started %v after the previous one, which runs 1.6s", i, gap)
		}
	}
	busy := 0
	for i, rec := range recs {
		n := len(rec.all("info", "gocronguard: skip", "still running"))
		if n > 1 {
			t.Errorf("instance %d logged %d busy skips within a minute, want at most 1; log:\n%s", i, n, rec)
		}
		busy += n
		if errs := rec.all("error", "gocronguard: job not run", ""); len(errs) > 0 {
			t.Errorf("instance %d: errors logged:\n%s", i, rec)
		}
	}
	if busy < 1 {
		t.Error("no run was logged as skipped while the job ran")
	}
}

// A Task that runs two and a half times its 1s TTL keeps its lease throughout: its
// context is never canceled, and the other instance's runs meanwhile find
// the job busy.
func TestTaskLongerThanTTLKeepsLease(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 2, guard.WithTTL(time.Second))
	done := make(chan error, 2)
	var runs atomic.Int32
	rec := &recLogger{}
	var shutdowns []func()
	for _, l := range lockers {
		s, shutdown := newScheduler(t)
		mustNewJob(t, s, everySecond(), gocronguard.Task(l, "long", func(ctx context.Context) error {
			if runs.Add(1) > 1 {
				return nil // the test looks at the first run only
			}
			select {
			case <-time.After(2500 * time.Millisecond):
				done <- nil
			case <-ctx.Done():
				done <- context.Cause(ctx)
			}
			return nil
		}, gocronguard.Logger(rec.logger())), gocron.WithName("long"))
		s.Start()
		shutdowns = append(shutdowns, shutdown)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run did not end within 10s")
	}
	for _, shutdown := range shutdowns {
		shutdown()
	}
	if err != nil {
		t.Errorf("the run's context was canceled: %v", err)
	}
	if len(rec.all("info", "gocronguard: skip", "still running")) == 0 {
		t.Errorf("no run was skipped as busy while the first ran; log:\n%s", rec)
	}
	if lost := rec.all("warn", "gocronguard: lease lost during the run", ""); len(lost) > 0 {
		t.Errorf("lease lost: %v", lost)
	}
}

// A partition between an instance and Redis cancels its running Task's
// context, with a cause matching guard.ErrLeaseLost, before the other
// instance, which still reaches Redis, starts the job; the other's fencing
// token is higher.
func TestTaskPartitionStopsJobBeforeAnotherRunsIt(t *testing.T) {
	t.Parallel()
	const ttl = 1500 * time.Millisecond
	srv, _ := newFleet(t, 0)
	proxy := faultproxy.New(t, srv.Addr())
	cutOff := newLockerOn(t, redis.NewClient(&redis.Options{
		Addr: proxy.Addr(), DialTimeout: 300 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1,
	}), guard.WithTTL(ttl))
	other := newLocker(t, srv.Addr(), guard.WithTTL(ttl))
	const name = "partition"

	type run struct {
		at    time.Time
		token int64
		cause error // the holder's, when told to stop
	}
	started, stopped, otherStarted := make(chan run, 1), make(chan run, 1), make(chan run, 1)
	a, shutdownA := newScheduler(t)
	mustNewJob(t, a, everySecond(), gocronguard.Task(cutOff, name, func(ctx context.Context) error {
		token, _ := guard.TokenFrom(ctx, name)
		select {
		case started <- run{at: time.Now(), token: token}:
		default:
			return nil // the test looks at the first run only
		}
		select {
		case <-ctx.Done():
			stopped <- run{at: time.Now(), cause: context.Cause(ctx)}
		case <-time.After(10 * time.Second):
			stopped <- run{}
		}
		return ctx.Err()
	}), gocron.WithName(name))
	a.Start()
	var first run
	select {
	case first = <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the first instance did not run the job within 5s")
	}

	b, shutdownB := newScheduler(t)
	mustNewJob(t, b, everySecond(), gocronguard.Task(other, name, func(ctx context.Context) error {
		token, _ := guard.TokenFrom(ctx, name)
		select {
		case otherStarted <- run{at: time.Now(), token: token}:
		default:
		}
		return nil
	}), gocron.WithName(name))
	b.Start()
	time.Sleep(ttl / 2) // renewals go through; b's runs find the job busy
	proxy.Blackhole(true)
	cut := time.Now()

	var told, took run
	select {
	case told = <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the cut-off run was not told to stop within 10s")
	}
	select {
	case took = <-otherStarted:
	case <-time.After(10 * time.Second):
		t.Fatal("the other instance did not run the job within 10s")
	}
	proxy.Blackhole(false)
	shutdownB()
	shutdownA()

	if told.at.IsZero() || !errors.Is(told.cause, guard.ErrLeaseLost) {
		t.Fatalf("the cut-off run: %+v, want its context canceled with guard.ErrLeaseLost", told)
	}
	t.Logf("after the cut: told to stop at %v, the other instance started at %v",
		told.at.Sub(cut).Round(time.Millisecond), took.at.Sub(cut).Round(time.Millisecond))
	if !told.at.Before(took.at) {
		t.Errorf("told to stop %v after the cut, but the other instance started %v after it",
			told.at.Sub(cut), took.at.Sub(cut))
	}
	if took.token <= first.token {
		t.Errorf("fencing token %d after %d", took.token, first.token)
	}
}

// Shutdown cancels a running job's context, waits for it, and the lease is
// released, not left to expire (the TTL is the default 30s): with a Locker
// when gocron unlocks, with a Task when fn returns. While a Task winds
// down, its lease is still held.
func TestShutdownReleases(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 2)
	l, probe := lockers[0], lockers[1]

	// stopAfterStart starts s, waits for its job to start, checks that key
	// is held, shuts s down and checks that key is free.
	stopAfterStart := func(t *testing.T, s gocron.Scheduler, shutdown func(), started <-chan struct{}, key string) {
		t.Helper()
		s.Start()
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatal("the job did not start within 5s")
		}
		if isFree(t, probe, key) {
			t.Fatalf("%q is free while the job runs", key)
		}
		shutdown()
		if !isFree(t, probe, key) {
			t.Errorf("%q is still held after Shutdown", key)
		}
	}

	t.Run("locker", func(t *testing.T) {
		t.Parallel()
		s, shutdown := newScheduler(t, gocron.WithDistributedLocker(gocronguard.Locker(l)))
		started := make(chan struct{}, 1)
		mustNewJob(t, s, everySecond(), gocron.NewTask(func(ctx context.Context) {
			select {
			case started <- struct{}{}:
			default:
			}
			<-ctx.Done()
		}), gocron.WithName("locker-job"))
		stopAfterStart(t, s, shutdown, started, "gocron:locker-job")
	})

	t.Run("task", func(t *testing.T) {
		t.Parallel()
		s, shutdown := newScheduler(t)
		started := make(chan struct{}, 1)
		heldWhileStopping := make(chan error, 1)
		mustNewJob(t, s, everySecond(), gocronguard.Task(l, "task-job", func(ctx context.Context) error {
			select {
			case started <- struct{}{}:
			default:
			}
			<-ctx.Done()
			_, err := probe.Acquire(context.Background(), "task-job", guard.Wait(0))
			heldWhileStopping <- err
			return ctx.Err()
		}), gocron.WithName("task-job"))
		stopAfterStart(t, s, shutdown, started, "task-job")
		if err := <-heldWhileStopping; !errors.Is(err, guard.ErrNotAcquired) {
			t.Errorf("Acquire while the Task wound down: %v, want guard.ErrNotAcquired", err)
		}
	})
}

// Jobs made with Task and no WithName on a scheduler with a Locker all
// have the same name in gocron; the Locker lets them through, so each runs
// at every tick instead of sharing one lease and one claim. A named one
// holds the Locker's lease ("gocron:" + name) and its own (name): it runs
// too.
func TestTasksOnALockedScheduler(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 1)
	l := lockers[0]
	s, shutdown := newScheduler(t, gocron.WithDistributedLocker(gocronguard.Locker(l)))
	var a, b, c atomic.Int32
	count := func(n *atomic.Int32) func(context.Context) error {
		return func(context.Context) error { n.Add(1); return nil }
	}
	mustNewJob(t, s, everySecond(), gocronguard.Task(l, "a", count(&a)))
	mustNewJob(t, s, everySecond(), gocronguard.Task(l, "b", count(&b)))
	mustNewJob(t, s, everySecond(), gocronguard.Task(l, "c", count(&c)), gocron.WithName("c"))
	s.Start()
	ok := waitFor(5*time.Second, func() bool { return a.Load() >= 2 && b.Load() >= 2 && c.Load() >= 2 })
	shutdown()
	if !ok {
		t.Errorf("runs: a %d, b %d, c %d; want each at least 2", a.Load(), b.Load(), c.Load())
	}
}

// A Task run that does not start returns nil to gocron when it is a skip
// (the job runs elsewhere), and the error when Redis cannot be reached:
// gocron counts only that one as failed.
func TestTaskNotRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		prepare func(t *testing.T, srv *redistest.Server, l *guard.Locker)
		failed  bool   // gocron sees an error
		level   string // of the log line
		msg     string
	}{
		{"busy", func(t *testing.T, srv *redistest.Server, l *guard.Locker) {
			holder := newLocker(t, srv.Addr())
			le, err := holder.Acquire(t.Context(), "not-run")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = le.Release(context.Background()) })
		}, false, "info", "gocronguard: skip"},
		{"redis down", func(t *testing.T, srv *redistest.Server, l *guard.Locker) {
			srv.Kill(t)
		}, true, "error", "gocronguard: job not run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := newFleet(t, 0)
			l := newLockerOn(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1}))
			tt.prepare(t, srv, l)
			rec := &recLogger{}
			outcome := make(chan error, 1)
			var called atomic.Bool
			s, shutdown := newScheduler(t)
			mustNewJob(t, s, gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
				gocronguard.Task(l, "not-run", func(context.Context) error { called.Store(true); return nil }, gocronguard.Logger(rec.logger())),
				gocron.WithName("not-run"),
				gocron.WithEventListeners(
					gocron.AfterJobRuns(func(uuid.UUID, string) { outcome <- nil }),
					gocron.AfterJobRunsWithError(func(_ uuid.UUID, _ string, err error) { outcome <- err })))
			s.Start()
			var err error
			select {
			case err = <-outcome:
			case <-time.After(10 * time.Second):
				t.Fatal("the run did not end within 10s")
			}
			shutdown()
			if called.Load() {
				t.Error("fn was called")
			}
			if (err != nil) != tt.failed {
				t.Errorf("gocron saw %v; want an error: %v", err, tt.failed)
			}
			if len(rec.all(tt.level, tt.msg, "")) != 1 {
				t.Errorf("want one %s %q; log:\n%s", tt.level, tt.msg, rec)
			}
		})
	}
}
