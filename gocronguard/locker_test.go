package gocronguard_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jobguard/jobguard/gocronguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

// These tests call a Locker as gocron does: Lock(ctx, name) before a run,
// Unlock(ctx) after it.

// mustLock locks name with lk, failing the test on an error.
func mustLock(t *testing.T, lk gocron.Locker, name string) gocron.Lock {
	t.Helper()
	lock, err := lk.Lock(t.Context(), name)
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	return lock
}

func mustUnlock(t *testing.T, lock gocron.Lock) {
	t.Helper()
	if err := lock.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// Three instances run the same tick (their clocks read the same instant):
// the first to ask runs it; the others skip it with ErrTickClaimed, also
// once the first run is over and its lease released.
func TestLockOncePerTick(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 3)
	at := time.Date(2026, 1, 10, 3, 0, 0, 2e6, time.UTC)
	var lks []gocron.Locker
	recs := []*recLogger{{}, {}, {}}
	for i, l := range lockers {
		lks = append(lks, gocronguard.Locker(l, gocronguard.Clock(func() time.Time { return at }), gocronguard.Logger(recs[i].logger())))
	}
	lock := mustLock(t, lks[0], "nightly")
	if _, err := lks[1].Lock(t.Context(), "nightly"); !errors.Is(err, gocronguard.ErrTickClaimed) {
		t.Errorf("second instance while the first runs: err = %v, want ErrTickClaimed", err)
	}
	mustUnlock(t, lock)
	if _, err := lks[2].Lock(t.Context(), "nightly"); !errors.Is(err, gocronguard.ErrTickClaimed) {
		t.Errorf("third instance after the run: err = %v, want ErrTickClaimed", err)
	}
	for i, rec := range recs[1:] {
		if n := len(rec.all("debug", "gocronguard: skip", "tick already claimed")); n != 1 {
			t.Errorf("instance %d logged %d skips at Debug, want 1; log:\n%s", i+2, n, rec)
		}
	}
	// The next tick is another run.
	at = at.Add(time.Second)
	mustUnlock(t, mustLock(t, lks[1], "nightly"))
}

// Runs never overlap: with NoDedupe, a second instance whose run comes
// while the first still runs gets ErrBusy, which also matches
// guard.ErrNotAcquired and tells how long the holder's lease has left; once
// the first run is over, the job is free.
func TestLockBusy(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 2)
	rec := &recLogger{}
	a := gocronguard.Locker(lockers[0], gocronguard.NoDedupe())
	b := gocronguard.Locker(lockers[1], gocronguard.NoDedupe(), gocronguard.Logger(rec.logger()))
	lock := mustLock(t, a, "report")
	for range 3 {
		_, err := b.Lock(t.Context(), "report")
		if !errors.Is(err, gocronguard.ErrBusy) || !errors.Is(err, guard.ErrNotAcquired) {
			t.Fatalf("Lock while another instance runs: err = %v, want ErrBusy and guard.ErrNotAcquired", err)
		}
		if left, ok := guard.HeldFor(err); !ok || left <= 0 {
			t.Errorf("HeldFor = %v, %v; want the holder's time left", left, ok)
		}
	}
	// Logged once, not at every run.
	if n := len(rec.all("info", "gocronguard: skip", "still running")); n != 1 {
		t.Errorf("%d busy skips logged, want 1; log:\n%s", n, rec)
	}
	mustUnlock(t, lock)
	mustUnlock(t, mustLock(t, b, "report"))
}

// The lease key is "gocron:" + the job's name unless Prefix or KeyFunc
// says otherwise; it is held from Lock to Unlock.
func TestLockKeys(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 2)
	tests := []struct {
		name string
		opts []gocronguard.Option
		key  string
	}{
		{"default", nil, "gocron:report"},
		{"prefix", []gocronguard.Option{gocronguard.Prefix("billing:")}, "billing:report"},
		{"no prefix", []gocronguard.Option{gocronguard.Prefix("")}, "report"},
		{"key func", []gocronguard.Option{gocronguard.KeyFunc(func(n string) string { return "jobs/" + strings.ToUpper(n) })}, "jobs/REPORT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lk := gocronguard.Locker(lockers[0], append(tt.opts, gocronguard.NoDedupe())...)
			lock := mustLock(t, lk, "report")
			if isFree(t, lockers[1], tt.key) {
				t.Errorf("%q is free while the job runs", tt.key)
			}
			mustUnlock(t, lock)
			if !isFree(t, lockers[1], tt.key) {
				t.Errorf("%q is held after Unlock", tt.key)
			}
		})
	}
}

