package guard

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Locker acquires leases on named locks in one Redis deployment (standalone,
// Sentinel or Cluster). It renews every lease it holds from one heartbeat
// and waits for busy keys on one pub/sub subscription. A Locker is safe for
// concurrent use; share one per process and Close it on shutdown.
type Locker struct {
	client  redis.UniversalClient
	id      string // names this Locker in a lock's queue of waiting Lockers
	cfg     config
	log     *slog.Logger
	obs     Observer
	scripts scripts
	cluster bool
	publish string // PUBLISH, or SPUBLISH on Cluster

	hb     *heartbeat
	notify *notifier

	closed    chan struct{}
	closeOnce sync.Once
	runner    runner // runs requests that may outlive their caller's ctx

	mu      sync.Mutex
	holds   map[*hold]struct{}
	drained chan struct{} // set by Close; closed when holds is empty
}

// New returns a Locker on client, which may be a standalone, Sentinel
// (failover) or Cluster client. It validates every option and returns an
// error matching ErrInvalid when one does not fit.
func New(client redis.UniversalClient, opts ...Option) (*Locker, error) {
	if isNil(client) {
		return nil, fmt.Errorf("%w: nil client", ErrInvalid)
	}
	switch client.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		// A Ring shards keys by its own hash, so a lock's keys and channel
		// would not meet on one server, and its pub/sub cannot serve waiters.
		return nil, fmt.Errorf("%w: client type %T is not supported: use a *redis.Client (standalone, or Sentinel from redis.NewFailoverClient) or a *redis.ClusterClient", ErrInvalid, client)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	_, cluster := client.(*redis.ClusterClient)
	if cluster && cfg.replicas > 0 {
		return nil, fmt.Errorf("%w: WithReplicaAck is not supported with a Cluster client", ErrInvalid)
	}
	log := cfg.logger
	l := &Locker{
		client:  client,
		id:      rand.Text(),
		cfg:     cfg,
		log:     log,
		obs:     cfg.observer,
		scripts: newScripts(),
		cluster: cluster,
		publish: "PUBLISH",
		closed:  make(chan struct{}),
		holds:   make(map[*hold]struct{}),
	}
	if cluster {
		l.publish = "SPUBLISH"
	}
	l.hb = newHeartbeat(l)
	l.notify = newNotifier(l)
	return l, nil
}

func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Close shuts the Locker down. New acquisitions fail with ErrClosed at once.
// The contexts of the leases it still holds are canceled with a cause
// matching ErrClosed (not ErrLeaseLost: the lease is still held), and Close
// keeps renewing them while it waits, up to the close timeout
// (WithCloseTimeout, default the TTL), for their jobs to return and release
// them: a WithLock job releases when it returns, an Acquire caller with
// Release. So no other owner can take a key while a job of this Locker still
// runs. A lease still held when the time is up is no longer renewed and
// expires in Redis within its TTL; its context's cause is then also
// ErrLeaseLost, and WithLock reports the loss when its job returns. Close
// never deletes a key under a running job.
//
// Close then stops the heartbeat and the subscription and waits for its
// goroutines, including requests still on the wire (bounded by the
// client's read timeout). Calling it from inside a job waits for the close
// timeout. It does not close the Redis client. Calls after Close fail with
// ErrClosed.
func (l *Locker) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		close(l.closed)
		drained := make(chan struct{})
		l.drained = drained
		holds := l.heldLocked()
		if len(holds) == 0 {
			close(drained)
			l.drained = nil
		}
		l.mu.Unlock()
		for _, h := range holds {
			h.cancel(closingCause{h})
		}
		timer := time.NewTimer(l.cfg.closeTimeout)
		select {
		case <-drained:
		case <-timer.C:
		}
		timer.Stop()
		l.abandon()
		l.hb.close()
		l.notify.close()
		l.runner.stop()
	})
	return nil
}

// closingCause is the cause of a lease context that Close canceled while
// the lease was still held. A context's cause cannot change, so a loss that
// comes later (Close gave up waiting, a renewal failed) shows through this
// one: it then matches ErrLeaseLost too, and says why.
type closingCause struct{ h *hold }

