package guard

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
)

// Errors returned by this package. Match them with errors.Is; they are often
// wrapped with the key and the detail.
var (
	// ErrNotAcquired means Redis answered that the key was held by another
	// owner, for the whole wait (HeldFor tells how long it stays held at
	// most). When the wait ended because ctx was done, the error also matches
	// the context's error. A wait that never got an answer from Redis returns
	// the transport or context error instead, not ErrNotAcquired.
	ErrNotAcquired = errors.New("guard: lock not acquired")

	// ErrLeaseLost is the cause of a lease context that was canceled because
	// the hold could no longer be proven: a renewal found the key expired or
	// owned by another, or no renewal succeeded before the lease's safe end.
	ErrLeaseLost = errors.New("guard: lease lost")

	// ErrNotHeld is returned by Release when the lease is not held any more:
	// already released, expired, or taken over by another owner.
	ErrNotHeld = errors.New("guard: lease not held")

	// ErrUpgrade is returned at once when a context that holds a read lease
	// asks for a write lease on the same key: waiting would deadlock.
	ErrUpgrade = errors.New("guard: cannot upgrade a read lease to a write lease")

	// ErrReleased is the cause of a lease context whose lease was released.
	ErrReleased = errors.New("guard: lease released")

	// ErrClosed is returned by a Locker after Close, and is the cause of the
	// contexts Close cancels. A lease still held when Close gives up waiting
	// is left to expire; its loss matches both ErrClosed and ErrLeaseLost.
	ErrClosed = errors.New("guard: locker closed")

	// ErrWrongType means a Redis key of the lock already holds a value of
	// another type, so it is not a lock this package wrote.
	ErrWrongType = store.ErrWrongType

	// ErrNotReplicated means WithReplicaAck was set and too few replicas
	// acknowledged a request in time. For an acquisition, the hold was
	// released; it is not contention: the key may be free. For a renewal, it
	// counts as a failed renewal, retried until the lease's stop time.
	ErrNotReplicated = store.ErrNotReplicated

	// ErrInvalid reports a bad argument or option: nil client, empty key,
	// a TTL or interval that does not fit, and so on.
	ErrInvalid = errors.New("guard: invalid argument")

	// ErrSuperseded is returned by ClaimFenced when its token is not the
	// newest its lock's fencing counter has minted, so nothing was stored:
	// a newer hold on the key began (the caller's lease was lost, perhaps
	// unnoticed, or, for a read hold, another reader joined), or the
	// counter is gone (expired, see FenceTTL, or lost in a failover) and no
	// token can be proven the newest. Do not retry with the same token.
	ErrSuperseded = errors.New("guard: fencing token superseded")

	// ErrPermitsDiffer is returned at once by an acquisition that asks for
	// a number of permits (Permits; 1 without it) other than the one the
	// key's current holders hold, or by a re-entry whose number differs
	// from its context's hold. Nothing was acquired. It is not contention:
	// the holders of one key must agree on its number of permits.
	ErrPermitsDiffer = store.ErrPermitsDiffer
)

// heldError is the detail of an ErrNotAcquired: what Redis answered about
// the key's holders at the last attempt.
type heldError struct {
	remaining time.Duration
}

func (e *heldError) Error() string {
	return fmt.Sprintf("held for up to %v more unless renewed", e.remaining.Round(time.Millisecond))
}

// HeldFor reports how long Redis said the key stays held, at most, unless
// its holders renew: the remaining time of the latest holder's lease (for
// Permits, of the holder whose lease ends first, which frees a permit), on
// the server's clock, at the acquisition's last attempt. A live holder renews
// and keeps the key longer; a crashed one frees it after this time. The
// second result is false when err is not an ErrNotAcquired with that answer.
// Adapters use it for Retry-After and for retry delays.
func HeldFor(err error) (time.Duration, bool) {
	var h *heldError
	if errors.As(err, &h) {
		return h.remaining, true
	}
	return 0, false
}

// errTaken marks a loss to another owner, which a later release need not
// repeat.
var errTaken = errors.New("guard: held by another owner")

// errGone marks a loss to expiry or a forced release, which a later
// release need not repeat.
var errGone = errors.New("guard: expired or force-released")

// chain is an error that matches each of errs and says its message once,
// where wrapping one sentinel in another would repeat their prefixes.
type chain struct {
	msg  string
	errs []error
}

func (c *chain) Error() string   { return c.msg }
func (c *chain) Unwrap() []error { return c.errs }

// detail returns err's message without the package's "guard: " prefix, to
// follow another message that has it.
func detail(err error) string { return strings.TrimPrefix(err.Error(), "guard: ") }

// redisError names the lock key, as the caller passed it, in the error
// of a request about it: once, at the call's edge.
func redisError(key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("guard: lock %q: %w", key, err)
}
