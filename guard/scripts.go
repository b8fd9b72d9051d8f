package guard

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/update.lua
	updateLua string
)

// scripts are compiled per Locker rather than as package variables, keeping
// the package free of global state; redis.NewScript only hashes the source.
type scripts struct {
	acquire, renew, update *redis.Script
}

func newScripts() scripts {
	return scripts{
		acquire: redis.NewScript(preludeLua + acquireLua),
		renew:   redis.NewScript(preludeLua + renewLua),
		update:  redis.NewScript(preludeLua + updateLua),
	}
}

// Results of renew.lua and update.lua.
const (
	resultTaken   = -1 // another owner holds the key
	resultExpired = 0  // the hold is gone and the key is free
	resultOK      = 1
)

// keys are the Redis names of one lock; the {name} hash tag keeps them in
// one Cluster slot.
type keys struct {
	lock, fence, channel, waiters string
}

func (l *Locker) keysFor(name string) keys {
	base := l.cfg.prefix + "{" + name + "}"
	return keys{lock: base, fence: base + ":fence", channel: base + ":released", waiters: base + ":waiters"}
}

// forAcquire and forUpdate are the KEYS of acquire.lua and update.lua.
func (k keys) forAcquire() []string { return []string{k.lock, k.fence, k.waiters, k.channel} }
func (k keys) forUpdate(owner string) []string {
	return []string{k.lock, k.channel, k.waiters, k.lock + ":done:" + owner}
}

// runUpdate runs update.lua: set owner's hold counts. For a final release
// (0, 0), marker is how long Redis remembers that it applied, so a retry can
// tell; markerDrop drops a hold its caller never got, ignoring MinHold.
func (l *Locker) runUpdate(ctx context.Context, k keys, owner string, writes, reads int, marker time.Duration) *redis.Cmd {
	return l.scripts.update.Run(ctx, l.client, k.forUpdate(owner), owner, writes, reads, l.publish, l.idleOn(k), ms(marker))
}

// markerDrop, as runUpdate's marker, drops a hold at once.
const markerDrop = 0

// dropHold frees a hold that was never handed to a caller (an abandoned or
// unacknowledged acquisition), at once and MinHold or not, so it does not
// block the key for its TTL.
func (l *Locker) dropHold(k keys, owner string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := l.runUpdate(ctx, k, owner, 0, 0, markerDrop).Err(); err != nil {
		l.log.Warn("guard: could not drop an abandoned hold; it expires within its TTL", "key", k.lock, "err", err)
	}
}

// redisError turns a Redis reply error into this package's errors.
func redisError(key string, err error) error {
	if err == nil {
		return nil
	}
	if strings.HasPrefix(err.Error(), "WRONGTYPE") {
		return fmt.Errorf("%w: lock %q: %s", ErrWrongType, key, strings.TrimPrefix(err.Error(), "WRONGTYPE "))
	}
	return fmt.Errorf("guard: lock %q: %w", key, err)
}

// isNoScript reports whether err says the script cache lacks a script.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// call runs fn and returns when it does or when ctx is done, whichever comes
// first. go-redis does not interrupt a blocked read when a context is
// canceled, so without this a partitioned server would hold the caller for
// the client's ReadTimeout. An abandoned fn keeps running on a goroutine
// owned by the Locker (Close waits for it) and its result goes to abandoned,
// which may clean up after it (release a lock it turned out to acquire).
func call[T any](ctx context.Context, l *Locker, fn func(context.Context) (T, error), abandoned func(T, error)) (T, error) {
	if ctx.Done() == nil {
		return fn(ctx)
	}
	if ctx.Err() != nil {
		var zero T
		return zero, context.Cause(ctx)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	var claimed atomic.Bool // whoever sets it first owns the result
	// The request outlives a caller that gives up, but not by much: its own
	// deadline stops go-redis's retries and pool waits (and, with the
	// client's ContextTimeoutEnabled, its reads).
	fnCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(l.cfg.requestTimeout, time.Second))
	started := l.runner.run(func() {
		defer cancel()
		v, err := fn(fnCtx)
		if claimed.CompareAndSwap(false, true) {
			done <- result{v, err}
		} else if abandoned != nil {
			abandoned(v, err)
		}
	})
	if !started {
		cancel()
		var zero T
		return zero, ErrClosed
	}
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		if claimed.CompareAndSwap(false, true) {
			var zero T
			return zero, context.Cause(ctx)
		}
		r := <-done
		return r.v, r.err
	}
}
