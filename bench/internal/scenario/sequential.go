package scenario

import (
	"context"
	"time"

	"github.com/jobguard/jobguard/bench/internal/locks"
	"github.com/jobguard/jobguard/bench/internal/measure"
	"github.com/jobguard/jobguard/bench/internal/results"
	"github.com/redis/go-redis/v9"
)

// warmups is how many operations run untimed first: connections are
// opened and scripts loaded.
const warmups = 20

// Sequential is scenario 2: one goroutine acquires and releases one free
// key, up to SeqOps times in at most SeqWindow. After each operation it
// times two PINGs on the same client, so that the floor is sampled next to
// each operation under the same conditions; the result is the ratio of the
// p50s. Then it runs up to SeqOps operations again in at most SeqWindow,
// without the PINGs, and measures what they cost the client (CPU time,
// allocations) and the server.
func Sequential(r *Runner, lib string, out *results.Sequential) *Case {
	q := func(s *results.Sequential) *results.Quality { return &s.Quality }
	return newCase("sequential "+lib, out, q, func(ctx context.Context, env *Env) (results.Sequential, error) {
		c, counter := env.Client()
		l, err := locks.New(lib, c, locks.Config{TTL: r.Sizes.TTL})
		if err != nil {
			return results.Sequential{}, err
		}
		defer l.Close()
		worker, cancel := context.WithCancel(ctx)
		defer cancel()
		res, err := sequential(worker, r.Sizes, l, c)
		if err != nil {
			return res, err
		}
		res.Lib = lib
		m, err := startMeter(ctx, env, counter)
		if err != nil {
			return res, err
		}
		done, errs := sequentialCost(worker, r.Sizes, l)
		u, err := m.stop(ctx)
		res.CostOps, res.Errors = done, res.Errors+errs
		res.Cost = u.perOp(done)
		return res, err
	})
}

// seqKey is the one key of the sequential scenario.
const seqKey = "seq"

// acquireRelease is one operation of the sequential scenario.
func acquireRelease(l locks.Lib) func(context.Context) error {
	return func(ctx context.Context) error {
		lease, err := l.Lock(ctx, seqKey)
		if err != nil {
			return err
		}
		return lease.Unlock(ctx)
	}
}

// sequential times each operation and the two PINGs after it; worker is
// the context each operation's own is made from.
func sequential(worker context.Context, s results.Sizes, l locks.Lib, c *redis.Client) (results.Sequential, error) {
	var res results.Sequential
	op := acquireRelease(l)
	for range warmups {
		if err := underOpContext(worker, op); err != nil {
			return res, err
		}
	}
	pings := func(ctx context.Context) error {
		if err := c.Ping(ctx).Err(); err != nil {
			return err
		}
		return c.Ping(ctx).Err()
	}
	ops := make([]time.Duration, 0, s.SeqOps)
	floors := make([]time.Duration, 0, s.SeqOps)
	end := time.Now().Add(s.SeqWindow)
	for i := 0; i < s.SeqOps && time.Now().Before(end); i++ {
		ctx, cancel := context.WithCancel(worker)
		start := time.Now()
		err := op(ctx)
		mid := time.Now()
		if err != nil {
			cancel()
			res.Errors++
			continue
		}
		err = pings(ctx)
		floor := time.Since(mid)
		cancel()
		if err != nil {
			return res, err
		}
		ops, floors = append(ops, mid.Sub(start)), append(floors, floor)
	}
	res.Op, res.Floor = measure.Summarize(ops), measure.Summarize(floors)
	res.RatioP50 = measure.Ratio(res.Op.P50us, res.Floor.P50us)
	res.RatioP99 = measure.Ratio(res.Op.P99us, res.Floor.P99us)
	return res, nil
}

// sequentialCost runs up to SeqOps operations in at most SeqWindow, each
// under its own context, and returns how many succeeded and failed.
func sequentialCost(worker context.Context, s results.Sizes, l locks.Lib) (done, errs int64) {
	op := acquireRelease(l)
	end := time.Now().Add(s.SeqWindow)
	for i := 0; i < s.SeqOps && time.Now().Before(end); i++ {
		if err := underOpContext(worker, op); err != nil {
			errs++
			continue
		}
		done++
	}
	return done, errs
}