func (c closingCause) Error() string {
	if lost := c.h.lossCause(); lost != nil {
		return "guard: locker closed, then " + lost.Error()
	}
	return "guard: locker closed: shutting down; release the lease"
}

func (c closingCause) Is(target error) bool { return target == ErrClosed }

// Unwrap returns the loss that came after Close canceled the context, if any.
func (c closingCause) Unwrap() error { return c.h.lossCause() }

// heldLocked returns the holds not yet released or lost; l.mu is held.
func (l *Locker) heldLocked() []*hold {
	holds := make([]*hold, 0, len(l.holds))
	for h := range l.holds {
		holds = append(holds, h)
	}
	return holds
}

// abandon stops renewing the holds whose jobs did not return within the
// close timeout and leaves them to expire in Redis.
func (l *Locker) abandon() {
	l.mu.Lock()
	holds := l.heldLocked()
	l.mu.Unlock()
	cause := fmt.Errorf("%w: %w: the lease was still held at the close timeout %v; no longer renewed, it expires in Redis",
		ErrLeaseLost, ErrClosed, l.cfg.closeTimeout)
	// Cancel every one before reporting any, so no job waits on a log handler.
	ended := slices.DeleteFunc(holds, func(h *hold) bool { return !h.end(cause) })
	for _, h := range ended {
		l.log.Error("guard: lease still held when Close timed out; left to expire", "key", h.key, "token", h.token)
		l.reportLost(h, cause)
	}
}

func (l *Locker) isClosed() bool {
	select {
	case <-l.closed:
		return true
	default:
		return false
	}
}

// Acquire acquires a write lease on key and returns it with its heartbeat
// already running. If ctx carries a hold on key from this Locker, Acquire
// re-enters it at once (keeping its fencing token), or returns ErrUpgrade if
// that hold is read-only. Otherwise it waits for the key as Wait says (by
// default until ctx is done) and fails with ErrNotAcquired. The caller must
// Release the lease.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...LockOption) (*Lease, error) {
	return l.acquire(ctx, key, true, opts)
}

// AcquireRead acquires a read lease on key: any number of readers, or one
// writer, hold a key at a time. A context holding a write lease on key takes
// a read lease at once (a downgrade). Otherwise as Acquire.
func (l *Locker) AcquireRead(ctx context.Context, key string, opts ...LockOption) (*Lease, error) {
	return l.acquire(ctx, key, false, opts)
}

// WithLock runs fn while holding a write lease on key. fn's context is
// canceled when the lease is lost (cause matching ErrLeaseLost), and when ctx
// is: on shutdown the lease is kept and renewed until fn returns. WithLock
// returns after the lease has been released (or the release has failed). It
// returns fn's error, joined with the loss cause when the lease was lost
// during the run. A panic in fn releases the lease and continues.
func (l *Locker) WithLock(ctx context.Context, key string, fn func(context.Context) error, opts ...LockOption) error {
	return l.run(ctx, key, true, fn, opts)
}

// WithReadLock is WithLock with a read lease.
func (l *Locker) WithReadLock(ctx context.Context, key string, fn func(context.Context) error, opts ...LockOption) error {
	return l.run(ctx, key, false, fn, opts)
}

