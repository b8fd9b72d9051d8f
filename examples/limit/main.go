// Limit runs a fleet of three workers that all call one partner API, which
// allows two calls at a time, and shows how guard.Permits holds the whole
// fleet to that: every call takes one of the two permits of the key
// "partner-api", so at most two calls run at once across the fleet however
// many goroutines want one; a released permit goes to one waiting call, and
// a worker cut off from Redis (its client is closed, as a crash or a
// network partition would leave it) is told to stop before its permit is
// given to another.
//
//	go run ./examples/limit                                            # embedded Redis
//	REDIS_URL=redis://127.0.0.1:6379/15 go run ./examples/limit        # a real one
//	go run ./examples/limit -trace                                     # and print the spans
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/jobguard/jobguard/examples/internal/exampleenv"
	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

const (
	api     = "partner-api" // the lock key every call takes a permit of
	permits = 2             // the partner's limit
	exports = 12            // calls the fleet has to make
)

// limit is the option every call passes: one of the key's permits. The
// fencing counter expires a minute after the last call, so a run against a
// real Redis leaves nothing behind for ever.
var limit = []guard.LockOption{guard.Permits(permits), guard.FenceTTL(time.Minute)}

func main() { exampleenv.Main("limit", run) }

// instance is one simulated process: its own Redis client and Locker.
type instance struct {
	name   string
	client *redis.Client
	locker *guard.Locker
}

// run tells the story on out; opts go to every instance's Locker.
func run(ctx context.Context, out io.Writer, opts ...guard.Option) error {
	dial, stopRedis, err := exampleenv.Connect()
	if err != nil {
		return err
	}
	defer stopRedis()
	p := exampleenv.NewPrinter(out)

	var fleet []*instance
	defer func() {
		for _, in := range fleet {
			in.locker.Close() // also when its client is closed: it stops the Locker's goroutines
			in.client.Close()
		}
	}()
	for i := range 3 {
		c := dial()
		if err := c.Ping(ctx).Err(); err != nil {
			c.Close()
			return fmt.Errorf("redis: %w", err)
		}
		// A 2s TTL: a worker that crashes holds its permit for 2s at most.
		l, err := guard.New(c, append([]guard.Option{guard.WithTTL(2 * time.Second)}, opts...)...)
		if err != nil {
			c.Close()
			return err
		}
		fleet = append(fleet, &instance{name: fmt.Sprintf("worker-%d", i+1), client: c, locker: l})
	}

	p.Say("fleet", "--- %d exports, 3 workers with 3 goroutines each, %d calls at a time", exports, permits)
	if err := export(ctx, p, fleet); err != nil {
		return err
	}
	p.Say("fleet", "--- a worker holding a permit is cut off from Redis")
	return cutOff(ctx, p, fleet[0], fleet[1], fleet[2])
}

// export has every worker's goroutines take exports from one queue and call
// the API for each, holding a permit for the call.
func export(ctx context.Context, p *exampleenv.Printer, fleet []*instance) error {
	queue := make(chan int, exports)
	for i := range exports {
		queue <- i + 1
	}
	close(queue)
	var mu sync.Mutex
	calling, peak, done := 0, 0, 0
	errs := make(chan error, 3*len(fleet))
	var wg sync.WaitGroup
	for _, in := range fleet {
		for range 3 {
			wg.Go(func() {
				for n := range queue {
					err := in.locker.WithLock(ctx, api, func(ctx context.Context) error {
						mu.Lock()
						calling++
						peak = max(peak, calling)
						now := calling
						mu.Unlock()
						token, _ := guard.TokenFrom(ctx, api)
						p.Say(in.name, "calls the API for export %d (%d of %d permits in use, fencing token %d)", n, now, permits, token)
						time.Sleep(200 * time.Millisecond) // the call
						mu.Lock()
						calling--
						done++
						mu.Unlock()
						return nil
					}, limit...)
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	p.Say("fleet", "%d exports done by 9 goroutines, at most %d calls at a time", done, peak)
	if peak > permits {
		return fmt.Errorf("%d calls at once, more than the %d permits", peak, permits)
	}
	return nil
}

// cutOff has a and b hold both permits and c wait for one, then closes a's
// Redis client: a can neither renew nor release, so its job is told to stop
// before its lease could end, and c gets a's permit once the 2s TTL has
// passed, while b keeps its own.
func cutOff(ctx context.Context, p *exampleenv.Printer, a, b, c *instance) error {
	la, err := a.locker.Acquire(ctx, api, limit...)
	if err != nil {
		return err
	}
	lb, err := b.locker.Acquire(ctx, api, limit...)
	if err != nil {
		return err
	}
	defer lb.Release(context.WithoutCancel(ctx))
	p.Say(a.name, "holds a permit (fencing token %d); %s holds the other (fencing token %d)", la.Token(), b.name, lb.Token())
	_, err = c.locker.Acquire(ctx, api, append(limit, guard.Wait(0))...)
	if !errors.Is(err, guard.ErrNotAcquired) {
		return fmt.Errorf("a third call got in: %v", err)
	}
	p.Say(c.name, "finds both permits taken and waits for one")
	taken := make(chan error, 1)
	cut := make(chan time.Time, 1)
	go func() {
		lc, err := c.locker.Acquire(ctx, api, append(limit, guard.Wait(10*time.Second))...)
		if err == nil {
			cutAt := <-cut
			p.Say(c.name, "took the cut-off worker's permit %.2fs after the cut (fencing token %d)", time.Since(cutAt).Seconds(), lc.Token())
			err = lc.Release(context.WithoutCancel(ctx))
		}
		taken <- err
	}()
	time.Sleep(100 * time.Millisecond) // c is waiting
	cutAt := time.Now()
	cut <- cutAt
	a.client.Close() // no renewal, no release from now on
	p.Say(a.name, "is cut off from Redis")
	<-la.Context().Done()
	p.Say(a.name, "was told to stop %.2fs after the cut: %v", time.Since(cutAt).Seconds(), context.Cause(la.Context()))
	if err := <-taken; err != nil {
		return err
	}
	if err := lb.Context().Err(); err != nil {
		return fmt.Errorf("%s lost its permit: %w", b.name, context.Cause(lb.Context()))
	}
	p.Say(b.name, "kept its permit throughout")
	return nil
}
