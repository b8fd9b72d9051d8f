package scenario

import (
	"context"
	"time"

	"github.com/jobguard/jobguard/bench/internal/measure"
	"github.com/jobguard/jobguard/bench/internal/results"
)

// Ping is scenario 1: the round trip of a PING, the floor of any request,
// over up to PingCount sequential PINGs in at most PingWindow.
func Ping(r *Runner, out *results.Ping) *Case {
	q := func(p *results.Ping) *results.Quality { return &p.Quality }
	return newCase("ping", out, q, func(ctx context.Context, env *Env) (results.Ping, error) {
		c, _ := env.Client()
		if err := c.Ping(ctx).Err(); err != nil { // connect outside the timing
			return results.Ping{}, err
		}
		rtts := make([]time.Duration, 0, r.Sizes.PingCount)
		end := time.Now().Add(r.Sizes.PingWindow)
		for i := 0; i < r.Sizes.PingCount && time.Now().Before(end); i++ {
			start := time.Now()
			if err := c.Ping(ctx).Err(); err != nil {
				return results.Ping{}, err
			}
			rtts = append(rtts, time.Since(start))
		}
		return results.Ping{RTT: measure.Summarize(rtts)}, nil
	})
}
