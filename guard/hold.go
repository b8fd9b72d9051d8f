package guard

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/jobguard/jobguard/guard/observe"
)

// hold is one owner's hold on a key: a fresh acquisition and every re-entry
// made through its context share it. It ends when its last lease is
// released or when it is lost.
type hold struct {
	l      *Locker
	key    string
	name   string // for observers: the Name option, or the key
	keys   store.Keys
	owner  string // unguessable owner id: 130 random bits
	token  int64
	timing timing
	ctx    context.Context // done when the hold ends; carries the hold
	cancel context.CancelCauseFunc
	obsCtx context.Context // the observer's context for heartbeat events
	values holdValues      // ctx's parent
	start  time.Time

	// first is the lease of the acquisition that took the hold: a field
	// of the hold, since every hold has one, rather than an allocation of
	// its own.
	first Lease

	// permits is the key's number of permits the hold took one of (1: the
	// key itself); a re-entry must ask for the same.
	permits int

	// mu guards the counts and their updates (counts.go); it is never held
	// across a request.
	mu      sync.Mutex
	writes  int                   // write leases held, re-entries included
	reads   int                   // read leases held, re-entries included
	final   bool                  // the last lease was released: no re-entry
	next    *countSync            // the update that will carry the counts, if one is due
	syncing bool                  // an update is being sent
	over    atomic.Bool           // released or lost: see end
	cause   atomic.Pointer[error] // why it ended: &ended, once end has set it
	ended   error                 // written once, by the end call that set over
	// firstSync records the hold's first count update, most holds' only
	// one (their final release), once synced is set; later updates get
	// records of their own. Both under mu.
	synced    bool
	firstSync countSync

	// Heartbeat state, guarded by the heartbeat's mutex.
	leaseEnd  time.Time // safe end of the lease (timing.safeEnd of the last confirmed request)
	nextRenew time.Time
	inFlight  bool
	retrying  bool // the last renewal failed: nextRenew is a retry, not to be sent early
	index     int  // position in the heartbeat's queue, -1 when not scheduled
	renewals  int
}

// newHold records the hold a acquired with token, its request sent at
// sent, and starts renewing it.
func (l *Locker) newHold(a *acquisition, token int64, sent time.Time) (*Lease, error) {
	h := &hold{
		l: l, key: a.key, name: a.lc.name, keys: a.keys, owner: a.args.Owner, token: token,
		timing: a.timing, start: sent, index: -1, permits: a.args.Permits,
		leaseEnd: a.timing.safeEnd(sent), nextRenew: sent.Add(a.timing.interval),
	}
	h.obsCtx = context.WithoutCancel(a.parent)
	h.values = holdValues{Context: h.obsCtx, node: holdNode{h: h, next: holdsIn(h.obsCtx)}}
	h.ctx, h.cancel = context.WithCancelCause(&h.values)
	h.writes, h.reads = counts(0, 0, a.args.Write, +1)
	l.mu.Lock()
	if l.isClosed() {
		l.mu.Unlock()
		k, owner, timeout := h.keys, h.owner, h.timing.timeout
		if !l.runner.start(func() { l.dropHold(k, owner, timeout) }) {
			l.dropHold(k, owner, timeout)
		}
		return nil, ErrClosed
	}
	l.holds[h] = struct{}{}
	l.mu.Unlock()
	l.hb.add(h)
	if !l.evictionChecked.Load() && l.evictionChecked.CompareAndSwap(false, true) {
		l.runner.start(l.warnEviction)
	}
	if l.debugEnabled() {
		l.log.Debug("guard: acquired", "key", h.key, "token", token, "write", a.args.Write)
	}
	l.obs.Event(h.obsCtx, observe.Held, observe.Info{Key: h.key, Name: h.name, Write: a.args.Write, TTL: h.timing.ttl, Token: token, Delta: +1})
	h.first.h, h.first.write = h, a.args.Write
	return &h.first, nil
}

// counts returns hold counts after adding delta leases of one mode.
func counts(writes, reads int, write bool, delta int) (int, int) {
	if write {
		return writes + delta, reads
	}
	return writes, reads + delta
}

// end stops the hold's heartbeat, cancels its context with cause and forgets
// it. It reports whether this call ended the hold.
func (h *hold) end(cause error) bool {
	if !h.over.CompareAndSwap(false, true) {
		return false
	}
	// Only the call that set over gets here. It publishes a pointer into
	// the hold rather than &cause, which would move cause to the heap.
	h.ended = cause
	h.cause.Store(&h.ended)
	h.l.hb.remove(h)
	h.cancel(cause)
	h.l.forget(h)
	return true
}

// lose ends a hold that can no longer be proven held and reports it. Only
// the first call for a hold acts. To end many holds at once, call end for
// each first and reportLost afterwards, so no job waits on a log handler.
func (h *hold) lose(cause error) {
	if h.end(cause) {
		h.reportLost(cause)
	}
}

// reportLost logs and observes a hold that end has ended with cause.
func (h *hold) reportLost(cause error) {
	l := h.l
	if !errors.Is(cause, ErrClosed) {
		why := strings.TrimPrefix(cause.Error(), ErrLeaseLost.Error()+": ")
		l.log.Error("guard: lease lost", "key", h.key, "token", h.token, "why", why)
	}
	l.obs.Event(h.obsCtx, observe.LeaseLost, observe.Info{Key: h.key, Name: h.name, Token: h.token, Err: cause})
	l.obs.Event(h.obsCtx, observe.Held, observe.Info{Key: h.key, Name: h.name, Token: h.token, Delta: -1, Result: "lost", Duration: l.clock.Now().Sub(h.start)})
}

