package gocronguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/throttle"
)

var (
	// ErrTickClaimed means the run's tick was claimed first by another run,
	// normally on another instance: that run is the tick's. A Locker's Lock
	// returns it, and gocron skips the run.
	ErrTickClaimed = errors.New("gocronguard: tick already claimed")

	// ErrBusy means the job's lease is held, by a run still going on
	// another instance or on this one. A Locker's Lock returns it, wrapping
	// guard's error (so errors.Is(err, guard.ErrNotAcquired) holds and
	// guard.HeldFor tells how long the holder's lease has left), and gocron
	// skips the run.
	ErrBusy = errors.New("gocronguard: job still running")
)

// gate is what a Locker and a Task share: how a run gets in.
type gate struct {
	l    *guard.Locker
	cfg  config
	busy *throttle.Throttle // busy skips to log, per key
}

func newGate(l *guard.Locker, cfg config) gate {
	return gate{l: l, cfg: cfg, busy: throttle.New(throttle.Every, throttle.Keys)}
}

// notRun logs why a run of a job did not get in, and returns the error
// that says so: ErrTickClaimed, ErrBusy wrapping guard's error, or the
// failure. skip is false for a failure (Redis unreachable, a bad key).
func (g *gate) notRun(ctx context.Context, key string, err error, kv []any) (skip bool, _ error) {
	log := g.cfg.log
	switch {
	case errors.Is(err, ErrTickClaimed):
		log.Debug("gocronguard: skip", append(kv, "reason", "tick already claimed")...)
		return true, err
	case ctx.Err() != nil:
		log.Debug("gocronguard: skip", append(kv, "reason", "job context done")...)
		return true, err
	case errors.Is(err, guard.ErrClosed):
		log.Debug("gocronguard: skip", append(kv, "reason", "locker closed")...)
		return true, err
	case errors.Is(err, guard.ErrNotAcquired):
		g.logBusy(key, kv)
		return true, fmt.Errorf("%w: %w", ErrBusy, err)
	}
	log.Error("gocronguard: job not run", append(kv, "err", err)...)
	return false, err
}

// logBusy logs a run skipped because the job's lease is held: a job longer
// than its period would log at every run, so a key's busy skips are logged
// at Info once a minute at most, with the count of those not logged, and
// at Debug otherwise.
func (g *gate) logBusy(key string, kv []any) {
	kv = append(kv, "reason", "still running")
	log, repeated := g.busy.Allow(key, g.cfg.now())
	if !log {
		g.cfg.log.Debug("gocronguard: skip", kv...)
		return
	}
	if repeated > 0 {
		kv = append(kv, "repeated", repeated)
	}
	g.cfg.log.Info("gocronguard: skip", kv...)
}
