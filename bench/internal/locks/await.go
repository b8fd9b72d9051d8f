package locks

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// ErrStopped is returned by Workers.Await after Workers.Stop.
var ErrStopped = errors.New("locks: workers stopped")

// redislockAwait is redislock made to return when its caller's context
// ends, as guard's calls do, in a plain way that works with go-redis
// (which does not interrupt a read when a context is canceled): each try
// of Obtain and each Release runs on another goroutine, detached from the
// context's cancellation, while the caller waits for it or for the
// context. A busy key is retried by the caller, which stops retrying when
// its context ends. An abandoned Obtain that took the key releases it. It is
// not a library anyone ships: beside redislock it measures what that
// promise costs a lock that does nothing else.
type redislockAwait struct {
	r       *redislockLib
	try     *redislock.Options // one try per Await: the caller retries
	workers Workers
}

func newRedislockAwait(client *redis.Client, cfg Config) *redislockAwait {
	return &redislockAwait{r: newRedislock(client, cfg), try: &redislock.Options{RetryStrategy: redislock.NoRetry()}}
}

func (a *redislockAwait) Lock(ctx context.Context, key string) (Lease, error) {
	for {
		lock, err := a.workers.Obtain(ctx, a.r.c, key, a.r.cfg.TTL, a.try)
		switch {
		case err == nil:
			lease := &redislockLease{lock: lock}
			lease.renew = startRenewer(a.r.cfg.RenewEvery, func(ctx context.Context) error {
				return lock.Refresh(ctx, a.r.cfg.TTL, nil)
			})
			return &awaitLease{l: lease, workers: &a.workers}, nil
		case !errors.Is(err, redislock.ErrNotObtained) || a.r.cfg.RetryDelay <= 0:
			return nil, err
		}
		t := time.NewTimer(a.r.cfg.RetryDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		}
	}
}

func (a *redislockAwait) Close() error {
	a.workers.Stop()
	return a.r.Close()
}

type awaitLease struct {
	l       *redislockLease
	workers *Workers
}

func (l *awaitLease) Unlock(ctx context.Context) error {
	return l.workers.Await(ctx, l.l.Unlock, nil)
}

func (l *awaitLease) Lost() bool { return l.l.Lost() }

// Workers runs calls on goroutines that stay for the next call, so that a
// call does not pay a fresh goroutine's stack growth: an idle worker takes
// a call, and a call that finds none starts one more. Stop ends them. The
// zero value is ready to use.
type Workers struct {
	mu      sync.Mutex
	work    chan *awaitCall // unbuffered: a send succeeds only to an idle worker
	stopped bool
	wg      sync.WaitGroup
}

// awaitCall is one call handed to a worker, with its result and who owns
// it, in one allocation beside its channel and context.
type awaitCall struct {
	fn        func(context.Context) error
	abandoned func()
	ctx       context.Context // detached from the caller's cancellation
	err       error
	claimed   atomic.Bool   // whoever sets it first owns the result
	done      chan struct{} // closed once err is set
}

func (c *awaitCall) run() {
	err := c.fn(c.ctx)
	if c.claimed.CompareAndSwap(false, true) {
		c.err = err
		close(c.done)
	} else if c.abandoned != nil {
		c.abandoned()
	}
}

// ObtainFunc takes key in redislock, as the benchmarks' middlewares do.
type ObtainFunc func(ctx context.Context, key string) (*redislock.Lock, error)

// BareObtain is c.Obtain for ttl, without retries.
func BareObtain(c *redislock.Client, ttl time.Duration) ObtainFunc {
	return func(ctx context.Context, key string) (*redislock.Lock, error) { return c.Obtain(ctx, key, ttl, nil) }
}

// ObtainFunc is BareObtain run by w (Obtain): it returns when its
// context ends.
func (w *Workers) ObtainFunc(c *redislock.Client, ttl time.Duration) ObtainFunc {
	return func(ctx context.Context, key string) (*redislock.Lock, error) { return w.Obtain(ctx, c, key, ttl, nil) }
}

// Obtain is c.Obtain run by Await: it returns when ctx ends, and a lock
// obtained after that is released.
func (w *Workers) Obtain(ctx context.Context, c *redislock.Client, key string, ttl time.Duration, opt *redislock.Options) (*redislock.Lock, error) {
	var lock *redislock.Lock
	err := w.Await(ctx, func(ctx context.Context) error {
		l, err := c.Obtain(ctx, key, ttl, opt)
		lock = l
		return err
	}, func() {
		if lock != nil { // obtained after its caller gave up
			_ = lock.Release(context.Background())
		}
	})
	if err != nil {
		return nil, err
	}
	return lock, nil
}

// Await runs fn and returns its error, or the cause of ctx's end when ctx
// ends first; then abandoned, if not nil, runs after fn on the worker. A
// ctx that cannot end runs fn on the caller's goroutine: there is nothing
// to return early for. fn runs detached from ctx's cancellation. After
// Stop, Await runs nothing and returns ErrStopped.
func (w *Workers) Await(ctx context.Context, fn func(context.Context) error, abandoned func()) error {
	if ctx.Done() == nil {
		return fn(ctx)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	c := &awaitCall{fn: fn, abandoned: abandoned, ctx: context.WithoutCancel(ctx), done: make(chan struct{})}
	if !w.start(c) {
		return ErrStopped
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		if c.claimed.CompareAndSwap(false, true) {
			return context.Cause(ctx)
		}
		<-c.done // the call claimed its result first: take it
		return c.err
	}
}

func (w *Workers) start(c *awaitCall) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	if w.work == nil {
		w.work = make(chan *awaitCall)
	}
	select {
	case w.work <- c:
		return true
	default:
	}
	work := w.work
	w.wg.Go(func() {
		c.run()
		for c := range work {
			c.run()
		}
	})
	return true
}

// Stop ends the workers once they are idle and waits for every call.
func (w *Workers) Stop() {
	w.mu.Lock()
	if !w.stopped && w.work != nil {
		close(w.work)
	}
	w.stopped = true
	w.mu.Unlock()
	w.wg.Wait()
}