// endCause returns why an ended hold (over set) ended. The call that set
// over publishes the cause next, without blocking, so a caller that saw
// over first yields until it is there.
func (h *hold) endCause() error {
	for {
		if c := h.cause.Load(); c != nil {
			return *c
		}
		runtime.Gosched()
	}
}

// lossCause returns why the hold was lost, or nil while it is held or when
// it ended by release. Its context's cause may differ: Close cancels the
// context of a hold that is still held.
func (h *hold) lossCause() error {
	if c := h.cause.Load(); c != nil && errors.Is(*c, ErrLeaseLost) {
		return *c
	}
	return nil
}

func lostCause(key string, res store.Outcome) error {
	if res == store.Taken {
		return &chain{msg: fmt.Sprintf("%v: %q is held by another owner", ErrLeaseLost, key), errs: []error{ErrLeaseLost, errTaken}}
	}
	return &chain{msg: fmt.Sprintf("%v: %q expired or was force-released", ErrLeaseLost, key), errs: []error{ErrLeaseLost, errGone}}
}

// The heartbeat's view of a hold; called with the heartbeat's mutex held.

// stopAt is when the job is told to stop if no renewal moves leaseEnd.
func (h *hold) stopAt() time.Time { return h.timing.stopAt(h.leaseEnd) }

// due is when the heartbeat must next look at h: its next renewal or, when
// a renewal is in flight or overdue, its stop time.
func (h *hold) due() time.Time {
	stop := h.stopAt()
	if h.inFlight || stop.Before(h.nextRenew) {
		return stop
	}
	return h.nextRenew
}

// renewable reports whether h may join a batch sent at now: its renewal
// window has opened. The heartbeat wakes at the end of the first hold's
// window and takes every hold whose window has opened, so holds acquired
// at about the same time share a pipeline. A retry has no early window: it
// would come at once after a failure as fast as a refused connection.
func (h *hold) renewable(now time.Time) bool {
	if h.inFlight {
		return false
	}
	if h.retrying {
		return !h.nextRenew.After(now)
	}
	return !h.nextRenew.Add(-h.timing.batchWindow()).After(now)
}

// settle applies the answer to h's renewal sent at sent and received at
// now: a success moves the safe end, a failure schedules a retry. It
// returns the cause when the answer means the hold is lost.
func (h *hold) settle(r store.RenewReply, sent, now time.Time) (lost error) {
	h.inFlight = false
	switch {
	case errors.Is(r.Err, ErrWrongType):
		// Not a fault that a retry outlives: the key is not a lock now.
		return &chain{msg: ErrLeaseLost.Error() + ": " + detail(r.Err), errs: []error{ErrLeaseLost, r.Err}}
	case r.Err != nil:
		h.nextRenew, h.retrying = now.Add(h.timing.retryEvery()), true
		return nil
	case r.Outcome == store.Applied:
		h.retrying = false
		if end := h.timing.safeEnd(sent); end.After(h.leaseEnd) {
			h.leaseEnd = end
		}
		h.nextRenew = sent.Add(h.timing.interval)
		h.renewals++
		return nil
	default:
		return lostCause(h.key, r.Outcome)
	}
}

// Holds travel in contexts: a linked list, newest first.
type holdNode struct {
	h    *hold
	next *holdNode
}

type holdCtxKey struct{}

func withHold(ctx context.Context, h *hold) context.Context {
	return context.WithValue(ctx, holdCtxKey{}, &holdNode{h: h, next: holdsIn(ctx)})
}

// holdsIn returns the newest of the holds ctx carries.
func holdsIn(ctx context.Context) *holdNode {
	n, _ := ctx.Value(holdCtxKey{}).(*holdNode)
	return n
}

// holdValues is what a hold's context is made of: the values of the
// context it was acquired with, not its cancellation, and the hold. It is
// a field of the hold, so carrying the hold costs no allocation beyond the
// hold's own, where WithValue and a node would cost two.
type holdValues struct {
	context.Context // the acquiring context, without its cancellation
	node            holdNode
}

func (v *holdValues) Value(key any) any {
	if key == (holdCtxKey{}) {
		return &v.node
	}
	return v.Context.Value(key)
}

// holdIn returns the newest hold ctx carries on key for l (any Locker when l is nil).
func holdIn(ctx context.Context, l *Locker, key string) *hold {
	for n := holdsIn(ctx); n != nil; n = n.next {
		if n.h.key == key && (l == nil || n.h.l == l) {
			return n.h
		}
	}
	return nil
}

// TokenFrom returns the fencing token of the hold on key that ctx carries:
// the context passed to a WithLock job, a Lease's context, or one derived
// from them. The second result is false when ctx carries no hold on key.
// The token stays readable after the hold ends; a resource that checks
// tokens rejects a stale one.
func TokenFrom(ctx context.Context, key string) (int64, bool) {
	if ctx == nil {
		return 0, false
	}
	if h := holdIn(ctx, nil, key); h != nil {
		return h.token, true
	}
	return 0, false
}
