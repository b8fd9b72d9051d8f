package measure

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter is a go-redis hook that counts what a client sends: commands, and
// round trips (a pipeline is one round trip of many commands). Add it with
// client.AddHook. Pub/sub traffic does not pass through hooks, and the
// HELLO and CLIENT SETINFO that open each new connection are not counted.
type Counter struct {
	commands   atomic.Int64
	roundTrips atomic.Int64
}

// Counts is a reading of a Counter.
type Counts struct {
	Commands   int64
	RoundTrips int64
}

// Read returns the counts so far.
func (c *Counter) Read() Counts {
	return Counts{Commands: c.commands.Load(), RoundTrips: c.roundTrips.Load()}
}

// Sub returns the change from before to c.
func (c Counts) Sub(before Counts) Counts {
	return Counts{Commands: c.Commands - before.Commands, RoundTrips: c.RoundTrips - before.RoundTrips}
}

// DialHook implements redis.Hook.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setup(cmd) {
			c.commands.Add(1)
			c.roundTrips.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			if !setup(cmd) {
				n++
			}
		}
		if n > 0 {
			c.commands.Add(int64(n))
			c.roundTrips.Add(1)
		}
		return next(ctx, cmds)
	}
}

// setup reports whether cmd is part of opening a connection.
func setup(cmd redis.Cmder) bool {
	name := cmd.Name()
	return name == "hello" || name == "client"
}

var _ redis.Hook = (*Counter)(nil)
