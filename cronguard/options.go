package cronguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/adapt"
	"github.com/robfig/cron/v3"
)

// Option configures a guarded job. Options are validated when the job is
// made: Add returns the error; Job, Func and Wrapper panic with it.
type Option func(*config)

// config is a guarded job's configuration.
type config struct {
	schedule cron.Schedule  // nil only with NoDedupe: ticks are whole seconds
	loc      *time.Location // nil: the clock's; set by Add to the Cron's
	spec     string         // from Spec, parsed once every option is applied
	specSet  bool
	schedSet bool    // Schedule was given
	addSpec  *string // the spec Add was given
	parser   cron.ScheduleParser
	dedupe   bool
	wait     time.Duration
	minHold  time.Duration
	ttl      time.Duration // 0: the Locker's TTL
	permits  int           // runs that may overlap; 0 or 1: none
	log      *slog.Logger
	base     context.Context
	now      func() time.Time

	errs []error // option errors; err returns the first
}

// specParser reads what cron.New() and cron.New(cron.WithSeconds()) read:
// five fields, or six with seconds first, and descriptors such as @daily
// and @every 5m, with an optional CRON_TZ= or TZ= prefix.
var specParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour |
	cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec tells the job its schedule: give it the spec you pass to
// cron.AddJob or cron.AddFunc. Add does this for you and is the safer way:
// the spec is written once. A spec is read by the Parser, by default five
// fields (cron.New), six with seconds first (cron.WithSeconds), and
// descriptors (@hourly, @every 5m), with an optional CRON_TZ= prefix. A spec
// without a zone is read in the local time zone, as cron reads it by
// default; if your Cron runs in another (cron.WithLocation), prefix the spec
// with CRON_TZ=, or use Add, which reads it in the Cron's.
//
// A run's tick is the schedule's latest activation at or before the time
// the run starts, and for @every d it is the d-long bucket, counted from
// the Unix epoch, that holds that time: instances start an @every schedule
// at different moments, so only epoch-aligned buckets give them the same
// tick.
//
// Job, Func and Wrapper need a Spec or a Schedule (unless NoDedupe): a job
// cannot see the schedule cron runs it on, and without it could not tell
// an @every schedule from one that fires on whole seconds. Add takes the
// spec as an argument instead; it must not be given a Spec or Schedule.
func Spec(spec string) Option {
	return func(c *config) { c.spec, c.specSet = spec, true }
}

// Parser sets the parser Spec and Add read specs with: pass the one your
// cron.Cron was made with (cron.WithParser), since a Cron does not tell it.
// Default: cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour |
// cron.Dom | cron.Month | cron.Dow | cron.Descriptor), which reads what
// cron.New() and cron.New(cron.WithSeconds()) read. Must not be nil.
func Parser(p cron.ScheduleParser) Option {
	return func(c *config) {
		if p == nil || isNilPointer(p) {
			c.errs = append(c.errs, invalid("Parser(nil)", nil))
			return
		}
		c.parser = p
	}
}

// Schedule is Spec for a schedule you parsed yourself and pass to
// cron.Cron.Schedule. Its activations must not depend on when it is asked
// (any cron.SpecSchedule does not); a cron.ConstantDelaySchedule is taken
// as @every. Must not be nil.
func Schedule(s cron.Schedule) Option {
	return func(c *config) {
		switch d, ok := constantDelay(s); {
		case s == nil || isNilPointer(s):
			c.errs = append(c.errs, invalid("Schedule(nil)", nil))
			return
		case ok && d <= 0:
			c.errs = append(c.errs, invalid(fmt.Sprintf("Schedule(every %v)", d), fmt.Errorf("the delay must be positive")))
			return
		}
		c.schedule, c.schedSet = s, true
	}
}

// NoDedupe turns per-tick dedupe off: every instance whose tick comes finds
// the job free and runs it, as with a plain lock (gocron, ShedLock without
// lockAtLeastFor), so a short job runs once per instance per tick. Runs
// still never overlap. Use it with MinHold, or for jobs that must not
// overlap but may repeat. It needs no Spec; without one, the Tick a run's
// context reports is the second it started in. Default: dedupe on.
func NoDedupe() Option { return func(c *config) { c.dedupe = false } }

// Wait makes a run whose tick finds the job still running elsewhere (or
// here) wait up to d for that run to end, and then run, instead of skipping
// the tick. Default: 0, skip at once. Must be >= 0.
func Wait(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.errs = append(c.errs, invalid(fmt.Sprintf("Wait(%v)", d), fmt.Errorf("must be >= 0")))
		}
		c.wait = d
	}
}

// MinHold keeps the job's lease until at least d after the run started,
// even when the job returns sooner (ShedLock's lockAtLeastFor): ticks that
// come within d skip the job on every instance. Default: 0. Must be >= 0.
func MinHold(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.errs = append(c.errs, invalid(fmt.Sprintf("MinHold(%v)", d), fmt.Errorf("must be >= 0")))
		}
		c.minHold = d
	}
}

// TTL sets the TTL of the lease a run holds (guard.TTL): how long a crashed
// instance can keep the job from running. The lease is renewed while the
// job runs, so a run may last longer than the TTL. Default: the Locker's
// TTL (guard.WithTTL, 30s). Must be positive.
func TTL(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, invalid(fmt.Sprintf("TTL(%v)", d), fmt.Errorf("must be positive")))
		}
		c.ttl = d
	}
}