// A key that KeyFunc makes and guard cannot take fails the run, logged at
// Error: it is not taken for a busy job.
func TestLockBadKey(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 1)
	for _, key := range []string{"", "a}b"} {
		rec := &recLogger{}
		lk := gocronguard.Locker(lockers[0], gocronguard.KeyFunc(func(string) string { return key }), gocronguard.Logger(rec.logger()))
		_, err := lk.Lock(t.Context(), "report")
		if !errors.Is(err, guard.ErrInvalid) || errors.Is(err, gocronguard.ErrBusy) {
			t.Errorf("key %q: err = %v, want guard.ErrInvalid", key, err)
		}
		if n := len(rec.all("error", "gocronguard: job not run", "")); n != 1 {
			t.Errorf("key %q: %d errors logged, want 1; log:\n%s", key, n, rec)
		}
	}
}

// Redis unreachable is an error, logged at Error, never taken for a busy
// job or a claimed tick.
func TestLockRedisDown(t *testing.T) {
	t.Parallel()
	srv, _ := newFleet(t, 0)
	l := newLockerOn(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1}))
	srv.Kill(t)
	for _, opts := range [][]gocronguard.Option{nil, {gocronguard.NoDedupe()}} {
		rec := &recLogger{}
		lk := gocronguard.Locker(l, append(opts, gocronguard.Logger(rec.logger()))...)
		_, err := lk.Lock(t.Context(), "report")
		if err == nil || errors.Is(err, gocronguard.ErrBusy) || errors.Is(err, gocronguard.ErrTickClaimed) {
			t.Errorf("err = %v, want Redis's error", err)
		}
		if n := len(rec.all("error", "gocronguard: job not run", "")); n != 1 || len(rec.all("info", "gocronguard: skip", "")) != 0 {
			t.Errorf("want one Error and no skip; log:\n%s", rec)
		}
	}
}

// Instances whose clocks are up to 0.9s apart, each asking for the lock
// when its own clock reads a whole second (as its scheduler fires a
// CronJob), run each tick once.
func TestLockSkewedClocks(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 3)
	offsets := []time.Duration{-450 * time.Millisecond, 0, 450 * time.Millisecond}
	const ticks = 3
	first := time.Now().Truncate(time.Second).Add(time.Second)
	var ta tally
	var wg sync.WaitGroup
	for i, l := range lockers {
		off := offsets[i]
		lk := gocronguard.Locker(l, gocronguard.Clock(func() time.Time { return time.Now().Add(off) }))
		wg.Go(func() {
			for k := range ticks {
				local := first.Add(time.Duration(k) * time.Second)
				time.Sleep(time.Until(local.Add(-off))) // when this clock reads local
				lock, err := lk.Lock(context.Background(), "skewed")
				switch {
				case errors.Is(err, gocronguard.ErrTickClaimed):
				case err != nil:
					t.Errorf("instance %d: %v", i, err)
				default:
					ta.add(local)
					time.Sleep(time.Millisecond) // a 1ms job
					if err := lock.Unlock(context.Background()); err != nil {
						t.Errorf("instance %d: Unlock: %v", i, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if got := ta.check(t, ticks); len(got) != ticks {
		t.Errorf("%d ticks ran, want %d", len(got), ticks)
	}
}

// A lease lost during a run (here its key is deleted behind its back) is
// logged when gocron unlocks, naming the job, and Unlock returns the loss.
func TestUnlockAfterLostLease(t *testing.T) {
	t.Parallel()
	srv, lockers := newFleet(t, 1, guard.WithTTL(time.Second))
	rec := &recLogger{}
	lk := gocronguard.Locker(lockers[0], gocronguard.Logger(rec.logger()))
	lock := mustLock(t, lk, "report")
	if err := srv.Client(t).Del(t.Context(), "guard:{gocron:report}").Err(); err != nil {
		t.Fatal(err)
	}
	// The next renewal, within a third of the TTL, finds the key gone.
	time.Sleep(time.Second)
	if err := lock.Unlock(t.Context()); !errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("Unlock = %v, want guard.ErrLeaseLost", err)
	}
	if n := len(rec.all("warn", "gocronguard: lease lost during the run", "")); n != 1 {
		t.Errorf("want the loss logged once; log:\n%s", rec)
	}
}

// gocron names a job made with Task and no WithName after Task's function,
// the same for every such job: a Locker lets their runs through, since a
// Task guards itself, instead of making them share one lease.
func TestLockLetsUnnamedTasksThrough(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 1)
	s, _ := newScheduler(t)
	j := mustNewJob(t, s, gocron.DurationJob(time.Hour), gocronguard.Task(lockers[0], "a", func(context.Context) error { return nil }))
	if j.Name() != gocronguard.TaskFuncName() {
		t.Fatalf("gocron named the job %q, want %q", j.Name(), gocronguard.TaskFuncName())
	}
	lk := gocronguard.Locker(lockers[0])
	a, b := mustLock(t, lk, j.Name()), mustLock(t, lk, j.Name())
	mustUnlock(t, a)
	mustUnlock(t, b)
}
