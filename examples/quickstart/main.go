// Quickstart runs a fleet of three simulated instances of one service against
// one Redis and shows what guard gives them: a job runs on one instance at a
// time, fencing tokens only go up, a holder cut off from Redis (its client is
// closed, as a crash or a network partition would leave it: no renewal, no
// release) is told to stop and its key is taken over once its TTL passes, and
// a job whose lease is lost is told to stop.
//
// Every key it leaves in Redis expires: the lease keys with their TTL, the
// fencing counter a minute after the last acquisition (guard.FenceTTL).
//
//	go run ./examples/quickstart                                            # embedded Redis
//	REDIS_URL=redis://127.0.0.1:6379/15 go run ./examples/quickstart        # a real one
//	go run ./examples/quickstart -trace                                     # and print the spans as a tree
//	go run ./examples/quickstart -trace=json                                # or as JSON, as they end
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

// job is the lock key every instance competes for.
const job = "nightly-report"

// fenceTTL lets the key's fencing counter expire a minute after the story
// last acquires it: without it, a run against a real Redis would leave the
// counter there forever. Tokens still only go up while the story runs.
var fenceTTL = guard.FenceTTL(time.Minute)

func main() { exampleenv.Main("quickstart", run) }

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

	admin := dial() // an operator's client, for mischief in the last part
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	var fleet []*instance
	defer func() {
		for _, in := range fleet {
			in.locker.Close() // also when its client is closed: it stops the Locker's goroutines
			in.client.Close()
		}
	}()
	for i := range 3 {
		c := dial()
		l, err := guard.New(c, opts...)
		if err != nil {
			c.Close()
			return err
		}
		fleet = append(fleet, &instance{name: fmt.Sprintf("instance-%d", i+1), client: c, locker: l})
	}

	for round := 1; round <= 3; round++ {
		p.Say("fleet", "--- round %d: every instance starts %s at once", round, job)
		if err := everyoneAtOnce(ctx, p, fleet); err != nil {
			return err
		}
	}
	p.Say("fleet", "--- the holder is cut off from Redis, as a crash would leave it")
	if err := cutOffAndTakeover(ctx, p, fleet[0], fleet[1]); err != nil {
		return err
	}
	p.Say("fleet", "--- the lease is lost while the job runs")
	return leaseLost(ctx, p, fleet[2], admin)
}

// everyoneAtOnce has each instance try the job once, as a cron tick firing
// on the whole fleet does. Wait(0) means: if another instance has it, skip.
func everyoneAtOnce(ctx context.Context, p *exampleenv.Printer, fleet []*instance) error {
	errs := make([]error, len(fleet))
	var wg sync.WaitGroup
	for i, in := range fleet {
		wg.Go(func() {
			errs[i] = in.locker.WithLock(ctx, job, func(ctx context.Context) error {
				token, _ := guard.TokenFrom(ctx, job)
				p.Say(in.name, "runs %s with fencing token %d", job, token)
				time.Sleep(300 * time.Millisecond) // the work; the others try meanwhile
				return nil
			}, guard.Wait(0), fenceTTL)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if errors.Is(err, guard.ErrNotAcquired) {
			p.Say(fleet[i].name, "skipped %s: another instance runs it", job)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// cutOffAndTakeover closes a's Redis client while a holds the job. The
// process lives on, but as with a crash or a partition, it can neither renew
// nor release, so b gets in once the 1s TTL has passed, and not before.
func cutOffAndTakeover(ctx context.Context, p *exampleenv.Printer, a, b *instance) error {
	lease, err := a.locker.Acquire(ctx, job, guard.TTL(time.Second), guard.Wait(0), fenceTTL)
	if err != nil {
		return err
	}
	p.Say(a.name, "holds %s with fencing token %d and a 1s TTL; its Redis client is closed now", job, lease.Token())
	cutOff := time.Now()
	a.client.Close() // no renewal, no release from now on
	// Cut off from Redis, a's heartbeat cannot renew, so a's job is told to
	// stop before the lease could expire, which is before b can get in.
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		<-lease.Context().Done()
		p.Say(a.name, "was told to stop: %v", context.Cause(lease.Context()))
	})
	return b.locker.WithLock(ctx, job, func(ctx context.Context) error {
		token, _ := guard.TokenFrom(ctx, job)
		p.Say(b.name, "took over %s %.2fs after %s was cut off, fencing token %d", job, time.Since(cutOff).Seconds(), a.name, token)
		return nil
	}, guard.Wait(5*time.Second), fenceTTL)
}

// leaseLost deletes the lock behind in's back while its job runs. The next
// renewal finds the lease gone, cancels the job's context with a cause
// matching ErrLeaseLost, and WithLock returns that cause.
func leaseLost(ctx context.Context, p *exampleenv.Printer, in *instance, admin *redis.Client) error {
	err := in.locker.WithLock(ctx, job, func(ctx context.Context) error {
		token, _ := guard.TokenFrom(ctx, job)
		p.Say(in.name, "runs %s with fencing token %d", job, token)
		lockKey := "guard:{" + job + "}" // the default prefix, then the key in a Cluster hash tag
		if err := admin.Del(ctx, lockKey).Err(); err != nil {
			return err
		}
		p.Say("admin", "deleted %s", lockKey)
		select { // a real job checks ctx between steps of its work
		case <-ctx.Done():
			p.Say(in.name, "job context canceled: %v", context.Cause(ctx))
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("the lost lease went unnoticed")
		}
	}, guard.TTL(time.Second), fenceTTL)
	if !errors.Is(err, guard.ErrLeaseLost) {
		return fmt.Errorf("want an error matching guard.ErrLeaseLost, got %v", err)
	}
	p.Say(in.name, "WithLock returned: %v", err)
	return nil
}
