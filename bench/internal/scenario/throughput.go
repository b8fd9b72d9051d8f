package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/bench/internal/locks"
	"github.com/jobguard/jobguard/bench/internal/results"
	"github.com/redis/go-redis/v9"
)

// Ceiling names the throughput scenario's ceiling: SET then DEL, no lock.
const Ceiling = "set+del"

// Throughput is scenario 3: TPGoroutines goroutines, each on a key of its
// own, acquire and release as fast as they can: up to TPOps operations in
// all, in at most TPWindow. With lib = Ceiling they SET and DEL instead.
// The ratio to the ceiling is filled in by All.
func Throughput(r *Runner, lib string, out *results.Throughput) *Case {
	q := func(t *results.Throughput) *results.Quality { return &t.Quality }
	return newCase("throughput "+lib, out, q, func(ctx context.Context, env *Env) (results.Throughput, error) {
		c, counter := env.Client()
		op, closeOp, err := throughputOp(lib, c, r.Sizes)
		if err != nil {
			return results.Throughput{}, err
		}
		defer closeOp()
		// Warm up: open every connection the window will use, load the scripts.
		warm := r.Sizes
		warm.TPOps = 4 * warm.TPGoroutines
		if w := hammer(ctx, warm, op); w.Errors > 0 {
			return results.Throughput{}, fmt.Errorf("warm-up: %s", w.FirstError)
		}
		m, err := startMeter(ctx, env, counter)
		if err != nil {
			return results.Throughput{}, err
		}
		res := hammer(ctx, r.Sizes, op)
		u, err := m.stop(ctx)
		res.Lib, res.Cost = lib, u.perOp(res.Ops)
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
// started or TPWindow has passed.
func hammer(ctx context.Context, s results.Sizes, op func(context.Context, string) error) results.Throughput {
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
			for started.Add(1) <= int64(s.TPOps) && time.Now().Before(end) {
				if err := op(ctx, key); err != nil {
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
	res := results.Throughput{Goroutines: s.TPGoroutines, Ops: done.Load(), Seconds: secs, Errors: errs.Load()}
	res.OpsPerSec = float64(res.Ops) / secs
	if e, ok := firstErr.Load().(string); ok {
		res.FirstError = e
	}
	return res
}
