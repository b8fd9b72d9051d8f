package scenario

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/bench/internal/locks"
	"github.com/jobguard/jobguard/bench/internal/measure"
	"github.com/jobguard/jobguard/bench/internal/results"
)

// unlockTimeout bounds each release in the hand-off scenario.
const unlockTimeout = 5 * time.Second

// Handoff is scenario 4: waiters goroutines take turns on one key, each
// holding it for hold, until HandoffAcq acquisitions or HandoffWindow. The
// polling libraries retry every RetryDelay.
func Handoff(r *Runner, lib string, waiters int, hold time.Duration, out *results.Handoff) *Case {
	name := fmt.Sprintf("handoff %s w=%d hold=%v", lib, waiters, hold)
	q := func(h *results.Handoff) *results.Quality { return &h.Quality }
	return newCase(name, out, q, func(ctx context.Context, env *Env) (results.Handoff, error) {
		c, counter := env.Client()
		l, err := locks.New(lib, c, locks.Config{TTL: r.Sizes.TTL, RetryDelay: r.Sizes.RetryDelay})
		if err != nil {
			return results.Handoff{}, err
		}
		defer l.Close()
		// Warm up: open the connections and load the scripts.
		if err := fight(ctx, r.Sizes, l, waiters, 0, 2*waiters).err; err != nil {
			return results.Handoff{}, err
		}
		m, err := startMeter(ctx, env, counter)
		if err != nil {
			return results.Handoff{}, err
		}
		f := fight(ctx, r.Sizes, l, waiters, hold, r.Sizes.HandoffAcq)
		u, err := m.stop(ctx)
		res := f.result()
		res.Lib, res.Waiters, res.HoldMs = lib, waiters, float64(hold)/float64(time.Millisecond)
		res.Cost = u.perOp(res.Acquisitions)
		return res, err
	})
}

// baton records who last called unlock and when, and the hand-off
// latencies: from an unlock call to the lock return of another goroutine.
type baton struct {
	mu   sync.Mutex
	from int // goroutine that called unlock last; -1 after a lock return
	at   time.Time
	lats []time.Duration // bounded by its capacity
}

// arrive records goroutine g's lock return at now.
func (b *baton) arrive(g int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.from >= 0 && b.from != g && len(b.lats) < cap(b.lats) {
		b.lats = append(b.lats, now.Sub(b.at))
	}
	b.from = -1
}

// leave records goroutine g's unlock call at now.
func (b *baton) leave(g int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.from, b.at = g, now
}

// fightResult is what one fight saw.
type fightResult struct {
	counts                   []int64 // acquisitions per goroutine
	lats                     []time.Duration
	seconds                  float64
	violations, gaveUp, errs int64
	firstErr                 string
	err                      error // the warm-up's only: a lock never taken
}

// fight runs waiters goroutines that lock, hold and unlock one key until
// maxAcq acquisitions or the HandoffWindow. Overlapping holders are counted
// as violations with an atomic.
func fight(ctx context.Context, s results.Sizes, l locks.Lib, waiters int, hold time.Duration, maxAcq int) fightResult {
	const key = "handoff"
	start := time.Now()
	wctx, cancel := context.WithDeadline(ctx, start.Add(s.HandoffWindow))
	defer cancel()
	var (
		acquired, holders, violations, gaveUp, errs atomic.Int64
		firstErr                                    atomic.Value
		wg                                          sync.WaitGroup
	)
	b := &baton{from: -1, lats: make([]time.Duration, 0, maxAcq)}
	counts := make([]int64, waiters)
	for g := range waiters {
		wg.Go(func() {
			for acquired.Load() < int64(maxAcq) && wctx.Err() == nil {
				lease, err := l.Lock(wctx, key)
				if err != nil {
					if wctx.Err() == nil { // the library gave up inside the window
						gaveUp.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
					continue
				}
				b.arrive(g, time.Now())
				if holders.Add(1) != 1 {
					violations.Add(1)
				}
				counts[g]++
				acquired.Add(1)
				if hold > 0 {
					time.Sleep(hold)
				}
				holders.Add(-1)
				b.leave(g, time.Now())
				uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
				if err := lease.Unlock(uctx); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				ucancel()
			}
		})
	}
	wg.Wait()
	f := fightResult{counts: counts, lats: b.lats, seconds: time.Since(start).Seconds(),
		violations: violations.Load(), gaveUp: gaveUp.Load(), errs: errs.Load()}
	if e, ok := firstErr.Load().(string); ok {
		f.firstErr = e
	}
	if acquired.Load() == 0 {
		f.err = fmt.Errorf("no acquisition in %v (%s)", s.HandoffWindow, f.firstErr)
	}
	return f
}

func (f fightResult) result() results.Handoff {
	res := results.Handoff{
		Seconds: f.seconds, Latency: measure.Summarize(f.lats),
		MinPerWaiter: slices.Min(f.counts), MaxPerWaiter: slices.Max(f.counts),
		Violations: f.violations, GaveUp: f.gaveUp, Errors: f.errs, FirstError: f.firstErr,
	}
	for _, n := range f.counts {
		res.Acquisitions += n
	}
	res.Fairness = measure.Ratio(float64(res.MinPerWaiter), float64(res.MaxPerWaiter))
	return res
}
