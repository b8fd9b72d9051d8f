package cronguard_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/cronguard"
	"github.com/jobguard/jobguard/guard"
)

// A 2.5s job on a one-second schedule with Permits(2), on three instances:
// each tick still runs at most once, up to two runs overlap and never
// three, and the ticks that find two runs going are skipped.
func TestPermitsLetRunsOverlap(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 3)
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	recs := []*recLogger{{}, {}, {}}
	var mu sync.Mutex
	running, peak := 0, 0
	var ta tally
	var stops []func()
	for i, l := range lockers {
		job := cronguard.Func(l, "overlapping", func(ctx context.Context) error {
			tick, _ := cronguard.Tick(ctx)
			ta.add(tick)
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			defer func() {
				mu.Lock()
				running--
				mu.Unlock()
			}()
			select {
			case <-time.After(2500 * time.Millisecond):
			case <-ctx.Done(): // shutdown at the end of the test
			}
			return nil
		}, cronguard.Spec("* * * * * *"), cronguard.Permits(2), cronguard.Logger(recs[i].logger()), cronguard.BaseContext(base))
		stops = append(stops, startCron(t, "* * * * * *", job))
	}
	time.Sleep(6500 * time.Millisecond)
	cancel()
	for _, stop := range stops {
		stop()
	}

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d ticks ran, peak %d runs at once", len(ta.runs), peak)
	if peak != 2 {
		t.Errorf("peak %d runs at once, want 2 with Permits(2)", peak)
	}
	for tick, n := range ta.runs {
		if n != 1 {
			t.Errorf("tick %v ran %d times, want once", time.Unix(tick, 0).UTC(), n)
		}
	}
	busy := 0
	for _, rec := range recs {
		for _, e := range rec.all("cronguard: skip") {
			if e.kv["reason"] == "still running" {
				busy++
			}
		}
		if errs := rec.all("cronguard: job failed"); len(errs) > 0 {
			t.Errorf("job failures logged: %v", errs)
		}
	}
	if busy < 1 {
		t.Errorf("no tick skipped while two runs held both permits")
	}
}

// Permits must be at least 1.
func TestPermitsInvalid(t *testing.T) {
	l := newLocker(t, "127.0.0.1:1") // never dialed
	err := cronguard.Validate(l, "job", cronguard.Spec("@every 1m"), cronguard.Permits(0))
	if !errors.Is(err, guard.ErrInvalid) {
		t.Errorf("Permits(0): err = %v, want guard.ErrInvalid", err)
	}
}
