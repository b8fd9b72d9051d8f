package gocronguard

import (
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/adapt"
)

// Option configures a Locker or a Task. Options are validated when the
// Locker or Task is made, which panics with an error matching
// guard.ErrInvalid on a bad one (Validate returns it instead).
type Option func(*config)

const (
	// defaultPrefix is what a Locker puts before a job's name to make its
	// lease key, unless Prefix or KeyFunc says otherwise.
	defaultPrefix = "gocron:"
	// defaultWindow is a tick's length unless Window says otherwise:
	// gocron fires cron, daily, weekly and monthly jobs on whole seconds.
	defaultWindow = time.Second
	// minClaim is the shortest time a tick's claim is kept.
	minClaim = time.Minute
)

// config is the configuration of a Locker or a Task.
type config struct {
	prefix    string
	prefixSet bool
	keyFunc   func(name string) string
	window    time.Duration
	dedupe    bool
	minHold   time.Duration
	ttl       time.Duration // 0: the guard.Locker's TTL
	log       *slog.Logger
	now       func() time.Time

	errs []error // option errors; err returns the first
}

// Prefix sets what a Locker puts before gocron's job name to make the lease
// key: the key of a job named "report" is Prefix + "report". Use it to keep
// the jobs of two services that share a Redis apart. A Task's key is its
// name, so a Task takes no Prefix. Default: "gocron:". Must
// not contain '}' (guard keys cannot). Not with KeyFunc.
func Prefix(p string) Option {
	return func(c *config) {
		if strings.Contains(p, "}") {
			c.errs = append(c.errs, invalid(fmt.Sprintf("Prefix(%q)", p), fmt.Errorf("must not contain '}' (guard keys cannot)")))
		}
		c.prefix, c.prefixSet = p, true
	}
}

// KeyFunc makes a Locker derive the lease key from gocron's job name with f
// instead of with a Prefix. f must return the same key for the same name on
// every instance. A key it returns that is empty or contains '}' fails that
// run's Lock with an error matching guard.ErrInvalid, logged at Error. A
// Task takes no KeyFunc. Must not be nil. Not with Prefix.
func KeyFunc(f func(name string) string) Option {
	return func(c *config) {
		if f == nil {
			c.errs = append(c.errs, invalid("KeyFunc(nil)", nil))
			return
		}
		c.keyFunc = f
	}
}

// Window sets the length of a tick, the span of time that counts as one
// run of a job: a run's tick is the d-long window, counted from the Unix
// epoch, that holds the moment gocron asked for the lock, read on this
// instance's clock, and the first instance to claim the job's key and tick
// runs it (see the package doc).
//
// The default, 1s, suits every job that gocron fires at set times, which
// are whole seconds: a CronJob, DailyJob, WeeklyJob, MonthlyJob, a
// OneTimeJob at a given time, and a DurationJob that every instance starts
// at the same whole second (gocron.WithStartAt). For a DurationJob that
// each instance starts at its own moment, pass the job's duration, so that
// each period is one tick whatever the instances' phases.
// A longer window lets a run start later after its scheduled time and still
// get its tick; it must stay shorter than the shortest gap between two runs
// of the job, or the second run of a window is skipped on every instance.
// Must be positive.
func Window(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, invalid(fmt.Sprintf("Window(%v)", d), fmt.Errorf("must be positive")))
		}
		c.window = d
	}
}

// NoDedupe turns once-per-tick off: every instance whose run finds the
// job's lease free runs it, as gocron's Lockers usually do, so a short job
// runs once per instance per scheduled time. Runs still never overlap. Use
// it with MinHold, or for jobs that must not overlap but may repeat.
// Default: dedupe on.
func NoDedupe() Option { return func(c *config) { c.dedupe = false } }

// MinHold keeps the job's lease until at least d after the run started,
// even when the job returns sooner (ShedLock's lockAtLeastFor): runs that
// come within d are skipped on every instance. Default: 0. Must be >= 0.
func MinHold(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.errs = append(c.errs, invalid(fmt.Sprintf("MinHold(%v)", d), fmt.Errorf("must be >= 0")))
		}
		c.minHold = d
	}
}

// TTL sets the TTL of the lease a run holds (guard.TTL): how long an
// instance that crashes mid-run keeps the job from running anywhere. The
// lease is renewed while the job runs, so a run may last longer than the
// TTL. Default: the guard.Locker's TTL (guard.WithTTL, 30s). Must be
// positive and leave room for the Locker's renewal schedule.
func TTL(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, invalid(fmt.Sprintf("TTL(%v)", d), fmt.Errorf("must be positive")))
		}
		c.ttl = d
	}
}

// Logger sets where skipped runs and failures are reported, at the levels
// every package of jobguard uses: a run skipped because another instance
// already claimed its tick, or because the job's context or the Locker
// ended, at Debug (that is the fleet working); a run skipped because the
// job still runs at Info, the first time and then at most once a minute per
// job, with the number of skips not logged ("repeated"), and at Debug
// otherwise; a lease lost during a run at Warn, naming the job (the
// guard.Locker's logger, if it has one, reports the loss at Error); Redis
// errors and a failed release at Error; a run that ended at Debug. A
// *slog.Logger is
// also a gocron.Logger: pass the same one to gocron.WithLogger to see both
// in one format. Default: a logger that discards everything. Must not be
// nil.
func Logger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.errs = append(c.errs, invalid("Logger(nil)", nil))
			return
		}
		c.log = l
	}
}

// Validate returns the error that Locker would panic with for these
// arguments, or nil, to check a configuration without a panic. The error
// matches guard.ErrInvalid.
func Validate(l *guard.Locker, opts ...Option) error {
	c := newConfig(l, opts)
	return c.err()
}

func newConfig(l *guard.Locker, opts []Option) config {
	c := config{
		prefix: defaultPrefix,
		window: defaultWindow,
		dedupe: true,
		log:    slog.New(slog.DiscardHandler),
		now:    time.Now,
	}
	if l == nil {
		c.errs = append(c.errs, invalid("nil *guard.Locker", nil))
	}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, invalid("nil Option", nil))
			continue
		}
		o(&c)
	}
	if c.prefixSet && c.keyFunc != nil {
		c.errs = append(c.errs, invalid("both Prefix and KeyFunc", nil))
	}
	if l != nil && c.ttl > 0 {
		// A TTL too short for the Locker's renewal schedule fails here, not at every run.
		if err := l.ValidateLockOptions(guard.TTL(c.ttl)); err != nil {
			c.errs = append(c.errs, fmt.Errorf("gocronguard: %w", err))
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

// keyOf returns the lease key of the job gocron calls name.
func (c *config) keyOf(name string) (string, error) {
	key := c.prefix + name
	if c.keyFunc != nil {
		key = c.keyFunc(name)
	}
	switch {
	case key == "":
		return "", fmt.Errorf("gocronguard: job %q: %w: empty key", name, guard.ErrInvalid)
	case strings.Contains(key, "}"):
		return "", fmt.Errorf("gocronguard: job %q: %w: key %q must not contain '}'", name, guard.ErrInvalid, key)
	}
	return key, nil
}

// lockOptions are the guard options of one run.
func (c *config) lockOptions(name, tick string) []guard.LockOption {
	opts := []guard.LockOption{
		guard.Wait(0),
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

// invalid is a configuration error, matching guard.ErrInvalid (and cause).
func invalid(what string, cause error) error { return adapt.Invalid("gocronguard", what, cause) }

// isNilPointer reports whether v is an interface holding a nil pointer.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
