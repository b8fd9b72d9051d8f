package store

import "errors"

// Errors a store's answers match; guard exports them under the same
// names.
var (
	// ErrWrongType means a Redis key of the lock holds a value of another
	// type, so it is not a lock guard wrote.
	ErrWrongType = errors.New("guard: key holds another Redis type")
	// ErrNotReplicated means too few replicas acknowledged a request in
	// time (WithReplicaAck).
	ErrNotReplicated = errors.New("guard: not acknowledged by enough replicas")
	// ErrPermitsDiffer means an acquisition asked for another number of
	// permits than the key's holders hold.
	ErrPermitsDiffer = errors.New("guard: holders disagree on the key's number of permits")
	// ErrTryAgain means the server asked for the request again later: a
	// Cluster slot is being migrated and some of the request's keys may
	// have moved (TRYAGAIN), or it has just moved and the client ran out of
	// redirections (MOVED, ASK). This answer ran nothing, but it is the
	// last of the client's tries, and an earlier one may have run before
	// its connection broke.
	ErrTryAgain = errors.New("guard: a Cluster slot is being migrated")
)

// NoReplyError is the failure of a request whose reply never came: it may
// have run on the server.
type NoReplyError struct{ Err error }

func (e *NoReplyError) Error() string { return e.Err.Error() }
func (e *NoReplyError) Unwrap() error { return e.Err }
