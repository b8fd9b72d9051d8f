package scenario

import (
	"context"
	"time"

	"github.com/jobguard/jobguard/bench/internal/measure"
	"github.com/jobguard/jobguard/bench/internal/results"
)

// Ping is scenario 1: the round trip of a PING, the floor of any request,
// over up to PingCount sequential PINGs in at most PingWindow.
func Ping(ctx context.Context, r *Runner) (results.Ping, error) {
	rtt, q, err := run(ctx, r, "ping", func(ctx context.Context, env *Env) (measure.Summary, error) {
		c, _ := env.Client()
		if err := c.Ping(ctx).Err(); err != nil { // connect outside the timing
			return measure.Summary{}, err
		}
		rtts := make([]time.Duration, 0, r.Sizes.PingCount)
		end := time.Now().Add(r.Sizes.PingWindow)
		for i := 0; i < r.Sizes.PingCount && time.Now().Before(end); i++ {
			start := time.Now()
			if err := c.Ping(ctx).Err(); err != nil {
				return measure.Summary{}, err
			}
			rtts = append(rtts, time.Since(start))
		}
		return measure.Summarize(rtts), nil
	})
	return results.Ping{Quality: q, RTT: rtt}, err
}
