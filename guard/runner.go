package guard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/guard/observe"
)

// runner runs requests for await, and reports that must not hold up the
// heartbeat, on long-lived goroutines, started lazily and stopped by Close.
// A fresh goroutine per request would grow its stack through go-redis's
// call depth every time, which costs more than the request's own
// client-side work: so a worker started when every other was busy stays
// while work keeps coming, and ends after idle without any. When every
// worker is busy (requests stuck on a dead link), a request gets a
// goroutine of its own, so nothing queues behind a stuck one.
type runner struct {
	mu      sync.Mutex
	work    chan job // unbuffered: a send succeeds only to an idle worker
	started int      // workers running
	stopped bool
	wg      sync.WaitGroup
	idle    time.Duration // how long a worker beyond the core ones waits for work; 0: runnerIdle
}

const (
	// runnerCore is how many workers, once started, wait for requests until
	// Close.
	runnerCore = 2
	// runnerMax bounds the workers. It is the batcher's flights (eight per
	// Store) several times over: a service that sends that many requests
	// at once pays the stack growth once per worker, not per request.
	runnerMax = 64
	// runnerIdle is how long a worker beyond the core ones waits for
	// another request before it ends: long enough to carry a burst of
	// requests to the next, short enough that a Locker idle after a burst
	// keeps only its core workers.
	runnerIdle = time.Second
)

// job is work for the runner. A type with a run method is one, so a
// request's record can be handed over as it is, where a closure over it
// would cost an allocation of its own.
type job interface{ run() }

// jobFunc makes a function a job.
type jobFunc func()

func (f jobFunc) run() { f() }

// start runs f on a goroutine of the runner and reports whether it did;
// after stop it runs nothing and returns false.
func (r *runner) start(f func()) bool { return r.startJob(jobFunc(f)) }

// startJob runs j on a goroutine of the runner, as start does.
func (r *runner) startJob(j job) bool {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return false
	}
	if r.work == nil {
		r.work = make(chan job)
	}
	select {
	case r.work <- j:
		r.mu.Unlock()
		return true
	default:
	}
	worker := r.started < runnerMax
	core := r.started < runnerCore
	if worker {
		r.started++
	}
	r.wg.Add(1)
	work := r.work
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		j.run()
		switch {
		case core:
			for j := range work {
				j.run()
			}
		case worker:
			r.serve(work)
		}
	}()
	return true
}

// serve runs the jobs sent to work until work is closed or none comes for
// the runner's idle time; a worker beyond the core ones runs it.
func (r *runner) serve(work <-chan job) {
	idle := r.idle
	if idle == 0 {
		idle = runnerIdle
	}
	t := time.NewTimer(idle)
	defer t.Stop()
	for {
		select {
		case j, ok := <-work:
			if !ok {
				return
			}
			j.run()
			t.Reset(idle)
		case <-t.C:
			// Not receiving any more: no send can reach this worker now.
			r.mu.Lock()
			r.started--
			r.mu.Unlock()
			return
		}
	}
}

// stop ends the workers once they are idle and waits for every request.
// A second stop only waits.
func (r *runner) stop() {
	r.mu.Lock()
	if !r.stopped && r.work != nil {
		close(r.work)
	}
	r.stopped = true
	r.mu.Unlock()
	r.wg.Wait()
}

