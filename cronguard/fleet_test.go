package cronguard_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/cronguard"
	"github.com/robfig/cron/v3"
)

// These tests run real cron.Cron schedulers, one per instance, each with
// its own Redis client and Locker, against a real redis-server.

// tally counts the runs of each tick, keyed by the tick's Unix second.
type tally struct {
	mu   sync.Mutex
	runs map[int64]int
}

func (ta *tally) add(tick time.Time) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if ta.runs == nil {
		ta.runs = make(map[int64]int)
	}
	ta.runs[tick.Unix()]++
}

// check fails unless at least min ticks ran, each exactly once, one every
// step from the first to the last.
func (ta *tally) check(t *testing.T, min int, step time.Duration) {
	t.Helper()
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ticks := make([]int64, 0, len(ta.runs))
	for tick, n := range ta.runs {
		ticks = append(ticks, tick)
		if n != 1 {
			t.Errorf("tick %v ran %d times, want once", time.Unix(tick, 0).UTC(), n)
		}
	}
	slices.Sort(ticks)
	if len(ticks) < min {
		t.Fatalf("%d ticks ran (%v), want at least %d", len(ticks), ticks, min)
	}
	s := int64(step / time.Second)
	for i, tick := range ticks {
		if tick%s != 0 {
			t.Errorf("tick %v is not a multiple of %v since the epoch", time.Unix(tick, 0).UTC(), step)
		}
		if i > 0 && tick != ticks[i-1]+s {
			t.Errorf("no run between ticks %v and %v", time.Unix(ticks[i-1], 0).UTC(), time.Unix(tick, 0).UTC())
		}
	}
}

// Three instances run the same every-second job: each tick runs on exactly
// one of them, also when one instance starts its runs 300ms late, and that
// late instance names each firing by the second cron fired it for.
func TestEveryTickRunsOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []cronguard.Option
		late time.Duration // instance 0 starts each run this late
	}{
		{"spec", []cronguard.Option{cronguard.Spec("* * * * * *")}, 0},
		{"spec, one instance 300ms late", []cronguard.Option{cronguard.Spec("* * * * * *")}, 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, lockers := newFleet(t, 3)
			const name = "every-second"
			var ta tally
			var lateMu sync.Mutex
			var lateTick time.Time // the tick instance 0's current firing got
			var lateChecked atomic.Int32
			var stops []func()
			for i, l := range lockers {
				rec := &recLogger{}
				if i == 0 {
					rec.onEntry = func(e entry) {
						if tick, ok := e.kv["tick"].(time.Time); ok {
							lateMu.Lock()
							lateTick = tick
							lateMu.Unlock()
						}
					}
				}
				var job cron.Job = cronguard.Func(l, name, func(ctx context.Context) error {
					tick, ok := cronguard.Tick(ctx)
					if !ok || cronguard.JobName(ctx) != name {
						t.Errorf("run context: tick %v, %v, name %q", tick, ok, cronguard.JobName(ctx))
					}
					if i == 0 {
						lateMu.Lock()
						lateTick = tick
						lateMu.Unlock()
					}
					ta.add(tick)
					time.Sleep(time.Millisecond) // a 1ms job
					return nil
				}, slices.Concat(tt.opts, []cronguard.Option{cronguard.Logger(rec.logger())})...)
				if i == 0 && tt.late > 0 {
					job = lateJob(t, job, tt.late, func() time.Time {
						lateMu.Lock()
						defer lateMu.Unlock()
						return lateTick
					}, &lateChecked)
				}
				stops = append(stops, startCron(t, "* * * * * *", job))
			}
			time.Sleep(5500 * time.Millisecond)
			for _, stop := range stops {
				stop()
			}
			ta.check(t, 5, time.Second)
			if tt.late > 0 && lateChecked.Load() < 4 {
				t.Errorf("the late instance fired %d times, want at least 4", lateChecked.Load())
			}
		})
	}
}

// lateJob starts job late after cron fires it, and checks that the run
// named the firing by the second cron fired it for (read back with tick).
func lateJob(t *testing.T, job cron.Job, late time.Duration, tick func() time.Time, checked *atomic.Int32) cron.Job {
	return cron.FuncJob(func() {
		fired := time.Now().Truncate(time.Second)
		time.Sleep(late)
		job.Run()
		if got := tick(); !got.Equal(fired) {
			t.Errorf("firing of %v, started %v late: tick %v", fired, late, got)
		}
		checked.Add(1)
	})
}