func (l *Locker) run(ctx context.Context, key string, write bool, fn func(context.Context) error, opts []LockOption) (err error) {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalid)
	}
	lc, err := newLockConfig(l.cfg.ttl, key, opts)
	if err != nil {
		return err
	}
	info := Info{Key: key, Name: lc.name, Attrs: lc.attrs, Write: write}
	runCtx := l.obs.Begin(ctx, PhaseRun, info)
	le, err := l.acquireWith(runCtx, key, write, lc)
	if err != nil {
		info.Result, info.Err = acquireResult(err), err
		l.obs.End(runCtx, PhaseRun, info)
		return err
	}
	jobCtx, cancel := context.WithCancelCause(withHold(runCtx, le.h))
	stop := context.AfterFunc(le.ctx, func() { cancel(context.Cause(le.ctx)) })
	returned := false
	defer func() {
		stop()
		cancel(context.Canceled)
		relErr := le.Release(context.WithoutCancel(runCtx))
		info.Token, info.Reentrant, info.TTL = le.h.token, le.reentrant, le.h.timing.ttl
		info.Renewals = l.hb.renewals(le.h)
		info.Result = "released"
		switch cause := le.h.lossCause(); {
		case relErr == nil:
			// The release applied while the hold was still ours, even if
			// Close gave up on it meanwhile: no other owner got in.
		case cause != nil:
			info.Result = "lost"
			err = errors.Join(err, cause)
		default:
			err = errors.Join(err, relErr)
		}
		info.Err = err
		if !returned {
			info.Err = errors.Join(err, errPanicked)
		}
		l.obs.End(runCtx, PhaseRun, info)
	}()
	err = fn(jobCtx)
	returned = true
	return err
}

var errPanicked = errors.New("guard: job panicked")

// ValidateLockOptions reports whether opts are valid for this Locker: the
// checks Acquire makes, including whether a TTL option leaves room for its
// renewal schedule. Adapters call it when they are built, so that a bad
// option fails at wiring time rather than on every run. The error matches
// ErrInvalid.
func (l *Locker) ValidateLockOptions(opts ...LockOption) error {
	lc, err := newLockConfig(l.cfg.ttl, "", opts)
	if err != nil {
		return err
	}
	_, err = l.cfg.scaled(lc.ttl)
	return err
}

func (l *Locker) checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case strings.Contains(key, "}"):
		return fmt.Errorf("%w: key %q must not contain '}' (it would break the Cluster hash tag)", ErrInvalid, key)
	}
	return nil
}

func (l *Locker) acquire(ctx context.Context, key string, write bool, opts []LockOption) (*Lease, error) {
	lc, err := newLockConfig(l.cfg.ttl, key, opts)
	if err != nil {
		return nil, err
	}
	return l.acquireWith(ctx, key, write, lc)
}

func (l *Locker) acquireWith(ctx context.Context, key string, write bool, lc lockConfig) (*Lease, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalid)
	}
	if err := l.checkKey(key); err != nil {
		return nil, err
	}
	if l.isClosed() {
		return nil, ErrClosed
	}
	info := Info{Key: key, Name: lc.name, Attrs: lc.attrs, Write: write, TTL: lc.ttl}
	if h := holdIn(ctx, l, key); h != nil {
		info.Reentrant, info.TTL, info.Token = true, h.timing.ttl, h.token
		actx := l.obs.Begin(ctx, PhaseAcquire, info)
		le, err := l.reenter(actx, h, write)
		if le != nil || err != nil {
			info.Result, info.Err, info.Attempts = acquireResult(err), err, 1
			l.obs.End(actx, PhaseAcquire, info)
			return le, err
		}
		// The context's hold was released: this is a fresh acquisition.
		info.Reentrant, info.TTL, info.Token = false, lc.ttl, 0
		l.obs.End(actx, PhaseAcquire, info)
	}
	t, err := l.cfg.scaled(lc.ttl)
	if err != nil {
		return nil, err
	}
	actx := l.obs.Begin(ctx, PhaseAcquire, info)
	le, err := l.acquireFresh(actx, ctx, key, write, lc, t, &info.Attempts)
	info.Result, info.Err = acquireResult(err), err
	if le != nil {
		info.Token = le.h.token
	}
	l.obs.End(actx, PhaseAcquire, info)
	return le, err
}

// errBusy and errTimeout tell the two ErrNotAcquired cases apart for observers.
var (
	errBusy    = errors.New("key busy")
	errTimeout = errors.New("wait budget spent")
)

// heldError is the detail of an ErrNotAcquired: what Redis answered about
// the key's holders at the last attempt.
type heldError struct {
	remaining time.Duration
}

