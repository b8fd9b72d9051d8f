package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// hold is one owner's hold on a key: a fresh acquisition and every re-entry
// made through its context share it. It ends when its last lease is
// released or when it is lost.
type hold struct {
	l      *Locker
	key    string
	name   string // for observers: the Name option, or the key
	keys   keys
	owner  string // unguessable owner id, 128 random bits
	token  int64
	timing timing
	ctx    context.Context // done when the hold ends; carries the hold
	cancel context.CancelCauseFunc
	obsCtx context.Context // the observer's context for heartbeat events
	start  time.Time

	mu     sync.Mutex            // serializes count updates and their requests
	writes int                   // write leases held
	reads  int                   // read leases held
	over   atomic.Bool           // released or lost: see end
	cause  atomic.Pointer[error] // why it ended, set by end

	// Heartbeat state, guarded by the heartbeat's mutex.
	leaseEnd  time.Time // safe end of the lease: sent + TTL - drift
	nextRenew time.Time
	inFlight  bool
	index     int // position in the heartbeat heap, -1 when not scheduled
	renewals  int
}

// stopAt is when the job is told to stop if no renewal moves leaseEnd.
func (h *hold) stopAt() time.Time { return h.leaseEnd.Add(-h.timing.grace) }

// lossCause returns why the hold was lost, or nil while it is held or when
// it ended by release. Its context's cause may differ: Close cancels the
// context of a hold that is still held.
func (h *hold) lossCause() error {
	if c := h.cause.Load(); c != nil && errors.Is(*c, ErrLeaseLost) {
		return *c
	}
	return nil
}

// Lease is one acquisition of a key: a fresh hold or a re-entry into a hold
// the context already had. A Lease is safe for concurrent use.
type Lease struct {
	h         *hold
	write     bool
	reentrant bool
	ctx       context.Context
	cancel    context.CancelCauseFunc
	once      sync.Once
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
func (le *Lease) Context() context.Context { return le.ctx }

// Release ends the lease. The key is freed when the outermost lease of the
// hold is released (after MinHold, if set). Release stops the heartbeat
// before it returns. It returns ErrNotHeld if the lease was already released,
// has expired, or is now held by another owner; the message tells which.
//
// Release runs detached from ctx's cancellation, so that a deferred Release
// with a context canceled by shutdown still frees the key; it uses ctx's
// values and is bounded by the request timeout. If it cannot reach Redis,
// the lease is still over and the key expires within its TTL.
func (le *Lease) Release(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalid)
	}
	err := fmt.Errorf("%w: lease on %q already released", ErrNotHeld, le.h.key)
	le.once.Do(func() {
		err = le.h.l.release(context.WithoutCancel(ctx), le)
		le.cancel(ErrReleased)
	})
	return err
}

// holdNode links the holds a context carries; the newest comes first.
type holdNode struct {
	h    *hold
	next *holdNode
}

type holdCtxKey struct{}

func withHold(ctx context.Context, h *hold) context.Context {
	next, _ := ctx.Value(holdCtxKey{}).(*holdNode)
	return context.WithValue(ctx, holdCtxKey{}, &holdNode{h: h, next: next})
}

// holdIn returns the newest hold ctx carries on key for l (any Locker when l is nil).
func holdIn(ctx context.Context, l *Locker, key string) *hold {
	for n, _ := ctx.Value(holdCtxKey{}).(*holdNode); n != nil; n = n.next {
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
