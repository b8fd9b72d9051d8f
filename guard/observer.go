package guard

import (
	"context"
	"log/slog"
	"time"
)

// Phase names a span-like stretch of a lock operation reported to an Observer.
type Phase uint8

// Phases, from the outside in. A WithLock is one PhaseRun containing a
// PhaseAcquire, and, once acquired, a PhaseRelease at its end. Acquire and
// Release on their own report PhaseAcquire and PhaseRelease only.
const (
	PhaseRun Phase = iota + 1
	PhaseAcquire
	PhaseRelease
)

// EventKind names a point event reported to Observer.Event.
type EventKind uint8

// Point events.
const (
	// EventRoundTrip reports one request to Redis; Op says which.
	EventRoundTrip EventKind = iota + 1
	// EventRenewFailed reports a renewal that could not be confirmed; the
	// heartbeat retries until the lease's safe end.
	EventRenewFailed
	// EventLeaseLost reports that a lease was lost; Err is the cause.
	EventLeaseLost
	// EventHeld reports that a lease was acquired (Delta +1) or ended
	// (Delta -1, Result "released" or "lost"), for a count of held leases.
	EventHeld
	// EventWaiting reports that an acquisition starts (+1) or stops (-1)
	// waiting for a busy key.
	EventWaiting
)

// Info describes a lock operation to an Observer. Fields that do not apply
// to a phase or event are zero.
type Info struct {
	Key       string        // the lock key, as given by the caller
	Name      string        // low-cardinality name for metrics (Name option; default: Key)
	Attrs     []slog.Attr   // attributes the caller gave (Attrs option)
	Write     bool          // write lease (false: read lease)
	TTL       time.Duration // lease TTL
	Token     int64         // fencing token, once acquired
	Reentrant bool          // the context already held the key
	// Result of the phase or event: for PhaseAcquire, and for a PhaseRun
	// that did not acquire, "acquired", "busy", "timeout", "canceled" or
	// "error"; for EventHeld and a PhaseRun that ran, "released" or "lost".
	Result   string
	Op       string        // EventRoundTrip: "acquire", "renew" or "release"
	Duration time.Duration // EventRoundTrip: the round trip; EventHeld(-1): the hold
	Renewals int           // renewals that succeeded during the hold (end of run)
	Attempts int           // PhaseAcquire: acquire requests sent
	Delta    int           // EventHeld and EventWaiting: +1 or -1
	Err      error         // the failure, if any
}

// Observer receives every lock operation, for tracing and metrics (see the
// tracing package). Methods are called synchronously on the operation's path
// and from the heartbeat, so they must be fast and safe for concurrent use.
type Observer interface {
	// Begin starts a phase. The returned context is used for the rest of the
	// phase (a tracer returns one carrying its span) and is passed to End.
	Begin(ctx context.Context, phase Phase, info Info) context.Context
	// End ends the phase begun with ctx.
	End(ctx context.Context, phase Phase, info Info)
	// Event reports a point event; ctx is the run's context when there is one.
	Event(ctx context.Context, kind EventKind, info Info)
}

type nopObserver struct{}

func (nopObserver) Begin(ctx context.Context, _ Phase, _ Info) context.Context { return ctx }
func (nopObserver) End(context.Context, Phase, Info)                           {}
func (nopObserver) Event(context.Context, EventKind, Info)                     {}
