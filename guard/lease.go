package guard

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Lease is one acquisition of a key: a fresh hold or a re-entry into a hold
// the context already had. A Lease is safe for concurrent use.
type Lease struct {
	h         *hold
	write     bool
	reentrant bool
	released  atomic.Bool // set by the first Release

	// The context is made when it is first asked for (Context): a lease
	// whose caller never does costs none. mu guards it.
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc
	ended  bool // the lease was released: a context made now is done
}

// Key returns the lock key the lease was acquired on.
func (le *Lease) Key() string { return le.h.key }

// Token returns the fencing token of the hold: strictly increasing per key
// across all acquisitions. A re-entry returns the outer hold's token. Pass it
// to the protected resource and let the resource reject a token lower than
// one it has seen; that, not the lock, is what protects it from a holder that
// was paused past its lease.
func (le *Lease) Token() int64 { return le.h.token }

// Context returns a context that is done when the lease is released or
// lost, or when its Locker is closing. context.Cause tells which:
// ErrReleased, an error matching ErrLeaseLost, or one matching ErrClosed
// (the lease is still held and renewed until it is released or Close gives
// up on it; see Locker.Close). It carries the hold: WithLock, Acquire and TokenFrom called
// with it (or a context derived from it) re-enter or answer. It also carries
// the values of the context passed to Acquire, but not its cancellation.
func (le *Lease) Context() context.Context {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.ctx == nil {
		// A child of the hold's context: done at once if the hold has
		// ended, and with its cause.
		le.ctx, le.cancel = context.WithCancelCause(le.h.ctx)
		if le.ended {
			le.cancel(ErrReleased)
		}
	}
	return le.ctx
}

// end marks the lease released for its context, made or to be made.
func (le *Lease) end() {
	le.mu.Lock()
	le.ended = true
	cancel := le.cancel
	le.mu.Unlock()
	if cancel != nil {
		cancel(ErrReleased)
	}
}

// Release ends the lease. The key is freed when the outermost lease of the
// hold is released (after MinHold, if set). Release stops the heartbeat
// before it returns. It returns ErrNotHeld if the lease was already released,
// has expired, or is now held by another owner; the message tells which.
//
// Only the release of the hold's last lease goes to Redis, and that of its
// last write lease while read leases remain (Redis then makes it a read
// hold). Any other lease (a re-entry's, or the outer one while re-entries
// go on) is released in the process at once, with no round trip; it
// returns ErrNotHeld, with the cause, for a hold known to be lost.
//
// A release that goes to Redis waits for the answer until ctx is done, and
// then returns ctx's error while the release goes on without it (bounded by
// the request timeout); a key whose release does not land expires within
// its TTL. The
// request itself runs detached from ctx's cancellation, and a ctx that is
// already done when Release is called (a deferred Release after shutdown
// canceled the job's context) waits for the answer up to the request
// timeout instead, so that it still reports whether the key was freed. It
// uses ctx's values.
func (le *Lease) Release(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalid)
	}
	if !le.released.CompareAndSwap(false, true) {
		// Built only here: formatting it up front cost every Release three
		// allocations for an error that a single Release never returns.
		return fmt.Errorf("%w: lease on %q already released", ErrNotHeld, le.h.key)
	}
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	err := le.h.l.release(ctx, le)
	le.end()
	return err
}

func newLease(h *hold, write, reentrant bool) *Lease {
	return &Lease{h: h, write: write, reentrant: reentrant}
}
