package locks

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// redislockAwait is redislock made to return when its caller's context
// ends, as guard's calls do, in the least costly way that works with
// go-redis (which does not interrupt a read when a context is canceled):
// each Obtain and each Release runs on another goroutine, detached from the
// context's cancellation, while the caller waits for it or for the context.
// An abandoned call runs on and its lock is released or expires. It is not
// a library anyone ships: beside redislock it measures what that promise
// costs a lock that does nothing else.
type redislockAwait struct {
	r       *redislockLib
	workers Workers
}

func newRedislockAwait(client *redis.Client, cfg Config) *redislockAwait {
	return &redislockAwait{r: newRedislock(client, cfg)}
}

func (a *redislockAwait) Lock(ctx context.Context, key string) (Lease, error) {
	var lease Lease
	err := a.workers.Await(ctx, func(ctx context.Context) error {
		l, err := a.r.Lock(ctx, key)
		lease = l
		return err
	}, func() {
		if lease != nil { // obtained after its caller gave up
			_ = lease.Unlock(context.Background())
		}
	})
	if err != nil {
		return nil, err
	}
	return &awaitLease{l: lease, workers: &a.workers}, nil
}

func (a *redislockAwait) Close() error {
	a.workers.Stop()
	return nil
}

type awaitLease struct {
	l       Lease
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
	work    chan func() // unbuffered: a send succeeds only to an idle worker
	stopped bool
	wg      sync.WaitGroup
}

// Await runs fn on a worker, detached from ctx's cancellation, and returns
// its error, or ctx's when ctx ends first; then abandoned, if not nil, runs
// after fn on the worker. After Stop it runs nothing and returns
// context.Canceled.
func (w *Workers) Await(ctx context.Context, fn func(context.Context) error, abandoned func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var (
		mu        sync.Mutex
		gaveUp    bool
		result    error
		completed = make(chan struct{})
	)
	call := func() {
		err := fn(context.WithoutCancel(ctx))
		mu.Lock()
		result = err
		left := gaveUp
		close(completed)
		mu.Unlock()
		if left && abandoned != nil {
			abandoned()
		}
	}
	if !w.start(call) {
		return context.Canceled
	}
	select {
	case <-completed:
		return result
	case <-ctx.Done():
		mu.Lock()
		select {
		case <-completed:
			mu.Unlock()
			return result
		default:
		}
		gaveUp = true
		mu.Unlock()
		return ctx.Err()
	}
}

func (w *Workers) start(call func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	if w.work == nil {
		w.work = make(chan func())
	}
	select {
	case w.work <- call:
		return true
	default:
	}
	work := w.work
	w.wg.Go(func() {
		call()
		for call := range work {
			call()
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
