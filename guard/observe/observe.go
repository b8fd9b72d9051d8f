// Package observe is the hook through which guard reports lock operations
// to tracing and metrics. The tracing package implements it with
// OpenTelemetry; implement it yourself only to feed another system.
//
// A WithLock is one Run phase containing an Acquire phase and, once the
// lease was acquired, a Release phase. Acquire and Release called on their
// own report those phases alone. Point events (round trips, failed
// renewals, losses, and the changes of the held and waiting counts) come
// in between, also from the heartbeat.
package observe

import (
	"context"
	"log/slog"
	"time"
)

// Observer receives every lock operation. Its methods are called
// synchronously on the operation's path and from the heartbeat's reporting,
// so they must be fast and safe for concurrent use.
type Observer interface {
	// Begin starts a phase. The returned context is used for the rest of the
	// phase (a tracer returns one carrying its span) and is passed to End.
	Begin(ctx context.Context, phase Phase, info Info) context.Context
	// End ends the phase begun with ctx.
	End(ctx context.Context, phase Phase, info Info)
	// Event reports a point event; ctx is the run's context when there is one.
	Event(ctx context.Context, event Event, info Info)
}

// Phase names a span-like stretch of a lock operation.
type Phase uint8

// Phases, from the outside in.
const (
	// Run is a whole WithLock: the wait, the job and the release.
	Run Phase = iota + 1
	// Acquire is one acquisition, including its wait for a busy key.
	Acquire
	// Release is the release of one lease.
	Release
)

// Event names a point event.
type Event uint8

// Point events.
const (
	// RoundTrip reports one request to Redis; Info.Op says which.
	RoundTrip Event = iota + 1
	// RenewFailed reports a renewal that could not be confirmed; the
	// heartbeat retries until the lease's safe end.
	RenewFailed
	// LeaseLost reports that a lease was lost; Info.Err is the cause.
	LeaseLost
	// Held reports that a lease was acquired (Delta +1) or ended (Delta -1,
	// Result "released" or "lost"), for a count of held leases.
	Held
	// Waiting reports that an acquisition starts (+1) or stops (-1) waiting
	// for a busy key.
	Waiting
)

// Info describes a lock operation. Fields that do not apply to a phase or
// event are zero.
type Info struct {
	Key       string        // the lock key, as given by the caller
	Name      string        // low-cardinality name for metrics (guard.Name; default: Key)
	Attrs     []slog.Attr   // attributes the caller gave (guard.Attrs)
	Write     bool          // write lease (false: read lease)
	TTL       time.Duration // lease TTL
	Token     int64         // fencing token, once acquired
	Reentrant bool          // the context already held the key
	// Result of the phase or event: for Acquire, and for a Run that did not
	// acquire, "acquired", "busy", "timeout", "canceled" or "error"; for
	// Held and a Run that ran, "released" or "lost".
	Result   string
	Op       string        // RoundTrip: "acquire", "renew" or "release"
	Duration time.Duration // RoundTrip: the round trip; Held(-1): the hold
	Renewals int           // renewals that succeeded during the hold (end of Run)
	Attempts int           // Acquire: acquire requests sent
	Delta    int           // Held and Waiting: +1 or -1
	Err      error         // the failure, if any
}