// Permits lets up to n runs of the job overlap across the fleet: each run
// holds one of the n permits of the job's lease (guard.Permits) instead of
// the lease itself, renewed while it runs. A tick that comes while n runs
// still hold theirs is skipped as still running (or waits, with Wait).
// Per-tick dedupe still runs each tick once, so this is for a job whose
// runs may outlast its period: at most n of them at once. With NoDedupe,
// it is at most n instances running the job at once. Every instance must
// give the same n: a run whose n differs from that of the runs holding the
// lease is not run, and is logged at Error with an error matching
// guard.ErrPermitsDiffer. Default: 1, runs never overlap. Must be >= 1.
func Permits(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, invalid(fmt.Sprintf("Permits(%d)", n), fmt.Errorf("must be >= 1")))
		}
		c.permits = n
	}
}

// Logger sets where the job reports what cron itself cannot, at the levels
// every package of jobguard uses: a tick skipped because the job still
// runs at Info, once a minute at most (Debug otherwise); a tick another
// instance claimed, or skipped at shutdown, at Debug; a job stopped by the
// base context at Info; a failed job, a recovered panic and a Redis error
// at Error. A lost lease is logged at Error by the Locker, and here at
// Debug with the tick. Runs that succeed log at Debug. Give cron the same
// logger through CronLogger (cron.WithLogger(cronguard.CronLogger(l))) to
// see both in one format. Default: a logger that discards everything. Must
// not be nil.
func Logger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.errs = append(c.errs, invalid("Logger(nil)", nil))
			return
		}
		c.log = l
	}
}

// BaseContext sets the context every run's context derives from. Cancel it
// on shutdown: running jobs see their context canceled (the lease is kept
// until they return), and ticks that come after it is canceled are skipped.
// Its values reach the job. Default: context.Background(). Must not be nil.
func BaseContext(ctx context.Context) Option {
	return func(c *config) {
		if ctx == nil {
			c.errs = append(c.errs, invalid("BaseContext(nil)", nil))
			return
		}
		c.base = ctx
	}
}

func newConfig(l *guard.Locker, name string, opts []Option) config {
	c := config{dedupe: true, log: slog.New(slog.DiscardHandler), base: context.Background(), now: time.Now, parser: specParser}
	switch {
	case l == nil:
		c.errs = append(c.errs, invalid("nil *guard.Locker", nil))
	case name == "":
		c.errs = append(c.errs, invalid("empty job name", nil))
	case strings.Contains(name, "}"):
		c.errs = append(c.errs, invalid(fmt.Sprintf("job name %q", name), fmt.Errorf("must not contain '}' (guard keys cannot)")))
	}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, invalid("nil Option", nil))
			continue
		}
		o(&c)
	}
	c.parseSchedule()
	if l != nil && c.ttl > 0 {
		// A TTL too short for the Locker's renewal schedule fails here, not at every tick.
		if err := l.ValidateLockOptions(guard.TTL(c.ttl)); err != nil {
			c.errs = append(c.errs, fmt.Errorf("cronguard: %w", err))
		}
	}
	return c
}

// parseSchedule reads the spec given to Add or Spec with the Parser, and
// requires a schedule when ticks are deduped.
func (c *config) parseSchedule() {
	spec, what := c.spec, fmt.Sprintf("Spec(%q)", c.spec)
	switch {
	case c.addSpec != nil && (c.specSet || c.schedSet):
		c.errs = append(c.errs, invalid("Spec or Schedule given to Add", errors.New("the spec argument of Add is the schedule")))
		return
	case c.addSpec != nil:
		spec, what = *c.addSpec, fmt.Sprintf("spec %q", *c.addSpec)
	case c.specSet && c.schedSet:
		c.errs = append(c.errs, invalid("both Spec and Schedule", nil))
		return
	case !c.specSet:
		if c.schedule == nil && c.dedupe {
			c.errs = append(c.errs, invalid("no Spec", errNoSchedule))
		}
		return
	}
	s, err := c.parser.Parse(spec)
	if err != nil {
		c.errs = append(c.errs, invalid(what, err))
		return
	}
	c.schedule = s
}

// errNoSchedule explains why Job, Func and Wrapper need a Spec.
var errNoSchedule = errors.New("a job cannot see the schedule cron runs it on, so it cannot name a tick " +
	"the same on every instance (an @every schedule fires at a different moment on each); " +
	"use cronguard.Add, or pass cronguard.Spec with the spec you give cron, or NoDedupe")

// err returns the first configuration error, or nil.
func (c *config) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	return c.errs[0]
}

// lockOptions are the guard options of one run.
func (c *config) lockOptions(name, tick string) []guard.LockOption {
	opts := []guard.LockOption{
		guard.Wait(c.wait),
		guard.Name(name),
		guard.Attrs(attrJob(name), attrTick(tick)),
	}
	if c.minHold > 0 {
		opts = append(opts, guard.MinHold(c.minHold))
	}
	if c.ttl > 0 {
		opts = append(opts, guard.TTL(c.ttl))
	}
	if c.permits > 1 {
		opts = append(opts, guard.Permits(c.permits))
	}
	return opts
}

// invalid is a configuration error, matching guard.ErrInvalid (and cause).
func invalid(what string, cause error) error { return adapt.Invalid("cronguard", what, cause) }

// CronLogger returns l as a cron.Logger, for cron.WithLogger: cron's own
// messages (each schedule, wake-up and run) at Debug, its errors (a job's
// panic that cron recovered) at Error, so that cron, cronguard and guard
// log through one *slog.Logger in one format. A nil l discards them.
func CronLogger(l *slog.Logger) cron.Logger {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return cronLogger{l}
}

type cronLogger struct{ l *slog.Logger }

func (c cronLogger) Info(msg string, kv ...any) { c.l.Debug(msg, kv...) }
func (c cronLogger) Error(err error, msg string, kv ...any) {
	c.l.Error(msg, append(kv, "err", err)...)
}