func (e *heldError) Error() string {
	return fmt.Sprintf("held for up to %v more unless renewed", e.remaining.Round(time.Millisecond))
}

// HeldFor reports how long Redis said the key stays held, at most, unless
// its holders renew: the remaining time of the latest holder's lease, on the
// server's clock, at the acquisition's last attempt. A live holder renews
// and keeps the key longer; a crashed one frees it after this time. The
// second result is false when err is not an ErrNotAcquired with that answer.
// Adapters use it for Retry-After and for retry delays.
func HeldFor(err error) (time.Duration, bool) {
	var h *heldError
	if errors.As(err, &h) {
		return h.remaining, true
	}
	return 0, false
}

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

// reenter takes another lease on a hold that ctx carries. It returns
// (nil, nil) when that hold has been released, so the caller acquires afresh.
func (l *Locker) reenter(ctx context.Context, h *hold, write bool) (*Lease, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.over.Load() {
		if cause := h.lossCause(); cause != nil {
			return nil, fmt.Errorf("guard: re-enter %q: %w", h.key, cause)
		}
		return nil, nil
	}
	if write && h.writes == 0 {
		return nil, fmt.Errorf("%w: key %q", ErrUpgrade, h.key)
	}
	writes, reads := h.writes, h.reads
	if write {
		writes++
	} else {
		reads++
	}
	res, err := l.update(ctx, h, writes, reads, "acquire")
	if err != nil {
		return nil, err
	}
	if res != resultOK {
		cause := lostCause(h.key, res)
		l.lose(h, cause)
		return nil, cause
	}
	h.writes, h.reads = writes, reads
	return newLease(h, write, true), nil
}

func newLease(h *hold, write, reentrant bool) *Lease {
	ctx, cancel := context.WithCancelCause(h.ctx)
	return &Lease{h: h, write: write, reentrant: reentrant, ctx: ctx, cancel: cancel}
}

func lostCause(key string, res int64) error {
	if res == resultTaken {
		return fmt.Errorf("%w: %q is held by another owner", ErrLeaseLost, key)
	}
	return fmt.Errorf("%w: %q expired", ErrLeaseLost, key)
}

// acquireReply is acquire.lua's answer.
type acquireReply struct {
	acquired  bool
	token     int64
	remaining time.Duration // busy: until the latest holder's expiry
}

func (l *Locker) acquireFresh(ctx, parent context.Context, key string, write bool, lc lockConfig, t timing, attempts *int) (*Lease, error) {
	owner := rand.Text() // 26 base32 characters: 130 random bits
	k := l.keysFor(key)
	var deadline time.Time
	if lc.waitSet {
		deadline = time.Now().Add(lc.wait)
	}
	var w *waiter
	var held *heldError // Redis's last busy answer; nil while none came
	// notAcquired is the error of a wait that ended: ErrNotAcquired only when
	// Redis answered that the key is held, else why no answer came.
	notAcquired := func(why error) error {
		if held == nil {
			return fmt.Errorf("guard: acquire %q: no answer from Redis: %w", key, why)
		}
		return fmt.Errorf("%w: %q: %w: %w", ErrNotAcquired, key, why, held)
	}
	defer func() {
		if w != nil {
			w.leave()
			l.obs.Event(ctx, EventWaiting, Info{Key: key, Name: lc.name, Write: write, Delta: -1})
		}
	}()
	for {
		before := l.notify.mark(k.channel)
		*attempts++
		sent := time.Now()
		rep, err := l.tryAcquire(ctx, k, owner, write, lc, t)
		if w != nil && err == nil {
			w.woken = false // the attempt saw the key after the wake-up
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, notAcquired(err)
			}
			return nil, err
		}
		if rep.acquired {
			if w != nil {
				w.acquired = true
			}
			return l.newHold(parent, key, k, owner, rep.token, write, lc, t, sent)
		}
		now := time.Now()
		held = &heldError{remaining: rep.remaining}
		if lc.waitSet && !now.Before(deadline) {
			if lc.wait == 0 {
				l.log.Info("guard: lock busy", "key", key)
				return nil, fmt.Errorf("%w: %q: %w: %w", ErrNotAcquired, key, errBusy, held)
			}
			l.log.Info("guard: lock busy after waiting", "key", key, "wait", lc.wait)
			return nil, fmt.Errorf("%w: %q: %w after %v: %w", ErrNotAcquired, key, errTimeout, lc.wait, held)
		}
		if w == nil {
			w, err = l.notify.join(ctx, k, write)
			if err != nil {
				return nil, err
			}
			l.obs.Event(ctx, EventWaiting, Info{Key: key, Name: lc.name, Write: write, Delta: +1})
			if !l.notify.quietSince(before) {
				continue // a release may have come between the attempt and the subscription
			}
		}
		sleep := rep.remaining + time.Millisecond
		if lc.waitSet {
			sleep = min(sleep, deadline.Sub(now))
		}
		timer := time.NewTimer(sleep)
		select {
		case <-w.C:
			w.woken = true
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, notAcquired(context.Cause(ctx))
		case <-l.closed:
			timer.Stop()
			return nil, ErrClosed
		}
		timer.Stop()
	}
}

