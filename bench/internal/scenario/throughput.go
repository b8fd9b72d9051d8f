package scenario

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/bench/internal/locks"
	"github.com/jobguard/jobguard/bench/internal/measure"
	"github.com/jobguard/jobguard/bench/internal/results"
	"github.com/redis/go-redis/v9"
)

// Ceiling names the throughput scenario's ceiling: SET then DEL, no lock.
const Ceiling = "set+del"

// Throughput is one round of scenario 3: TPGoroutines goroutines, each on
// a key of its own, acquire and release as fast as they can: up to TPOps
// operations in all, in at most TPWindow. With lib = Ceiling they SET and
// DEL instead. All runs the rounds and combines them with throughputOf.
func Throughput(r *Runner, lib string, round int, out *results.ThroughputRound) *Case {
	q := func(t *results.ThroughputRound) *results.Quality { return &t.Quality }
	name := fmt.Sprintf("throughput %s round %d", lib, round+1)
	return newCase(name, out, q, func(ctx context.Context, env *Env) (results.ThroughputRound, error) {
		c, counter := env.Client()
		op, closeOp, err := throughputOp(lib, c, r.Sizes)
		if err != nil {
			return results.ThroughputRound{}, err
		}
		defer closeOp()
		// Warm up: open every connection the window will use, load the scripts.
		warm := r.Sizes
		warm.TPOps = 4 * warm.TPGoroutines
		if w := hammer(ctx, warm, op); w.Errors > 0 {
			return results.ThroughputRound{}, fmt.Errorf("warm-up: %s", w.FirstError)
		}
		m, err := startMeter(ctx, env, counter)
		if err != nil {
			return results.ThroughputRound{}, err
		}
		res := hammer(ctx, r.Sizes, op)
		u, err := m.stop(ctx)
		res.Cost = u.perOp(res.Ops)
		return res, err
	})
}

func tpKey(g int) string { return fmt.Sprintf("tp:%d", g) }

// throughputOp returns one operation of lib on c: acquire then release, or
// for the ceiling SET then DEL.
func throughputOp(lib string, c *redis.Client, s results.Sizes) (op func(context.Context, string) error, closeOp func() error, err error) {
	if lib == Ceiling {
		return func(ctx context.Context, key string) error {
			if err := c.Set(ctx, key, "1", 0).Err(); err != nil {
				return err
			}
			return c.Del(ctx, key).Err()
		}, func() error { return nil }, nil
	}
	l, err := locks.New(lib, c, locks.Config{TTL: s.TTL})
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, key string) error {
		lease, err := l.Lock(ctx, key)
		if err != nil {
			return err
		}
		return lease.Unlock(ctx)
	}, l.Close, nil
}

// hammer runs op from TPGoroutines goroutines until TPOps operations have
// started or TPWindow has passed, each operation under its own context (see
// OpContext).
func hammer(ctx context.Context, s results.Sizes, op func(context.Context, string) error) results.ThroughputRound {
	var (
		started, done, errs atomic.Int64
		firstErr            atomic.Value
		wg                  sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(s.TPWindow)
	for g := range s.TPGoroutines {
		wg.Go(func() {
			key := tpKey(g)
			worker, cancel := context.WithCancel(ctx)
			defer cancel()
			keyOp := func(ctx context.Context) error { return op(ctx, key) }
			for started.Add(1) <= int64(s.TPOps) && time.Now().Before(end) {
				if err := underOpContext(worker, keyOp); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	res := results.ThroughputRound{Ops: done.Load(), Seconds: secs, Errors: errs.Load()}
	res.OpsPerSec = float64(res.Ops) / secs
	if e, ok := firstErr.Load().(string); ok {
		res.FirstError = e
	}
	return res
}

// throughputOf combines a library's rounds: the median round by ops/s
// gives the figures, and the ratio to the ceiling is the median of each
// round's ratio to the ceiling's round of the same turn, so that a slow
// drift of the machine affects both sides of each ratio alike.
func throughputOf(lib string, goroutines int, rounds, ceiling []results.ThroughputRound) results.Throughput {
	ratios := make([]float64, len(rounds))
	for i := range rounds {
		rounds[i].Ratio = measure.Ratio(rounds[i].OpsPerSec, ceiling[i].OpsPerSec)
		ratios[i] = rounds[i].Ratio
	}
	byOps := make([]int, len(rounds))
	for i := range byOps {
		byOps[i] = i
	}
	slices.SortFunc(byOps, func(a, b int) int { return cmp.Compare(rounds[a].OpsPerSec, rounds[b].OpsPerSec) })
	slices.Sort(ratios)
	t := results.Throughput{Lib: lib, Goroutines: goroutines, Rounds: rounds}
	if len(rounds) > 0 {
		t.Median = byOps[len(byOps)/2]
		t.OpsPerSec, t.Cost = rounds[t.Median].OpsPerSec, rounds[t.Median].Cost
		t.RatioToCeiling = ratios[len(ratios)/2]
	}
	return t
}
