package gocronguard

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-co-op/gocron/v2"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/throttle"
)

// Task returns a gocron.Task that runs fn on one instance of the fleet per
// tick, never overlapping a run of name elsewhere, in the lease's context:
//
//	_, err := s.NewJob(gocron.CronJob("*/5 * * * *", false),
//		gocronguard.Task(locker, "sync-invoices", syncInvoices),
//		gocron.WithName("sync-invoices"))
//
// Every instance must use the same name; it is the lease key, as given
// (Task takes no Prefix or KeyFunc). Each run claims its tick and takes
// the lease as a Locker's Lock does (see Window and the package doc), and
// a run whose tick was claimed first, or whose lease is held, returns nil
// at once without calling fn: the work is done elsewhere. An error reaching
// Redis is returned (gocron counts the run failed) and logged at Error.
//
// fn's context is the lease's: it is canceled when the lease is lost,
// StopGrace (guard.WithStopGrace) before the lease could expire in Redis, so before any other
// instance can start the job, with a cause matching guard.ErrLeaseLost. It
// is also canceled when gocron cancels the job's context (Shutdown,
// StopJobs, RemoveJob); then the lease is kept until fn returns, and
// released after. It carries the fencing token, guard.TokenFrom(ctx, name),
// the run's tick, Tick(ctx), and the values of the job's context
// (gocron.WithContext). Task returns fn's error to gocron, joined with the
// loss when the lease was lost during the run. A panic in fn releases the
// lease and reaches gocron as it would without Task.
//
// A job made with Task guards itself: give it gocron.WithDisabledDistributedJobLocker(true)
// when its scheduler has a distributed Locker, or it holds that Locker's
// lease too. A Locker lets Task's runs through without one when the job
// has no gocron.WithName (see Locker).
//
// Task panics, with an error matching guard.ErrInvalid, when an argument
// or option is invalid: a nil Locker or fn, an empty name or one holding
// '}', a bad option, Prefix or KeyFunc.
func Task(l *guard.Locker, name string, fn func(ctx context.Context) error, opts ...Option) gocron.Task {
	t, err := newTask(l, name, fn, opts)
	if err != nil {
		panic(err)
	}
	return gocron.NewTask(t.run)
}

// task is the job that Task wraps.
type task struct {
	gate
	name string
	fn   func(context.Context) error
}

func newTask(l *guard.Locker, name string, fn func(context.Context) error, opts []Option) (*task, error) {
	cfg := newConfig(l, opts)
	switch {
	case cfg.err() != nil:
		return nil, cfg.err()
	case name == "":
		return nil, invalid("empty job name", nil)
	case strings.Contains(name, "}"):
		return nil, invalid(fmt.Sprintf("job name %q", name), errors.New("must not contain '}' (guard keys cannot)"))
	case fn == nil:
		return nil, invalid("nil func", nil)
	case cfg.prefixSet || cfg.keyFunc != nil:
		return nil, invalid("Prefix or KeyFunc given to Task", errors.New("a Task's lease key is its name"))
	}
	return &task{gate: newGate(l, cfg), name: name, fn: fn}, nil
}

// run is the function gocron runs, with the job's context: it claims the
// run's tick and runs fn under the job's lease, or skips the run.
func (t *task) run(ctx context.Context) error {
	tick, label, err := t.cfg.admit(ctx, t.l, t.name)
	kv := []any{"job", t.name, "tick", tick}
	if err != nil {
		return t.skip(ctx, err, kv)
	}
	ran := false
	run := throttle.CallerLogs(context.WithValue(ctx, runKey{}, &runInfo{tick: tick}), t.name)
	err = t.l.WithLock(run, t.name, func(ctx context.Context) error {
		ran = true
		return t.fn(ctx)
	}, t.cfg.lockOptions(t.name, label)...)
	switch {
	case !ran:
		return t.skip(ctx, err, kv)
	case errors.Is(err, guard.ErrLeaseLost):
		// guard's logger reports the loss at Error, if it has one; this names the job.
		t.cfg.log.Warn("gocronguard: lease lost during the run", append(kv, "err", err)...)
	case err == nil:
		t.cfg.log.Debug("gocronguard: ran", kv...)
	}
	return err
}

// skip logs why a run did not start and returns what gocron gets: nil for
// a skip (the run is another's), the error for a failure.
func (t *task) skip(ctx context.Context, err error, kv []any) error {
	if skip, err := t.notRun(ctx, t.name, err, kv); !skip {
		return err
	}
	return nil
}