func (l *Locker) tryAcquire(ctx context.Context, k keys, owner string, write bool, lc lockConfig, t timing) (acquireReply, error) {
	mode := "r"
	if write {
		mode = "w"
	}
	register := l.id // a caller that will wait is woken by name
	if lc.waitSet && lc.wait == 0 {
		register = ""
	}
	args := []any{owner, ms(t.ttl), mode, ms(lc.minHold), register, ms(2 * t.ttl), l.publish, ms(lc.fenceTTL)}
	start := time.Now()
	rep, err := call(ctx, l, func(ctx context.Context) (acquireReply, error) {
		return l.runAcquire(ctx, k, args, t)
	}, func(rep acquireReply, err error) {
		if err == nil && rep.acquired { // the caller gave up; don't leave the key held
			l.dropHold(k, owner, t.timeout)
		}
	})
	l.obs.Event(ctx, EventRoundTrip, Info{Key: k.lock, Name: lc.name, Op: "acquire", Duration: time.Since(start), Err: err})
	var reply redis.Error
	if err != nil && ctx.Err() == nil && !errors.Is(err, ErrClosed) && !errors.As(err, &reply) {
		// A transport error: the script may have run and its reply been
		// lost, leaving a hold nobody renews. Free it rather than wait a TTL.
		l.runner.run(func() { l.dropHold(k, owner, t.timeout) })
	}
	return rep, redisError(k.lock, err)
}

func (l *Locker) runAcquire(ctx context.Context, k keys, args []any, t timing) (acquireReply, error) {
	var vals []int64
	var err error
	if l.cfg.replicas == 0 {
		vals, err = l.scripts.acquire.Run(ctx, l.client, k.forAcquire(), args...).Int64Slice()
	} else {
		vals, err = l.acquireAcked(ctx, k, args)
	}
	if err != nil {
		return acquireReply{}, err
	}
	if len(vals) != 2 {
		return acquireReply{}, fmt.Errorf("guard: unexpected acquire reply %v", vals)
	}
	if vals[0] == 1 {
		return acquireReply{acquired: true, token: vals[1]}, nil
	}
	return acquireReply{remaining: time.Duration(vals[1]) * time.Millisecond}, nil
}

