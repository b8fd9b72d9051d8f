package cronguard

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/robfig/cron/v3"
)

// Option configures a guarded job. Options are validated when the job is
// made; see Validate for what happens to an invalid one.
type Option func(*config)

// config is a guarded job's configuration.
type config struct {
	schedule cron.Schedule // nil: ticks are whole seconds
	dedupe   bool
	wait     time.Duration
	minHold  time.Duration
	ttl      time.Duration // 0: the Locker's TTL
	log      cron.Logger
	base     context.Context
	now      func() time.Time

	errs []error // option errors, reported by validate
}

// specParser reads what cron.New() and cron.New(cron.WithSeconds()) read:
// five fields, or six with seconds first, and descriptors such as @daily
// and @every 5m, with an optional CRON_TZ= or TZ= prefix.
var specParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour |
	cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec tells the job its schedule: give it the spec you pass to
// cron.AddJob or cron.AddFunc. It accepts five fields (cron.New), six with
// seconds first (cron.WithSeconds), and descriptors (@hourly, @every 5m),
// with an optional CRON_TZ= prefix. A spec without a zone is read in the
// local time zone, as cron reads it by default; if your Cron runs in another
// (cron.WithLocation), prefix the spec with CRON_TZ=.
//
// With a Spec, a run's tick is the schedule's latest activation at or before
// the time the run starts, and for @every d it is the d-long bucket, counted
// from the Unix epoch, that holds that time. Without a Spec, the tick is the
// start time truncated to the second (cron fires on whole seconds), which is
// right for every spec but @every. Default: no Spec. An @every schedule needs
// one: instances start it at different moments, so only epoch-aligned
// buckets give them the same tick.
func Spec(spec string) Option {
	return func(c *config) {
		s, err := specParser.Parse(spec)
		if err != nil {
			c.errs = append(c.errs, invalid(fmt.Sprintf("Spec(%q)", spec), err))
			return
		}
		c.schedule = s
	}
}

// Schedule is Spec for a schedule you parsed yourself, for a cron.Cron
// with a parser of its own (cron.WithParser). Its activations must not
// depend on when it is asked (any cron.SpecSchedule does not); a
// cron.ConstantDelaySchedule is taken as @every. Must not be nil.
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
		c.schedule = s
	}
}

// NoDedupe turns per-tick dedupe off: every instance whose tick comes finds
// the job free and runs it, as with a plain lock (gocron, ShedLock without
// lockAtLeastFor), so a short job runs once per instance per tick. Runs
// still never overlap. Use it with MinHold, or for jobs that must not
// overlap but may repeat. Default: dedupe on.
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

// Logger sets where the job reports what cron itself cannot: skipped ticks
// at Info; a failed job, a recovered panic, a lost lease, a Redis error and
// an invalid configuration at Error. Runs that succeed log nothing. Pass the
// logger of your cron.Cron (cron.WithLogger) to see both in one place.
// Default: a logger that discards everything. Must not be nil.
func Logger(l cron.Logger) Option {
	return func(c *config) {
		if l == nil || isNilPointer(l) {
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
	c := config{dedupe: true, log: discard{}, base: context.Background(), now: time.Now}
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
	if l != nil && c.ttl > 0 {
		// A TTL too short for the Locker's renewal schedule fails here, not at every tick.
		if err := l.ValidateLockOptions(guard.TTL(c.ttl)); err != nil {
			c.errs = append(c.errs, fmt.Errorf("cronguard: %w", err))
		}
	}
	return c
}

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
	return opts
}

// invalidError is a configuration error: it matches guard.ErrInvalid and
// the underlying cause, if any.
type invalidError struct {
	what  string
	cause error
}

func invalid(what string, cause error) error { return &invalidError{what: what, cause: cause} }

func (e *invalidError) Error() string {
	if e.cause == nil {
		return "cronguard: invalid configuration: " + e.what
	}
	return "cronguard: invalid configuration: " + e.what + ": " + e.cause.Error()
}

func (e *invalidError) Unwrap() []error {
	if e.cause == nil {
		return []error{guard.ErrInvalid}
	}
	return []error{guard.ErrInvalid, e.cause}
}

// discard is the default Logger.
type discard struct{}

func (discard) Info(string, ...any)         {}
func (discard) Error(error, string, ...any) {}
