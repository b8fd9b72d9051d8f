package guard

import "errors"

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
	ErrWrongType = errors.New("guard: key holds another Redis type")

	// ErrNotReplicated means WithReplicaAck was set and too few replicas
	// acknowledged an acquisition in time; the hold was released. It is not
	// contention: the key may be free.
	ErrNotReplicated = errors.New("guard: not acknowledged by enough replicas")

	// ErrInvalid reports a bad argument or option: nil client, empty key,
	// a TTL or interval that does not fit, and so on.
	ErrInvalid = errors.New("guard: invalid argument")
)
