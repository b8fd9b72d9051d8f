package cronguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/throttle"
	"github.com/robfig/cron/v3"
)

// Add schedules fn on c by spec, guarded as Func guards it: it runs on one
// instance of the fleet per tick and never overlaps a run of name
// elsewhere (see the package doc). It is the way to write the schedule
// once: the spec is parsed once (by the Parser option, default five fields,
// six with seconds, or a descriptor such as @every 5m), and the same
// schedule both drives c (cron.Cron.Schedule) and names the ticks, read in
// c's location (cron.WithLocation) as c reads the spec. Every instance must
// use the same name for the job; it is the lock key.
//
// Add returns an error matching guard.ErrInvalid, and schedules nothing,
// when an argument or option is invalid (the spec's parse error matches
// too). Spec and Schedule must not be given to Add.
func Add(c *cron.Cron, l *guard.Locker, name, spec string, fn func(context.Context) error, opts ...Option) (cron.EntryID, error) {
	if c == nil {
		return 0, invalid("nil *cron.Cron", nil)
	}
	opts = append([]Option{func(cfg *config) { cfg.addSpec, cfg.loc = &spec, c.Location() }}, opts...)
	g, err := newGuarded(l, name, opts)
	if err == nil && fn == nil {
		err = invalid("nil func", nil)
	}
	if err != nil {
		return 0, err
	}
	g.fn = fn
	return c.Schedule(g.cfg.schedule, g), nil
}

// Job returns a cron.Job that runs job on one instance of the fleet per
// tick, never overlapping a run of name elsewhere (see the package doc).
// Every instance must use the same name for the job; it is the lock key.
// A plain cron.Job cannot see the run's context (name, tick, fencing
// token, cancellation on lease loss or shutdown): use Func or Add for that.
//
// Job needs a Spec (or Schedule) unless NoDedupe is given; Add needs none.
// It panics, with an error matching guard.ErrInvalid, when an argument or
// option is invalid (see Validate): a wiring mistake fails when the job is
// made, not by a job that never runs.
func Job(l *guard.Locker, name string, job cron.Job, opts ...Option) cron.Job {
	g, err := newGuarded(l, name, opts)
	if err == nil && (job == nil || isNilPointer(job)) {
		err = invalid("nil cron.Job", nil)
	}
	if err != nil {
		panic(err)
	}
	g.fn = func(context.Context) error { job.Run(); return nil }
	return g
}

// Func returns a cron.Job that runs fn on one instance of the fleet per
// tick, never overlapping a run of name elsewhere (see the package doc).
// Every instance must use the same name for the job; it is the lock key.
//
// fn's context carries the job's name (JobName), its tick (Tick) and the
// lease's fencing token (guard.TokenFrom(ctx, name)). It is canceled when
// the lease is lost (cause matching guard.ErrLeaseLost) and when the
// BaseContext is (shutdown); fn should return soon after. An error fn
// returns is logged at Error through the Logger.
//
// Func needs a Spec (or Schedule) unless NoDedupe is given; Add, which
// takes the spec once, is the safer way to schedule it. Func panics, with
// an error matching guard.ErrInvalid, when an argument or option is
// invalid (see Validate).
func Func(l *guard.Locker, name string, fn func(context.Context) error, opts ...Option) cron.Job {
	g, err := newGuarded(l, name, opts)
	if err == nil && fn == nil {
		err = invalid("nil func", nil)
	}
	if err != nil {
		panic(err)
	}
	g.fn = fn
	return g
}

// Wrapper returns a cron.JobWrapper that guards a job as Job does, for use
// in a cron.Chain. It names the job it wraps, so apply it per job
// (cron.NewChain(cronguard.Wrapper(l, "report", cronguard.Spec(spec))).Then(job)),
// not to every job of a Cron through cron.WithChain, or they would share
// one lock. It panics as Job does: at once for an invalid option, and when
// it wraps a nil job.
func Wrapper(l *guard.Locker, name string, opts ...Option) cron.JobWrapper {
	if err := Validate(l, name, opts...); err != nil {
		panic(err)
	}
	return func(job cron.Job) cron.Job { return Job(l, name, job, opts...) }
}

// Validate returns the error that Job, Func and Wrapper would panic with
// for these arguments, or nil, to check a configuration without a panic.
// The error matches guard.ErrInvalid and, for a bad Spec, the parser's
// error. Job and Func also need a non-nil job.
func Validate(l *guard.Locker, name string, opts ...Option) error {
	c := newConfig(l, name, opts)
	return c.err()
}

// guarded is the cron.Job that Job, Func and Add make.
type guarded struct {
	l    *guard.Locker
	name string
	fn   func(context.Context) error
	cfg  config
	busy *throttle.Throttle // busy skips to log: one key, the job's
}

func newGuarded(l *guard.Locker, name string, opts []Option) (*guarded, error) {
	cfg := newConfig(l, name, opts)
	if err := cfg.err(); err != nil {
		return nil, err
	}
	return &guarded{l: l, name: name, cfg: cfg, busy: throttle.New(throttle.Every, 1)}, nil
}

// Run is what cron calls at every activation: it claims the activation's
// tick, runs the job under its lease if this instance won the tick, and
// logs what became of the run.
func (g *guarded) Run() {
	now := g.cfg.now()
	tick, claimTTL := g.cfg.tickOf(now)
	label := tick.UTC().Format(time.RFC3339Nano)
	kv := []any{"job", g.name, "tick", tick}
	if !g.claimTick(now, label, claimTTL, kv) {
		return
	}
	g.logOutcome(g.runLocked(tick, label), kv)
}