// acquireAcked runs acquire.lua and WAIT on one connection, and releases a
// fresh hold that too few replicas acknowledged.
func (l *Locker) acquireAcked(ctx context.Context, k keys, args []any) ([]int64, error) {
	for attempt := 0; ; attempt++ {
		pipe := l.client.Pipeline()
		acq := l.scripts.acquire.EvalSha(ctx, pipe, k.forAcquire(), args...)
		wait := pipe.Do(ctx, "WAIT", l.cfg.replicas, ms(l.cfg.replicaTimeout))
		_, _ = pipe.Exec(ctx)
		if isNoScript(acq.Err()) && attempt == 0 {
			if err := l.scripts.acquire.Load(ctx, l.client).Err(); err != nil {
				return nil, err
			}
			continue
		}
		vals, err := acq.Int64Slice()
		if err != nil {
			return nil, err
		}
		acked, err := wait.Int64()
		if len(vals) == 2 && vals[0] == 1 && (err != nil || acked < int64(l.cfg.replicas)) {
			l.dropHold(k, args[0].(string), l.cfg.requestTimeout)
			return nil, fmt.Errorf("%w: %q: %d of %d replicas acknowledged within %v (%v)",
				ErrNotReplicated, k.lock, acked, l.cfg.replicas, l.cfg.replicaTimeout, err)
		}
		return vals, nil
	}
}

// idleOn returns the Locker's id when none of its acquisitions waits for
// the lock, so that a release does not name it as the one to act.
func (l *Locker) idleOn(k keys) string {
	if l.notify.waiting(k.channel) {
		return ""
	}
	return l.id
}

func ms(d time.Duration) int64 {
	if d > 0 && d < time.Millisecond {
		return 1
	}
	return d.Milliseconds()
}

func (l *Locker) newHold(parent context.Context, key string, k keys, owner string, token int64, write bool, lc lockConfig, t timing, sent time.Time) (*Lease, error) {
	h := &hold{l: l, key: key, name: lc.name, keys: k, owner: owner, token: token, timing: t, start: sent, index: -1}
	h.ctx, h.cancel = context.WithCancelCause(withHold(context.WithoutCancel(parent), h))
	h.obsCtx = context.WithoutCancel(parent)
	if write {
		h.writes = 1
	} else {
		h.reads = 1
	}
	h.leaseEnd = sent.Add(t.ttl - t.drift())
	h.nextRenew = sent.Add(t.interval)
	l.mu.Lock()
	if l.isClosed() {
		l.mu.Unlock()
		l.dropHold(k, owner, t.timeout)
		return nil, ErrClosed
	}
	l.holds[h] = struct{}{}
	l.mu.Unlock()
	l.hb.add(h)
	l.log.Debug("guard: acquired", "key", key, "token", token, "write", write)
	l.obs.Event(h.obsCtx, EventHeld, Info{Key: key, Name: h.name, Write: write, TTL: t.ttl, Token: token, Delta: +1})
	return newLease(h, write, false), nil
}

// lose ends a hold that can no longer be proven held and reports it. Only
// the first call for a hold acts. To end many holds at once, call h.end for
// each first and reportLost afterwards, so no job waits on a log handler.
func (l *Locker) lose(h *hold, cause error) {
	if h.end(cause) {
		l.reportLost(h, cause)
	}
}

// reportLost logs and observes a hold that end has ended with cause.
func (l *Locker) reportLost(h *hold, cause error) {
	if !errors.Is(cause, ErrClosed) {
		l.log.Error("guard: lease lost", "key", h.key, "token", h.token, "cause", cause)
	}
	l.obs.Event(h.obsCtx, EventLeaseLost, Info{Key: h.key, Name: h.name, Token: h.token, Err: cause})
	l.obs.Event(h.obsCtx, EventHeld, Info{Key: h.key, Name: h.name, Token: h.token, Delta: -1, Result: "lost", Duration: time.Since(h.start)})
}

// end stops the hold's heartbeat, cancels its context with cause and forgets
// it. It reports whether this call ended the hold.
func (h *hold) end(cause error) bool {
	if !h.over.CompareAndSwap(false, true) {
		return false
	}
	h.cause.Store(&cause)
	h.l.hb.remove(h)
	h.cancel(cause)
	l := h.l
	l.mu.Lock()
	delete(l.holds, h)
	if len(l.holds) == 0 && l.drained != nil {
		close(l.drained)
		l.drained = nil
	}
	l.mu.Unlock()
	return true
}

