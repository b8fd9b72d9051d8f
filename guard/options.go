package guard

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Option configures a Locker. Options are validated by New.
type Option func(*config)

// config is a Locker's validated configuration.
type config struct {
	ttl            time.Duration
	renewInterval  time.Duration
	stopGrace      time.Duration
	requestTimeout time.Duration
	prefix         string
	observer       Observer
	logger         *slog.Logger
	replicas       int
	replicaTimeout time.Duration
	closeTimeout   time.Duration
	identity       string // recorded with each hold: see WithIdentity

	// set records which durations were given, so the others default relative to the TTL.
	intervalSet, graceSet, timeoutSet, closeSet bool
	identitySet                                 bool
}

// WithTTL sets the lease TTL: how long a hold survives in Redis without a
// renewal, and so how long a crashed holder can block the key.
// Default: 30s. Must be positive, and at most 100 years.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithRenewInterval sets how often the heartbeat renews a held lease.
// Default: TTL/3. Interval + request timeout + stop grace must fit in the TTL
// less the clock drift allowance (TTL/100 + 2ms).
func WithRenewInterval(d time.Duration) Option {
	return func(c *config) { c.renewInterval, c.intervalSet = d, true }
}

// WithStopGrace sets how long before the lease could expire the lease
// context is canceled when no renewal has succeeded: the job's time to wind
// down before anyone else can acquire the key. Default: TTL/10. Must be >= 0.
func WithStopGrace(d time.Duration) Option {
	return func(c *config) { c.stopGrace, c.graceSet = d, true }
}

// WithRequestTimeout bounds each renewal attempt and each release; on a
// quorum (NewQuorum) also each master's answer to an acquisition.
// Default: TTL/10. Must be positive.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) { c.requestTimeout, c.timeoutSet = d, true }
}

// WithPrefix sets the prefix of every Redis key and channel the Locker uses.
// Default: "guard:". It must not contain '{' or '}', which would break the
// hash tag that keeps a lock's keys in one Cluster slot.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithObserver reports every lock operation to o (see the tracing package).
// Default: none. Must not be nil.
func WithObserver(o Observer) Option { return func(c *config) { c.observer = o } }

// WithLogger sets the logger. Success is logged at Debug; a busy key at
// Info the first time and then at most once a minute per key (with
// "repeated", the count not logged since), at Debug otherwise, and not at
// all for an adapter's acquisition, which logs it itself; a failed renewal
// or release at Warn; a lost lease at Error. Default: a logger that
// discards everything. Must not be nil.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithReplicaAck makes every acquisition and renewal wait (Redis WAIT) until
// n replicas have acknowledged it, for at most timeout. An acquisition that
// is not acknowledged in time is released and fails with ErrNotReplicated; a
// renewal that is not acknowledged counts as failed. Use it with Sentinel, so
// that a failover does not forget a fresh lock. Default: off (n = 0).
// Not supported with a Cluster client. On a quorum (NewQuorum) each master
// waits for n of its own replicas, and a master that is not acknowledged
// counts as failed.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return func(c *config) { c.replicas, c.replicaTimeout = n, timeout }
}

// WithCloseTimeout bounds how long Close waits, after canceling the
// contexts of the leases it still holds, for their jobs to return and
// release them. The leases are renewed while Close waits, so no other owner
// can take a key under a job that is winding down; a lease still held when
// the time is up is no longer renewed and expires in Redis within its TTL,
// never deleted under its job. Default: the TTL. Must be >= 0.
func WithCloseTimeout(d time.Duration) Option {
	return func(c *config) { c.closeTimeout, c.closeSet = d, true }
}

// newConfig applies opts over the defaults, fills in the durations that
// default relative to the TTL, and validates the result.
func newConfig(opts []Option) (config, error) {
	c := config{ttl: 30 * time.Second, prefix: "guard:", observer: nopObserver{}, logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: nil option", ErrInvalid)
		}
		o(&c)
	}
	if c.ttl <= 0 {
		return c, fmt.Errorf("%w: TTL %v must be positive", ErrInvalid, c.ttl)
	}
	c.defaultDurations()
	if err := c.resolveIdentity(); err != nil {
		return c, err
	}
	return c, c.validate()
}

// defaultDurations sets the durations not given relative to the TTL.
func (c *config) defaultDurations() {
	if !c.intervalSet {
		c.renewInterval = c.ttl / 3
	}
	if !c.graceSet {
		c.stopGrace = c.ttl / 10
	}
	if !c.timeoutSet {
		c.requestTimeout = c.ttl / 10
	}
	if !c.closeSet {
		c.closeTimeout = c.ttl
	}
}

func (c *config) validate() error {
	switch {
	case c.closeTimeout < 0:
		return fmt.Errorf("%w: close timeout %v must be >= 0", ErrInvalid, c.closeTimeout)
	case c.observer == nil:
		return fmt.Errorf("%w: nil observer", ErrInvalid)
	case c.logger == nil:
		return fmt.Errorf("%w: nil logger", ErrInvalid)
	case strings.ContainsAny(c.prefix, "{}"):
		return fmt.Errorf("%w: prefix %q must not contain '{' or '}'", ErrInvalid, c.prefix)
	case c.replicas < 0 || (c.replicas > 0 && c.replicaTimeout <= 0):
		return fmt.Errorf("%w: replica ack needs n >= 0 and a positive timeout, got %d, %v", ErrInvalid, c.replicas, c.replicaTimeout)
	}
	_, err := newTiming(c.ttl, c.renewInterval, c.stopGrace, c.requestTimeout)
	return err
}

