// Package locks puts each lock library under test behind one small
// interface, used the way that library's own users use it: guard through its
// public API, redsync with its goredis/v9 pool, bsm/redislock, and a raw
// baseline of SET NX PX plus a compare-and-DEL script.
package locks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotHeld is returned by Lease.Unlock when the library says the lock
// was no longer held by this lease (expired or taken by another owner).
var ErrNotHeld = errors.New("locks: not held at release")

// Config is how a library is set up for one scenario.
type Config struct {
	// TTL is the lock's time to live in Redis.
	TTL time.Duration
	// RetryDelay is the pause between attempts of the libraries that poll
	// a busy key (redsync, redislock, raw). guard waits for a notification.
	RetryDelay time.Duration
	// RenewEvery, when positive, makes the libraries whose callers renew
	// (redsync, redislock) start one goroutine per lease that refreshes it at
	// this period, as their users do. guard renews on its own heartbeat
	// (every TTL/3); the raw baseline never renews.
	RenewEvery time.Duration
}

// Lib is one library on one go-redis client. It is safe for concurrent use.
type Lib interface {
	// Lock takes key, waiting for a busy key in the library's own way until
	// ctx is done or the library gives up.
	Lock(ctx context.Context, key string) (Lease, error)
	// Close releases the library's own resources, not the client.
	Close() error
}

// Lease is one held lock.
type Lease interface {
	// Unlock stops any renewal and releases the lock. It returns ErrNotHeld
	// when the library reports the lock was already gone.
	Unlock(ctx context.Context) error
	// Lost reports whether the library has said the lock was lost: a failed
	// renewal, or (guard) a canceled lease context.
	Lost() bool
}

// Names returns the libraries in the order the reports list them.
func Names() []string {
	return []string{"guard", "guard-nocancel", "redsync", "redislock", "redislock-await", "raw"}
}

// IsVariant reports whether name is another way of calling a library
// named before it (guard-nocancel: guard under contexts that cannot be
// canceled; redislock-await: redislock made to return when its context
// ends), measured only where the two differ.
func IsVariant(name string) bool { return name == "guard-nocancel" || name == "redislock-await" }

// New returns the library called name on client.
func New(name string, client *redis.Client, cfg Config) (Lib, error) {
	if cfg.TTL <= 0 {
		return nil, fmt.Errorf("locks: TTL %v must be positive", cfg.TTL)
	}
	switch name {
	case "guard":
		return newGuard(client, cfg)
	case "guard-nocancel":
		return newGuardNoCancel(client, cfg)
	case "redsync":
		return newRedsync(client, cfg), nil
	case "redislock":
		return newRedislock(client, cfg), nil
	case "redislock-await":
		return newRedislockAwait(client, cfg), nil
	case "raw":
		return newRaw(client, cfg), nil
	}
	return nil, fmt.Errorf("locks: unknown library %q", name)
}

// renewer calls refresh every period on a goroutine of its own until it is
// stopped or a refresh fails; a failure marks the lease lost.
type renewer struct {
	stop chan struct{}
	wg   sync.WaitGroup
	lost atomic.Bool
}

// startRenewer returns nil when every is not positive.
func startRenewer(every time.Duration, refresh func(context.Context) error) *renewer {
	if every <= 0 {
		return nil
	}
	r := &renewer{stop: make(chan struct{})}
	r.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), every)
			err := refresh(ctx)
			cancel()
			if err != nil {
				r.lost.Store(true)
				return
			}
		}
	})
	return r
}

// Stop stops the renewal goroutine and waits for it. Safe on nil.
func (r *renewer) Stop() {
	if r == nil {
		return
	}
	close(r.stop)
	r.wg.Wait()
}

// Lost reports a failed renewal. Safe on nil.
func (r *renewer) Lost() bool { return r != nil && r.lost.Load() }
