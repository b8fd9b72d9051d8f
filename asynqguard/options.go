package asynqguard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/internal/adapt"
)

// Option configures the middleware. Options are validated by New and
// Middleware; a later busy policy (Retry, Skip, Revoke, Archive) replaces an
// earlier one.
type Option func(*config)

// policy is what the middleware does with a task whose key is busy.
type policy int

const (
	policyRetry policy = iota
	policySkip
	policyRevoke
	policyArchive
)

func (p policy) String() string {
	return [...]string{"retry", "skip", "revoke", "archive"}[p]
}

// config is the middleware's validated configuration.
type config struct {
	key      func(context.Context, *asynq.Task) (string, error)
	policy   policy
	wait     time.Duration // with waitSet; else the default, see waitBudget
	doneTTL  time.Duration
	ttl      time.Duration // 0: the Locker's TTL
	fenceTTL time.Duration // 0: fencing counters never expire
	limit    int           // tasks of one key at once, under Limit
	pattern  string        // the handler's ServeMux pattern, the key under Limit
	logger   *slog.Logger

	doneSet, ttlSet, keySet, fenceSet, limitSet, patternSet, waitSet bool
}

// KeyFunc sets how a task's lock key is derived. Tasks with equal keys never
// run at the same time across all servers sharing the Redis of the Locker.
// An error from f is returned to asynq, which retries the task on its own
// schedule (spending a retry); the handler does not run. The key must not
// be empty nor contain '}', or the task is archived with an error matching
// guard.ErrInvalid and asynq.SkipRetry.
// Default: the task type, ":", and the hex SHA-256 of the payload, so only
// identical tasks exclude each other; with Limit, the Pattern. Under Limit
// with KeyFunc, n tasks of each key it returns run at once: a key chosen on
// purpose, such as one per tenant.
// Must not be nil; not with Pattern under Limit.
func KeyFunc(f func(ctx context.Context, t *asynq.Task) (string, error)) Option {
	return func(c *config) { c.key, c.keySet = f, true }
}

// FenceTTL lets the fencing counter of each key expire d after the key's
// last run (guard.FenceTTL). Keys made from payload hashes are used a few
// times and then never again, and each would otherwise leave a counter in
// Redis forever; tokens stay increasing as long as a key runs at least every
// d. Default: 24h with the default key, or DoneTTL if longer; no expiry with
// a KeyFunc or Limit, whose keys may be reused for years. 0 means no
// expiry.
// Must be >= 0.
func FenceTTL(d time.Duration) Option {
	return func(c *config) { c.fenceTTL, c.fenceSet = d, true }
}

// defaultFenceTTL is how long the fencing counter of a default key lives
// after the key's last run.
const defaultFenceTTL = 24 * time.Hour

// Retry makes a task whose key is busy return an error matching ErrBusy,
// so that asynq retries it later. Wire IsFailure and RetryDelay into
// asynq.Config and the retry comes soon and spends none of the task's
// retries; without them asynq retries on its own back-off and counts each
// busy attempt as a failure. Under Limit a busy task first waits a while
// for a permit (see WaitFor), and only a task still busy then is retried.
// A task with no retry left (MaxRetry(0), or all spent on failures), which
// asynq would archive on any error, waits for the key instead, until its
// context ends. This is the default busy policy.
func Retry() Option { return func(c *config) { c.policy = policyRetry } }

// Skip makes a task whose key is busy succeed without running: the
// duplicate is dropped and logged (at Info once a minute per key, see
// Logger).
func Skip() Option { return func(c *config) { c.policy = policySkip } }

// Revoke makes a task whose key is busy return an error matching ErrBusy
// and asynq.RevokeTask: asynq deletes it without retrying or archiving it.
func Revoke() Option { return func(c *config) { c.policy = policyRevoke } }

// Archive makes a task whose key is busy return an error matching ErrBusy
// and asynq.SkipRetry: asynq archives it, where it can be inspected and run
// again.
func Archive() Option { return func(c *config) { c.policy = policyArchive } }