// LockOption configures one acquisition.
type LockOption func(*lockConfig)

type lockConfig struct {
	wait     time.Duration
	waitSet  bool
	ttl      time.Duration
	minHold  time.Duration
	name     string
	attrs    []slog.Attr
	fenceTTL time.Duration
	permits  int // 1: a plain lock
	// permitsSet records that Permits was given: a read lease refuses it.
	permitsSet bool
}

// Wait bounds how long an acquisition waits for a busy key. 0 means try
// once. Default: wait until ctx is done. Must be >= 0.
func Wait(d time.Duration) LockOption {
	return func(c *lockConfig) { c.wait, c.waitSet = d, true }
}

// TTL overrides the Locker's TTL for this lease; the renew interval, stop
// grace and request timeout are scaled with it. It applies to a fresh
// acquisition; a re-entry keeps the outer hold's TTL. Must be positive, and
// at most 100 years.
func TTL(d time.Duration) LockOption { return func(c *lockConfig) { c.ttl = d } }

// MinHold keeps the key held until at least d after the acquisition, even
// when the job finishes and releases sooner (ShedLock's lockAtLeastFor), so
// that a short job on a fleet with skewed clocks still runs once. Measured on
// the server's clock. Default: 0. Must be >= 0.
func MinHold(d time.Duration) LockOption { return func(c *lockConfig) { c.minHold = d } }

// FenceTTL lets the key's fencing counter expire at least d, and at least
// the lease's TTL, after its last acquisition, for keys that are used once
// or for a while and then never again (a request id, a payload hash):
// without it every such key leaves a counter in Redis forever. A counter
// expires only if every acquisition that used it asked for FenceTTL: one
// without it makes the counter permanent. An expired counter does not send
// tokens back: a token is never below the server's clock in microseconds
// (see the package doc, Fencing, for the clock assumption), unless that
// clock is stepped back by more than d after the counter expired.
// Default: 0, the counter never expires. Must be >= 0.
func FenceTTL(d time.Duration) LockOption { return func(c *lockConfig) { c.fenceTTL = d } }

// Permits makes the acquisition take one of n permits of the key instead
// of the key itself: up to n holders, on any Lockers of the fleet, hold the
// key at once, each a full lease of its own (renewed, told before it could
// end, its own fencing token, released on return, MinHold honoured, freed
// within its TTL when its holder crashes). A release of one permit grants
// it to one waiting acquisition, so a freed permit wakes one waiter, not
// all. A re-entry through the context takes no second permit; it must ask
// for the same n.
//
// Every holder of a key must ask for the same n: an acquisition whose n
// differs from that of the key's current holders fails at once with an
// error matching ErrPermitsDiffer (so a fleet that is changing its limit
// in a rolling deploy sees errors, never a limit that is silently larger),
// and a key's n is set anew whenever it has no holder. Permits applies to
// write leases: AcquireRead and WithReadLock refuse it with ErrInvalid, and
// so does a quorum (NewQuorum) for n > 1: masters that each admit n holders
// do not bound the fleet by n under majority votes. Inspect reports a
// key's n as LockState.Permits. Default: 1, a plain lock. Must be >= 1.
func Permits(n int) LockOption {
	return func(c *lockConfig) { c.permits, c.permitsSet = n, true }
}

// Name sets the name observers report the lock under, for metrics: keep
// it low in cardinality ("nightly-report", a task type, a route), unlike a
// key that carries an id. Default: the key.
func Name(n string) LockOption { return func(c *lockConfig) { c.name = n } }

// Attrs adds attributes that observers attach to the run (a tracer: to its
// span), such as the route an HTTP adapter guards.
func Attrs(attrs ...slog.Attr) LockOption {
	return func(c *lockConfig) { c.attrs = append(c.attrs, attrs...) }
}

// newLockConfig applies opts for an acquisition of key, a write lease when
// write is set, and validates them.
func newLockConfig(def time.Duration, key string, write bool, opts []LockOption) (lockConfig, error) {
	c := lockConfig{ttl: def, name: key, permits: 1}
	if len(opts) > 0 {
		var err error
		if c, err = applyLockOptions(c, opts); err != nil {
			return c, err
		}
	}
	switch {
	case c.wait < 0:
		return c, fmt.Errorf("%w: wait %v must be >= 0", ErrInvalid, c.wait)
	case c.ttl <= 0:
		return c, fmt.Errorf("%w: TTL %v must be positive", ErrInvalid, c.ttl)
	case c.minHold < 0:
		return c, fmt.Errorf("%w: MinHold %v must be >= 0", ErrInvalid, c.minHold)
	case c.fenceTTL < 0:
		return c, fmt.Errorf("%w: FenceTTL %v must be >= 0", ErrInvalid, c.fenceTTL)
	case c.permits < 1:
		return c, fmt.Errorf("%w: Permits(%d) must be >= 1", ErrInvalid, c.permits)
	case c.permitsSet && !write:
		return c, fmt.Errorf("%w: Permits(%d) applies to write leases, not read leases", ErrInvalid, c.permits)
	}
	return c, nil
}

// applyLockOptions applies opts to c. It is apart from newLockConfig because
// the options take c's address, which moves it to the heap: an allocation
// that an acquisition without options need not pay.
func applyLockOptions(c lockConfig, opts []LockOption) (lockConfig, error) {
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: nil lock option", ErrInvalid)
		}
		o(&c)
	}
	return c, nil
}
