package guard

import (
	"context"
	"errors"

	"github.com/jobguard/jobguard/guard/observe"
)

// Observer receives every lock operation, for tracing and metrics: see
// WithObserver, the observe package, and the tracing package, which
// implements it with OpenTelemetry.
type Observer = observe.Observer

type nopObserver struct{}

func (nopObserver) Begin(ctx context.Context, _ observe.Phase, _ observe.Info) context.Context {
	return ctx
}
func (nopObserver) End(context.Context, observe.Phase, observe.Info)   {}
func (nopObserver) Event(context.Context, observe.Event, observe.Info) {}

// observed runs op as one phase for the Locker's observer: op fills in the
// outcome, the wrapper records the error and ends the phase, also when op
// panics (a WithLock job); then the error is what op left in info.Err. This is the only place that begins and ends
// phases.
func (l *Locker) observed(ctx context.Context, phase observe.Phase, info observe.Info, op func(context.Context, *observe.Info) error) (err error) {
	ctx = l.obs.Begin(ctx, phase, info)
	returned := false
	defer func() {
		if returned {
			info.Err = err
		} else {
			// op's error never came back; what it recorded in info (a
			// WithLock's loss, say) did.
			info.Err = errors.Join(info.Err, errPanicked)
		}
		l.obs.End(ctx, phase, info)
	}()
	err = op(ctx, &info)
	returned = true
	return err
}

var errPanicked = errors.New("guard: job panicked")

// errBusy and errTimeout tell the two ErrNotAcquired cases apart for observers.
var (
	errBusy    = errors.New("key busy")
	errTimeout = errors.New("wait budget spent")
)

// acquireResult names an acquisition's outcome for observers.
func acquireResult(err error) string {
	switch {
	case err == nil:
		return "acquired"
	case errors.Is(err, errBusy):
		return "busy"
	case errors.Is(err, errTimeout):
		return "timeout"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	default:
		return "error"
	}
}