// Limit makes at most n tasks of one key run at once across every server
// that shares the Locker's Redis: with Pattern, n tasks of the wrapped
// handler, whatever their type; with KeyFunc, n tasks of each key it
// returns. It needs one of the two: asynq's ServeMux runs a handler for
// every task whose type starts with the handler's pattern
// ("report:export:1" runs the "report:export" handler), so a limit per
// task type would not bound the handler, and New refuses Limit alone with
// an error matching guard.ErrInvalid. This is the fleet-wide limit that
// asynq's per-server Concurrency is not. Each running task holds one of
// the key's n permits (guard.Permits), renewed while its handler runs and
// freed within the TTL if its server crashes. A task that finds all n
// taken waits for one, in line with the other waiting tasks of the key:
// the release of a permit grants it to the task that has waited longest,
// which starts without a further round trip. The wait is bounded (see
// WaitFor: by default up to 10s, less near the task's deadline) and holds
// an asynq worker while it lasts; a task still busy after it gets the busy
// policy (by default it is retried soon without spending a retry).
// WaitFor(0) gives every busy task straight to the busy policy instead.
// Every middleware and server that runs tasks of one key must give
// the same n: a task whose key is held under another limit fails with an
// error matching guard.ErrPermitsDiffer, and asynq retries it on its own
// back-off (a rolling deploy that changes n costs such retries until the
// old servers' tasks end). Not with DoneTTL: a limited key is shared by
// different tasks, so a done record would skip them all.
// Default: off, the key's tasks exclude each other. Must be >= 1, with
// Pattern or KeyFunc.
func Limit(n int) Option { return func(c *config) { c.limit, c.limitSet = n, true } }

// Pattern tells the middleware p, the asynq.ServeMux pattern the wrapped
// handler is registered under, as in
//
//	mux.Handle("report:export", Middleware(l, Limit(2), Pattern("report:export"))(h))
//
// Under Limit the key is p, so the limit holds for every task the mux
// routes to the handler: every type that starts with p, "report:export:1"
// as well as "report:export". Every server running the handler must pass
// the same p. Without Limit, Pattern does not change the key (the task
// type and payload hash, or KeyFunc's): that key names one task, and tasks
// of other types are other tasks. Either way it names the handler's locks
// for observers (tracing's jobguard.lock.name) in place of each task's
// type, so that one handler makes one metric series. Give each limited
// handler its own middleware: one installed with mux.Use wraps every
// handler of the mux, and under Limit would bound all of them together
// under the one key p.
// Default: none. Must not be empty (nor only spaces, which asynq refuses
// as a pattern) nor contain '}', which guard refuses in a key; not with
// KeyFunc under Limit, where both would set the key.
func Pattern(p string) Option {
	return func(c *config) { c.pattern, c.patternSet = p, true }
}

// WaitFor makes a task wait up to d for a busy key before the busy policy
// applies, ending half a second before the task's deadline so that a busy
// task ends busy (no retry spent) rather than by its deadline. A waiting
// task holds its asynq worker; it starts the moment the key is released
// to it (under Limit, the moment a permit is: releases grant permits to
// the longest waiting task first). WaitFor(0) tries once, so a busy task
// frees its worker at once.
// Default: under Limit with the Retry policy, 10s, or a tenth of the time
// left before the task's deadline when that is less (asynq's default
// Timeout, 30 minutes, gives 10s; Timeout(30s) gives 3s), so that a task
// given a permit late keeps most of its time to run. A permit usually
// frees sooner than asynq's retry set would bring the task back (it is
// checked every 5s by default). Otherwise 0: a busy key without Limit is a
// duplicate, whose holder may run for hours, and Skip, Revoke and Archive
// act on a busy task at once.
// Must be >= 0.
func WaitFor(d time.Duration) Option { return func(c *config) { c.wait, c.waitSet = d, true } }

// The default wait for a permit under Limit (see WaitFor): the time left
// before the task's deadline divided by limitWaitShare, at most
// limitWaitMax.
const (
	limitWaitMax   = 10 * time.Second
	limitWaitShare = 10
)

// deadlineMargin is how long before the task's deadline a wait for a busy
// key gives up, so that the task ends busy (no retry spent) rather than by
// its deadline (a failure).
const deadlineMargin = 500 * time.Millisecond

// waitBudget is how long a task that starts at now, with the deadline dl
// when hasDeadline, waits for a busy key: WaitFor's d, or the default under
// Limit, cut short to end deadlineMargin before the deadline.
func (c *config) waitBudget(now, dl time.Time, hasDeadline bool) time.Duration {
	wait := c.wait
	if !c.waitSet && c.limitSet && c.policy == policyRetry {
		wait = limitWaitMax
		if hasDeadline {
			wait = min(wait, dl.Sub(now)/limitWaitShare)
		}
	}
	if hasDeadline {
		wait = min(wait, dl.Sub(now)-deadlineMargin)
	}
	return max(wait, 0)
}

