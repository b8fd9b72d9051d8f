package guard

import "sync"

// runner runs requests for call on a few long-lived goroutines, started
// lazily and stopped by Close. A fresh goroutine per request would grow its
// stack through go-redis's call depth every time, which costs more than the
// request's own client-side work. When every worker is busy (requests stuck
// on a dead link), a request gets a goroutine of its own, so nothing queues
// behind a stuck one.
type runner struct {
	mu      sync.Mutex
	work    chan func() // unbuffered: a send succeeds only to an idle worker
	started int
	stopped bool
	wg      sync.WaitGroup
}

// runnerWorkers is how many goroutines wait for requests; more than that run
// on goroutines of their own.
const runnerWorkers = 2

// run runs f on a goroutine of the runner and reports whether it did; after
// stop it runs nothing and returns false.
func (r *runner) run(f func()) bool {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return false
	}
	if r.work == nil {
		r.work = make(chan func())
	}
	select {
	case r.work <- f:
		r.mu.Unlock()
		return true
	default:
	}
	worker := r.started < runnerWorkers
	if worker {
		r.started++
	}
	r.wg.Add(1)
	work := r.work
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		f()
		if worker {
			for f := range work {
				f()
			}
		}
	}()
	return true
}

// stop ends the workers once they are idle and waits for every request.
func (r *runner) stop() {
	r.mu.Lock()
	r.stopped = true
	if r.work != nil {
		close(r.work)
	}
	r.mu.Unlock()
	r.wg.Wait()
}
