package gocronguard

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"runtime"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/throttle"
)

// Locker returns a gocron.Locker that runs each job on one instance of the
// fleet per tick and never two runs of a job at once, for
// gocron.WithDistributedLocker (every job of a scheduler) or
// gocron.WithDistributedJobLocker (one job):
//
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(gocronguard.Locker(locker)))
//
// gocron calls Lock before each run with the job's name (gocron.WithName;
// by default the name of the job's function). Lock claims the run's tick
// (see Window and the package doc) and takes a guard lease on the key
// "gocron:" + name (see Prefix and KeyFunc), renewed by the Locker's
// heartbeat for as long as the job runs; gocron calls Unlock when the run
// is over, which releases it. When the tick was claimed first or the lease
// is held, Lock returns an error matching ErrTickClaimed or ErrBusy and
// gocron skips the run; when Redis cannot be reached, the error says so,
// and the run is skipped too.
//
// The job is not told if its lease is lost: gocron gives the job its own
// context, not the lease's. Wrap the job with Task for that; a job made
// with Task guards itself, and Locker lets its runs through without a
// lease of their own when the job has no name of its own (they would all
// share the name of Task's function). The loss is logged, and Unlock
// returns an error matching guard.ErrLeaseLost.
//
// Locker panics, with an error matching guard.ErrInvalid, when l is nil or
// an option is invalid (see Validate): a wiring mistake fails when the
// scheduler is made, not as a job that never runs.
func Locker(l *guard.Locker, opts ...Option) gocron.Locker {
	cfg := newConfig(l, opts)
	if err := cfg.err(); err != nil {
		panic(err)
	}
	return &locker{gate: newGate(l, cfg), taskName: funcName((*task)(nil).run)}
}

// locker is the gocron.Locker that Locker returns.
type locker struct {
	gate
	taskName string // the name gocron gives a job made with Task and no WithName
}

// Lock is what gocron calls before each run of the job name: it claims the
// run's tick and takes the job's lease, or tells gocron to skip the run.
func (k *locker) Lock(ctx context.Context, name string) (gocron.Lock, error) {
	if name == k.taskName {
		return unguarded{}, nil // a Task guards itself
	}
	key, err := k.cfg.keyOf(name)
	if err != nil {
		k.cfg.log.Error("gocronguard: job not run", "job", name, "err", err)
		return nil, err
	}
	tick, label, err := k.cfg.admit(ctx, k.l, key)
	if err != nil {
		return nil, k.skip(ctx, key, err, name, tick)
	}
	lease, err := k.l.Acquire(throttle.CallerLogs(ctx, key), key, k.cfg.lockOptions(name, label)...)
	if err != nil {
		return nil, k.skip(ctx, key, err, name, tick)
	}
	return &lock{k: k, lease: lease, name: name, tick: tick}, nil
}

// skip logs why a run did not get in and returns the error that tells
// gocron to skip it.
func (k *locker) skip(ctx context.Context, key string, err error, name string, tick time.Time) error {
	_, err = k.notRun(ctx, key, err, []any{"job", name, "tick", tick})
	return err
}

// lock is one run's hold on its job's lease.
type lock struct {
	k     *locker
	lease *guard.Lease
	name  string
	tick  time.Time
}

// Unlock releases the lease; gocron calls it when the run is over. It
// returns an error matching guard.ErrLeaseLost if the lease was lost
// during the run, and guard's error if the release failed (the lease then
// expires within its TTL).
func (k *lock) Unlock(ctx context.Context) error {
	lost := context.Cause(k.lease.Context())
	if !errors.Is(lost, guard.ErrLeaseLost) {
		lost = nil
	}
	err := k.lease.Release(ctx)
	log := k.k.cfg.log
	kv := []any{"job", k.name, "tick", k.tick}
	switch {
	case lost != nil:
		// guard's logger reports the loss at Error, if it has one; this names the job.
		log.Warn("gocronguard: lease lost during the run", append(kv, "err", lost)...)
		return lost
	case err != nil:
		log.Error("gocronguard: cannot release the lease", append(kv, "err", err)...)
		return err
	}
	log.Debug("gocronguard: ran", kv...)
	return nil
}

// unguarded is the Lock of a run that needs no lease from the Locker.
type unguarded struct{}

func (unguarded) Unlock(context.Context) error { return nil }

// funcName is the name gocron gives a job whose function is f.
func funcName(f any) string {
	return runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
}

func attrJob(name string) slog.Attr   { return slog.String("jobguard.gocron.job", name) }
func attrTick(label string) slog.Attr { return slog.String("jobguard.gocron.tick", label) }