// await runs fn and returns when it does or when ctx is done, whichever comes
// first. go-redis does not interrupt a blocked read when a context is
// canceled, so without this a partitioned server would hold the caller for
// the client's ReadTimeout. An abandoned fn keeps running on a goroutine
// owned by the Locker (Close waits for it) and its result goes to abandoned,
// which may clean up after it (release a lock it turned out to acquire).
//
// A request is bounded by the request timeout (at least 1s) in any case,
// also under a context that is never done: otherwise go-redis's dial
// retries alone could hold a single try for many seconds while the server
// cannot be reached.
func await[T any](ctx context.Context, l *Locker, fn func(context.Context) (T, error), abandoned func(T, error)) (T, error) {
	if ctx.Done() == nil {
		// Nothing can end the wait but the request: run it here.
		d := new(deadlineCtx)
		d.start(&l.deadlines, detached(ctx), max(l.cfg.requestTimeout, time.Second))
		defer d.stop()
		return fn(d)
	}
	if ctx.Err() != nil {
		var zero T
		return zero, context.Cause(ctx)
	}
	// The request outlives a caller that gives up, but not by much: its own
	// deadline stops go-redis's retries and pool waits (and, with the
	// client's ContextTimeoutEnabled, its reads).
	c := &call[T]{fn: fn, abandoned: abandoned, done: make(chan struct{})}
	c.ctx.start(&l.deadlines, context.WithoutCancel(ctx), max(l.cfg.requestTimeout, time.Second))
	if !l.runner.startJob(c) {
		c.ctx.stop()
		var zero T
		return zero, ErrClosed
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.claimed.CompareAndSwap(false, true) {
			var zero T
			return zero, context.Cause(ctx)
		}
		<-c.done // the request claimed its result first: take it
	}
	return c.v, c.err
}

// try runs one try of a hold's update, bounded by ctx, for its sender: a
// goroutine of the runner already, whose caller waits for the update no
// longer than its own context allows (countSync.await). When go-redis ends
// the try by itself soon enough (Locker.overrun) that Close, which waits
// closeTimeout for the hold to settle, cannot give up on it first, the try
// runs on the sender's goroutine: one hand-off fewer. Otherwise it goes
// through await, which ends it at ctx's deadline while go-redis may still
// wait on, say, a read of a link that died. Either way an answer that
// comes after the deadline is not taken: a retried release is told apart
// from a lost one only for so long (its marker), and that counts from the
// deadline.
func try[T any](ctx context.Context, l *Locker, fn func(context.Context) (T, error)) (T, error) {
	if !l.endsInTime(ctx) {
		return await(ctx, l, fn, nil)
	}
	v, err := fn(ctx)
	if ctx.Err() != nil {
		var zero T
		return zero, context.Cause(ctx)
	}
	return v, err
}

// endsInTime reports whether go-redis ends a request under ctx before
// Close would stop waiting for the hold it updates: within closeTimeout
// from now, and before closeBy once Close has begun.
func (l *Locker) endsInTime(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	if l.overrun < 0 || !ok {
		return false
	}
	limit := time.Now().Add(l.cfg.closeTimeout)
	if by := l.closeBy.Load(); by != 0 && by < limit.UnixNano() {
		limit = time.Unix(0, by)
	}
	return !dl.Add(l.overrun).After(limit)
}

// call is one request that await hands to the runner: what it runs, its
// context, and its result with its claim and its signal, in one
// allocation (a channel of results would cost two, and claimed one of its
// own); it is the runner's job itself, so handing it over costs none.
type call[T any] struct {
	fn        func(context.Context) (T, error)
	abandoned func(T, error)
	ctx       deadlineCtx // the request's
	v         T
	err       error
	claimed   atomic.Bool   // whoever sets it first owns the result
	done      chan struct{} // closed once v and err are set
}

func (c *call[T]) run() {
	defer c.ctx.stop()
	v, err := c.fn(&c.ctx)
	if c.claimed.CompareAndSwap(false, true) {
		c.v, c.err = v, err
		close(c.done)
	} else if c.abandoned != nil {
		c.abandoned(v, err)
	}
}

// request runs one store operation for the Locker through await and reports
// its round trip to the observer; rt names it (Op, Key, Name).
func request[T any](ctx context.Context, l *Locker, rt observe.Info, fn func(context.Context) (T, error), abandoned func(T, error)) (T, error) {
	start := l.clock.Now()
	v, err := await(ctx, l, fn, abandoned)
	rt.Duration, rt.Err = l.clock.Now().Sub(start), err
	l.obs.Event(ctx, observe.RoundTrip, rt)
	return v, err
}