// update sets the owner's hold counts in Redis (update.lua); op names the
// round trip for observers ("acquire" for a re-entry, "release").
func (l *Locker) update(ctx context.Context, h *hold, writes, reads int, op string) (int64, error) {
	start := time.Now()
	// The marker outlives every retry of this release: they stop at the
	// request timeout, and a request outlives its caller by at most as long.
	marker := 2 * max(h.timing.timeout, time.Second)
	res, err := call(ctx, l, func(ctx context.Context) (int64, error) {
		return l.runUpdate(ctx, h.keys, h.owner, writes, reads, marker).Int64()
	}, nil)
	l.obs.Event(h.obsCtx, EventRoundTrip, Info{Key: h.key, Name: h.name, Op: op, Duration: time.Since(start), Err: err})
	return res, redisError(h.key, err)
}

// release ends one lease of a hold (Lease.Release).
func (l *Locker) release(ctx context.Context, le *Lease) error {
	h := le.h
	info := Info{Key: h.key, Name: h.name, Write: le.write, TTL: h.timing.ttl, Token: h.token, Reentrant: le.reentrant}
	rctx := l.obs.Begin(ctx, PhaseRelease, info)
	err := l.releaseLease(rctx, le)
	info.Err = err
	l.obs.End(rctx, PhaseRelease, info)
	return err
}

func (l *Locker) releaseLease(ctx context.Context, le *Lease) error {
	h := le.h
	h.mu.Lock()
	defer h.mu.Unlock()
	writes, reads := h.writes, h.reads
	if le.write {
		writes--
	} else {
		reads--
	}
	final := writes == 0 && reads == 0
	h.writes, h.reads = writes, reads
	ctx, cancel := context.WithTimeout(ctx, h.timing.timeout)
	defer cancel()
	if h.over.Load() {
		var state string
		if final { // the key may still be ours on the server; free it for the next owner
			res, err := l.update(ctx, h, 0, 0, "release")
			switch {
			case err != nil:
			case res == resultOK:
				state = "; it was still held and is now released"
			case res == resultTaken:
				state = "; the key is now held by another owner"
			default:
				state = "; the key expired"
			}
		}
		return fmt.Errorf("%w: lease on %q: %w%s", ErrNotHeld, h.key, context.Cause(h.ctx), state)
	}
	if final {
		l.hb.remove(h) // no renewal is sent after this point
	}
	// A retry of a final release whose first try applied finds the
	// owner's release marker and answers resultOK; any other "expired" or
	// "taken" means the hold was gone before the release.
	res, err := l.updateRetrying(ctx, h, writes, reads)
	switch {
	case err == nil && res != resultOK:
		cause := lostCause(h.key, res)
		l.lose(h, cause)
		if res == resultTaken {
			return fmt.Errorf("%w: %q is now held by another owner", ErrNotHeld, h.key)
		}
		return fmt.Errorf("%w: %q expired before it was released", ErrNotHeld, h.key)
	case final:
		if h.end(ErrReleased) {
			l.obs.Event(h.obsCtx, EventHeld, Info{Key: h.key, Name: h.name, Token: h.token, Delta: -1, Result: "released", Duration: time.Since(h.start)})
		}
		if err != nil {
			l.log.Warn("guard: release failed; the key expires within its TTL", "key", h.key, "err", err)
			return fmt.Errorf("guard: release %q: %w", h.key, err)
		}
		l.log.Debug("guard: released", "key", h.key, "token", h.token)
		return nil
	default:
		return err
	}
}

// updateRetrying retries update.lua on transport errors until ctx is done.
// The script sets counts rather than adding to them, and a final release
// leaves a marker, so a retry after a reply that was lost is harmless.
func (l *Locker) updateRetrying(ctx context.Context, h *hold, writes, reads int) (int64, error) {
	backoff := 10 * time.Millisecond
	for {
		res, err := l.update(ctx, h, writes, reads, "release")
		if err == nil {
			return res, nil
		}
		if errors.Is(err, ErrWrongType) || errors.Is(err, ErrClosed) || ctx.Err() != nil {
			return 0, err
		}
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, 200*time.Millisecond)
		case <-ctx.Done():
			return 0, err
		}
	}
}
