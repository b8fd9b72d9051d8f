package guard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlines ends the Locker's deadlineCtxs at their deadlines, all on one
// timer. A timer of its own per request (what context.WithTimeout starts)
// is usually the earliest the runtime holds, since a request's bound is
// shorter than go-redis's connection deadlines, and the runtime wakes a
// thread for every such timer that is set: on an idle client, each request
// cost two or three futex calls that way (about four per acquire and
// release). The shared timer is set only when nothing earlier is
// pending, and is not stopped when a request ends early, as nearly all
// do: it fires about once per request timeout while requests are made,
// ending those past their deadline, and is then set for the earliest of
// the rest.
type deadlines struct {
	mu    sync.Mutex
	timer *time.Timer
	// armed is when the timer fires; zero when it is not set.
	armed time.Time
	// pending are the started deadlineCtxs not yet ended, linked through
	// their prev and next.
	pending *deadlineCtx
}

// add starts watching d's deadline.
func (w *deadlines) add(d *deadlineCtx) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d.next, d.prev = w.pending, nil
	if w.pending != nil {
		w.pending.prev = d
	}
	w.pending = d
	d.watched = true
	if !w.armed.IsZero() && !d.deadline.Before(w.armed) {
		return
	}
	w.armed = d.deadline
	if w.timer == nil {
		w.timer = time.AfterFunc(time.Until(d.deadline), w.fire)
	} else {
		w.timer.Reset(time.Until(d.deadline))
	}
}

// remove stops watching d, which has ended or is ending.
func (w *deadlines) remove(d *deadlineCtx) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unlinkLocked(d)
}

func (w *deadlines) unlinkLocked(d *deadlineCtx) {
	if !d.watched {
		return
	}
	if d.prev != nil {
		d.prev.next = d.next
	} else {
		w.pending = d.next
	}
	if d.next != nil {
		d.next.prev = d.prev
	}
	d.prev, d.next, d.watched = nil, nil, false
}

// fire ends every pending deadlineCtx whose deadline has passed and sets
// the timer for the earliest of the others.
func (w *deadlines) fire() {
	w.mu.Lock()
	now := time.Now()
	var expired []*deadlineCtx
	var earliest time.Time
	for d := w.pending; d != nil; {
		next := d.next
		if d.deadline.After(now) {
			if earliest.IsZero() || d.deadline.Before(earliest) {
				earliest = d.deadline
			}
		} else {
			w.unlinkLocked(d)
			expired = append(expired, d)
		}
		d = next
	}
	w.armed = earliest
	if !earliest.IsZero() {
		w.timer.Reset(time.Until(earliest))
	}
	w.mu.Unlock()
	for _, d := range expired {
		d.end(context.DeadlineExceeded)
	}
}

// stop stops the timer if no deadline is pending, as at the end of Close.
// A request of Close's time that runs on its caller's goroutine (await,
// under a context that cannot end) may still be pending: its deadline
// then keeps the timer, which fires once more and is not set again.
func (w *deadlines) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending == nil && w.timer != nil {
		w.timer.Stop()
		w.armed = time.Time{}
	}
}

// deadlineCtx is a context with the values of another, not its
// cancellation, that is done at a deadline or when stopped: what
// context.WithTimeout(context.WithoutCancel(ctx), d) makes, with no timer
// of its own (see deadlines) and in fewer allocations. A WithTimeout
// allocates the context, a timer, two closures and, once asked for it, its
// channel; a deadlineCtx can live in the record of what it bounds and
// allocates only its channel. A context derived from it (go-redis derives
// some while it dials) follows it as it would any context of a type of its
// own: the context package watches the two with a goroutine until either
// is done.
type deadlineCtx struct {
	values   context.Context // whose values it has; nothing cancels it
	deadline time.Time
	done     chan struct{}
	w        *deadlines
	ended    atomic.Bool // set by whichever of the deadline and stop closes done
	err      error       // why done was closed: written before it is

	// In w's pending list while watched; guarded by w.mu.
	prev, next *deadlineCtx
	watched    bool
}

// start makes d done after timeout, watched by w. values must not carry a
// cancellation of its own (context.WithoutCancel hides one): Cause looks
// for one through Value, and would report its cause for d's.
func (d *deadlineCtx) start(w *deadlines, values context.Context, timeout time.Duration) {
	d.values, d.deadline, d.done, d.w = values, time.Now().Add(timeout), make(chan struct{}), w
	w.add(d)
}

// stop makes d done now, if it is not, as a WithTimeout's cancel does.
func (d *deadlineCtx) stop() {
	d.w.remove(d)
	d.end(context.Canceled)
}

func (d *deadlineCtx) end(err error) {
	if d.ended.CompareAndSwap(false, true) {
		d.err = err
		close(d.done)
	}
}

func (d *deadlineCtx) Deadline() (time.Time, bool) { return d.deadline, true }
func (d *deadlineCtx) Done() <-chan struct{}       { return d.done }
func (d *deadlineCtx) Value(key any) any           { return d.values.Value(key) }

func (d *deadlineCtx) Err() error {
	select {
	case <-d.done:
		return d.err
	default:
		return nil
	}
}

// detached returns ctx's values without its cancellation, for a
// deadlineCtx, sparing context.WithoutCancel's allocation for the
// contexts that have none. A context whose Done is nil may still carry
// one, a parent's found through Value, as contexts "detached" before Go
// 1.21 do.
func detached(ctx context.Context) context.Context {
	if ctx == context.Background() || ctx == context.TODO() {
		return ctx
	}
	return context.WithoutCancel(ctx)
}