// DoneTTL records, when the handler returns nil, that the task's key is
// done, for d (guard.Locker.Claim, beside the lock). A task with that key
// that runs while the record lives succeeds without running the handler and
// is logged (at Info once a minute per key, see Logger): a duplicate
// enqueued after success is dropped.
// Default: off. Must be positive.
func DoneTTL(d time.Duration) Option {
	return func(c *config) { c.doneTTL, c.doneSet = d, true }
}

// TTL sets the lease TTL of each task's lock (guard.TTL), which bounds how
// long a crashed server blocks the key. Default: the Locker's TTL.
// Must be positive.
func TTL(d time.Duration) Option { return func(c *config) { c.ttl, c.ttlSet = d, true } }

// Logger sets the logger. What a fleet's duplicates and retries repeat (a
// busy key, a duplicate skipped, revoked, archived or already done) is
// logged at Info the first time for a key and then at most once a minute,
// with "repeated", the count not logged since, and at Debug otherwise; a
// lost lease at Warn (guard's own logger reports the loss at Error).
// Errors are returned to asynq, which logs them.
// Default: a logger that discards everything.
// Must not be nil.
func Logger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

func newConfig(opts []Option) (config, error) {
	c := config{key: defaultKey, policy: policyRetry, logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if o == nil {
			return c, invalid("nil option")
		}
		o(&c)
	}
	switch {
	case c.key == nil:
		return c, invalid("nil KeyFunc")
	case c.logger == nil:
		return c, invalid("nil Logger")
	case c.wait < 0:
		return c, invalid("WaitFor %v must be >= 0", c.wait)
	case c.doneSet && c.doneTTL <= 0:
		return c, invalid("DoneTTL %v must be positive", c.doneTTL)
	case c.ttlSet && c.ttl <= 0:
		return c, invalid("TTL %v must be positive", c.ttl)
	case c.fenceTTL < 0:
		return c, invalid("FenceTTL %v must be >= 0", c.fenceTTL)
	case c.patternSet && strings.TrimSpace(c.pattern) == "":
		return c, invalid("Pattern %q must not be empty", c.pattern)
	case strings.Contains(c.pattern, "}"):
		return c, invalid("Pattern %q must not contain '}': it is the lock key under Limit, and guard refuses '}' in a key", c.pattern)
	case c.limitSet && c.limit < 1:
		return c, invalid("Limit(%d) must be >= 1", c.limit)
	case c.limitSet && c.doneSet:
		return c, invalid("DoneTTL with Limit: a limited key is shared by different tasks, and a done record would skip them all")
	case c.limitSet && !c.keySet && !c.patternSet:
		return c, invalid("Limit(%d) needs Pattern or KeyFunc: asynq's ServeMux runs a handler for every task type that starts with its pattern "+
			"(\"report:export:1\" runs the \"report:export\" handler), so a limit per task type would not bound the handler; "+
			"pass Pattern with the pattern the handler is registered under, or KeyFunc for a key of your own", c.limit)
	case c.limitSet && c.keySet && c.patternSet:
		return c, invalid("Pattern %q and KeyFunc under Limit: both would set the limited key; pass one", c.pattern)
	}
	if c.limitSet && !c.keySet {
		pattern := c.pattern
		c.key = func(context.Context, *asynq.Task) (string, error) { return pattern, nil }
	}
	if !c.fenceSet && !c.keySet && !c.limitSet {
		c.fenceTTL = max(defaultFenceTTL, c.doneTTL)
	}
	return c, nil
}

// invalid is a configuration error, matching guard.ErrInvalid.
func invalid(format string, args ...any) error { return adapt.Invalidf("asynqguard", format, args...) }

// defaultKey is the task type and the hex SHA-256 of the payload. A '}'
// in the type (which guard rejects, as it would break the Cluster hash
// tag) is escaped, as is '%', so distinct types keep distinct keys.
func defaultKey(_ context.Context, t *asynq.Task) (string, error) {
	sum := sha256.Sum256(t.Payload())
	typ := t.Type()
	if strings.ContainsAny(typ, "%}") {
		typ = strings.NewReplacer("%", "%25", "}", "%7D").Replace(typ)
	}
	return typ + ":" + hex.EncodeToString(sum[:]), nil
}