// Instances whose clocks are up to 0.9s apart (each fires when its own
// clock reads the whole second, as its cron would) still run each tick of
// an every-second job once.
func TestSkewedClocksRunEachTickOnce(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 3)
	offsets := []time.Duration{-450 * time.Millisecond, 0, 450 * time.Millisecond}
	const name, ticks = "skewed", 4
	first := time.Now().Truncate(time.Second).Add(time.Second)
	var ta tally
	var wg sync.WaitGroup
	for i, l := range lockers {
		off := offsets[i]
		job := cronguard.Func(l, name, func(ctx context.Context) error {
			tick, _ := cronguard.Tick(ctx)
			ta.add(tick)
			time.Sleep(time.Millisecond)
			return nil
		}, cronguard.Spec("* * * * * *"), cronguard.Clock(func() time.Time { return time.Now().Add(off) }))
		wg.Go(func() {
			for k := range ticks {
				local := first.Add(time.Duration(k) * time.Second)
				time.Sleep(time.Until(local.Add(-off))) // when this clock reads local
				job.Run()
			}
		})
	}
	wg.Wait()
	ta.check(t, ticks, time.Second)
	if got := len(ta.runs); got != ticks {
		t.Errorf("%d ticks ran, want %d", got, ticks)
	}
}

// A 2.5s job on a one-second schedule never runs on two instances at once:
// the ticks that come during a run are skipped, logged at Info once per
// minute on each instance, not at every tick.
func TestLongJobNeverOverlaps(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 3)
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	recs := []*recLogger{{}, {}, {}}
	var running, overlaps atomic.Int32
	var mu sync.Mutex
	var starts []time.Time
	var stops []func()
	for i, l := range lockers {
		rec := recs[i]
		job := cronguard.Func(l, "slow", func(ctx context.Context) error {
			if running.Add(1) > 1 {
				overlaps.Add(1)
			}
			defer running.Add(-1)
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			select {
			case <-time.After(2500 * time.Millisecond):
			case <-ctx.Done(): // shutdown at the end of the test
			}
			return nil
		}, cronguard.Spec("* * * * * *"), cronguard.Logger(rec.logger()), cronguard.BaseContext(base))
		stops = append(stops, startCron(t, "* * * * * *", job))
	}
	time.Sleep(6500 * time.Millisecond)
	cancel()
	for _, stop := range stops {
		stop()
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
		if gap := starts[i].Sub(starts[i-1]); gap < 2500*time.Millisecond {
			t.Errorf("run %d started %v after the previous one, which runs 2.5s", i, gap)
		}
	}
	busy := 0
	for i, rec := range recs {
		n := 0
		for _, e := range rec.info("cronguard: skip") {
			if e.kv["reason"] == "still running" {
				n++
			}
		}
		if n > 1 {
			t.Errorf("instance %d logged %d ticks skipped as still running within a minute, want at most 1; log:\n%s", i, n, rec)
		}
		busy += n
		if errs := rec.all("cronguard: job failed"); len(errs) > 0 {
			t.Errorf("job failures logged: %v", errs)
		}
	}
	if busy < 1 {
		t.Errorf("no tick logged as skipped while the job ran")
	}
}

// An @every 2s job on instances started 700ms apart (so each fires at its
// own phase) runs once per epoch-aligned 2s bucket.
func TestEveryRunsOncePerBucket(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 3)
	const spec = "@every 2s"
	var ta tally
	rec := &recLogger{}
	start := time.Now()
	var stops []func()
	for i, l := range lockers {
		time.Sleep(time.Until(start.Add(time.Duration(i) * 700 * time.Millisecond)))
		job := cronguard.Func(l, "every-2s", func(ctx context.Context) error {
			tick, _ := cronguard.Tick(ctx)
			ta.add(tick)
			return nil
		}, cronguard.Spec(spec), cronguard.Logger(rec.logger()))
		stops = append(stops, startCron(t, spec, job))
	}
	time.Sleep(time.Until(start.Add(7500 * time.Millisecond)))
	for _, stop := range stops {
		stop()
	}
	ta.check(t, 3, 2*time.Second)
	if skips := len(rec.all("cronguard: skip")); skips < 4 {
		t.Errorf("%d firings skipped, want at least 4 (three instances, one run per bucket); log:\n%s", skips, rec)
	}
}