// claimTick reports whether this instance runs the tick labelled label:
// the BaseContext is not done and, unless NoDedupe, this instance claimed
// the tick before any other. It logs why the tick is skipped.
func (g *guarded) claimTick(now time.Time, label string, claimTTL time.Duration, kv []any) bool {
	c := &g.cfg
	if c.base.Err() != nil {
		g.skip(kv, "base context done")
		return false
	}
	if !c.dedupe {
		return true
	}
	won, err := g.l.Claim(c.base, g.name+"@"+label, []byte(now.Format(time.RFC3339Nano)), claimTTL)
	switch {
	case err != nil && c.base.Err() != nil:
		g.skip(kv, "base context done")
	case errors.Is(err, guard.ErrClosed):
		g.skip(kv, "locker closed")
	case err != nil:
		c.log.Error("cronguard: job not run: cannot claim the tick", append(kv, "err", err)...)
	case !won:
		g.skip(kv, "tick already claimed")
	default:
		return true
	}
	return false
}

// outcome is what became of a run that went for the job's lease.
type outcome struct {
	ran      bool        // the lease was taken and the job called
	panicked *panicError // the job's panic, recovered; nil if it returned
	err      error       // from guard.Locker.WithLock
}

// runLocked runs the job under its lease, in a context that tells the job
// its name and tick. A panic in the job is recovered, so that it is logged
// with its stack and the lease released as after any failed run, and
// becomes the run's error (see panicError).
func (g *guarded) runLocked(tick time.Time, label string) outcome {
	var o outcome
	ctx := context.WithValue(g.cfg.base, runKey{}, &runInfo{name: g.name, tick: tick})
	o.err = g.l.WithLock(throttle.CallerLogs(ctx, g.name), g.name, func(ctx context.Context) (err error) {
		o.ran = true
		defer func() {
			if r := recover(); r != nil {
				o.panicked = newPanicError(r)
				err = o.panicked
			}
		}()
		return g.fn(ctx)
	}, g.cfg.lockOptions(g.name, label)...)
	return o
}

// logOutcome logs what became of a run: a success and a tick skipped by
// contention at Debug (a busy job at Info once a minute, see logBusy), a
// stop for shutdown at Info, a failure at Error. A lost lease is logged at
// Error by the Locker; here at Debug, with the tick.
func (g *guarded) logOutcome(o outcome, kv []any) {
	c, base := &g.cfg, g.cfg.base
	switch err := o.err; {
	case !o.ran && base.Err() != nil:
		g.skip(kv, "base context done")
	case !o.ran && errors.Is(err, guard.ErrNotAcquired):
		g.logBusy(kv)
	case !o.ran:
		c.log.Error("cronguard: job not run: cannot take the lease", append(kv, "err", err)...)
	case o.panicked != nil:
		c.log.Error("cronguard: panic", append(kv, "err", err, "stack", "...\n"+string(o.panicked.stack))...)
	case errors.Is(err, guard.ErrLeaseLost):
		c.log.Warn("cronguard: lease lost during the run", append(kv, "err", err)...)
	case err != nil && base.Err() != nil && errors.Is(err, base.Err()):
		c.log.Info("cronguard: job stopped", append(kv, "reason", "base context done")...)
	case err != nil:
		c.log.Error("cronguard: job failed", append(kv, "err", err)...)
	default:
		c.log.Debug("cronguard: ran", kv...)
	}
}

// logBusy logs a tick skipped because the job's lease is held, here or
// elsewhere: at Info the first time and then once a minute at most, with
// the count of those not logged (a job longer than its period would log
// at every tick), at Debug otherwise.
func (g *guarded) logBusy(kv []any) {
	c := &g.cfg
	reason := "still running"
	if c.wait > 0 {
		reason = fmt.Sprintf("still running after waiting %v", c.wait)
	}
	kv = append(kv, "reason", reason)
	log, repeated := g.busy.Allow(g.name, c.now())
	if !log {
		c.log.Debug("cronguard: skip", kv...)
		return
	}
	if repeated > 0 {
		kv = append(kv, "repeated", repeated)
	}
	c.log.Info("cronguard: skip", kv...)
}

// skip logs, at Debug, that the tick is skipped and why: another instance
// claimed it, or shutdown began. Neither is news in a fleet.
func (g *guarded) skip(kv []any, reason string) {
	g.cfg.log.Debug("cronguard: skip", append(kv, "reason", reason)...)
}

// panicError is a recovered panic, reported as the run's error so that
// observers (tracing) record it.
type panicError struct {
	value any
	stack []byte
}

func newPanicError(v any) *panicError {
	buf := make([]byte, 64<<10)
	buf = buf[:runtime.Stack(buf, false)]
	return &panicError{value: v, stack: buf}
}

func (e *panicError) Error() string { return fmt.Sprintf("cronguard: job panicked: %v", e.value) }

// Unwrap returns the panic value if it is an error.
func (e *panicError) Unwrap() error {
	err, _ := e.value.(error)
	return err
}

func attrJob(name string) slog.Attr   { return slog.String("jobguard.cron.job", name) }
func attrTick(label string) slog.Attr { return slog.String("jobguard.cron.tick", label) }
