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
// p50s.
func Sequential(r *Runner, lib string, out *results.Sequential) *Case {
	q := func(s *results.Sequential) *results.Quality { return &s.Quality }
	return newCase("sequential "+lib, out, q, func(ctx context.Context, env *Env) (results.Sequential, error) {
		c, _ := env.Client()
		l, err := locks.New(lib, c, locks.Config{TTL: r.Sizes.TTL})
		if err != nil {
			return results.Sequential{}, err
		}
		defer l.Close()
		res, err := sequential(ctx, r.Sizes, l, c)
		res.Lib = lib
		return res, err
	})
}

func sequential(ctx context.Context, s results.Sizes, l locks.Lib, c *redis.Client) (results.Sequential, error) {
	const key = "seq"
	var res results.Sequential
	op := func() error {
		lease, err := l.Lock(ctx, key)
		if err != nil {
			return err
		}
		return lease.Unlock(ctx)
	}
	for range warmups {
		if err := op(); err != nil {
			return res, err
		}
	}
	ops := make([]time.Duration, 0, s.SeqOps)
	floors := make([]time.Duration, 0, s.SeqOps)
	end := time.Now().Add(s.SeqWindow)
	for i := 0; i < s.SeqOps && time.Now().Before(end); i++ {
		start := time.Now()
		if err := op(); err != nil {
			res.Errors++
			continue
		}
		mid := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			return res, err
		}
		if err := c.Ping(ctx).Err(); err != nil {
			return res, err
		}
		ops, floors = append(ops, mid.Sub(start)), append(floors, time.Since(mid))
	}
	res.Op, res.Floor = measure.Summarize(ops), measure.Summarize(floors)
	res.RatioP50 = measure.Ratio(res.Op.P50us, res.Floor.P50us)
	res.RatioP99 = measure.Ratio(res.Op.P99us, res.Floor.P99us)
	return res, nil
}
