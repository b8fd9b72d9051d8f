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
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/guard/internal/clock"
	"github.com/jobguard/jobguard/guard/internal/redisstore"
	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/jobguard/jobguard/guard/observe"
	"github.com/jobguard/jobguard/internal/throttle"
	"github.com/redis/go-redis/v9"
)

// Locker acquires leases on named locks in one Redis deployment (standalone,
// Sentinel or Cluster: New) or on a quorum of independent masters
// (NewQuorum). It renews every lease it holds from one heartbeat and waits
// for busy keys on one pub/sub subscription (per master on a quorum). A Locker is safe for
// concurrent use; share one per process and Close it on shutdown.
type Locker struct {
	store store.Store
	clock clock.Clock
	id    string // names this Locker in the registrations of its waiting acquisitions
	cfg   config
	log   *slog.Logger
	obs   Observer

	hb     *heartbeat
	notify *notifier
	runner runner // runs requests that may outlive their caller's ctx
	// overrun is how long past its context's deadline go-redis may go on
	// with a request of the client, by its own read and write timeouts (see
	// overrunOf); -1 when nothing bounds it.
	overrun time.Duration
	// closeBy is when Close gives up waiting for holds to be released
	// (UnixNano, real time as the requests' deadlines are); 0 before Close.
	closeBy atomic.Int64
	// deadlines ends the contexts that bound requests, on one timer.
	deadlines deadlines
	busy      *throttle.Throttle // which busy keys to log at Info

	closed    chan struct{}
	closeOnce sync.Once
	// life is canceled when Close begins: it ends the Locker's own
	// background requests (not a job's), such as the eviction check.
	life    context.Context
	endLife context.CancelFunc
	// evictionChecked is set by the first acquisition, which has the
	// eviction settings checked (eviction.go).
	evictionChecked atomic.Bool

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
	if _, cluster := client.(*redis.ClusterClient); cluster && cfg.replicas > 0 {
		return nil, fmt.Errorf("%w: WithReplicaAck is not supported with a Cluster client", ErrInvalid)
	}
	st := redisstore.New(client, redisstore.Options{Replicas: cfg.replicas, ReplicaTimeout: cfg.replicaTimeout})
	l := newLocker(st, clock.Real{}, cfg)
	l.overrun = overrunOf(client)
	return l, nil
}

// overrunOf returns how long past its context's deadline go-redis may go
// on with a request of client: nothing with ContextTimeoutEnabled (the
// deadline bounds each read and write); otherwise twice its write and read
// timeouts, since the last try go-redis starts before the deadline may
// open a connection (its dial ends with the context, its handshake is a
// write and a read) and then send the command and read the answer; -1 when
// a read or write has no deadline at all. go-redis
// normalizes a timeout of -1 to 0 (no timeout of its own: the context's
// deadline, if enabled) and, for a standalone or Sentinel client, -2 to -1
// (no socket deadline).
func overrunOf(client redis.UniversalClient) time.Duration {
	var read, write time.Duration
	var byContext bool
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		read, write, byContext = o.ReadTimeout, o.WriteTimeout, o.ContextTimeoutEnabled
	case *redis.ClusterClient:
		o := c.Options()
		read, write, byContext = o.ReadTimeout, o.WriteTimeout, o.ContextTimeoutEnabled
	default:
		return -1
	}
	switch {
	case read < 0 || write < 0, !byContext && (read == 0 || write == 0):
		return -1
	case byContext:
		return 0
	}
	return 2 * (read + write)
}

// newLocker starts a Locker on a store whose configuration is valid.
func newLocker(s store.Store, c clock.Clock, cfg config) *Locker {
	l := &Locker{
		store:   s,
		clock:   c,
		id:      rand.Text(),
		cfg:     cfg,
		log:     cfg.logger,
		obs:     cfg.observer,
		closed:  make(chan struct{}),
		holds:   make(map[*hold]struct{}),
		overrun: -1, // New sets it for the client it has
		busy:    throttle.New(throttle.Every, throttle.Keys),
	}
	l.life, l.endLife = context.WithCancel(context.Background())
	l.hb = newHeartbeat(l)
	l.notify = newNotifier(l)
	return l
}

func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Acquire acquires a write lease on key and returns it with its heartbeat
// already running. If ctx carries a hold on key from this Locker, Acquire
// re-enters it at once, with no round trip (keeping its fencing token), or
// returns ErrUpgrade if that hold is read-only, or the loss's cause if the
// hold is known to be lost. Otherwise it waits for the key as Wait says (by
// default until ctx is done) and fails with ErrNotAcquired. The caller must
// Release the lease.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...LockOption) (*Lease, error) {
	lc, err := l.lockConfig(key, true, opts)
	if err != nil {
		return nil, err
	}
	return l.acquire(ctx, key, true, lc)
}

// AcquireRead acquires a read lease on key: any number of readers, or one
// writer, hold a key at a time. A context holding a write lease on key takes
// a read lease at once (a downgrade). Otherwise as Acquire.
func (l *Locker) AcquireRead(ctx context.Context, key string, opts ...LockOption) (*Lease, error) {
	lc, err := l.lockConfig(key, false, opts)
	if err != nil {
		return nil, err
	}
	return l.acquire(ctx, key, false, lc)
}

// WithLock runs fn while holding a write lease on key. fn's context is
// canceled when the lease is lost (cause matching ErrLeaseLost), and when ctx
// is: on shutdown the lease is kept and renewed until fn returns. WithLock
// returns after the lease has been released (or the release has failed). It
// returns fn's error, joined with the loss cause when the lease was lost
// during the run. A panic in fn releases the lease and continues.
func (l *Locker) WithLock(ctx context.Context, key string, fn func(context.Context) error, opts ...LockOption) error {
	return l.withLock(ctx, key, true, fn, opts)
}

// WithReadLock is WithLock with a read lease.
func (l *Locker) WithReadLock(ctx context.Context, key string, fn func(context.Context) error, opts ...LockOption) error {
	return l.withLock(ctx, key, false, fn, opts)
}

// withLock is WithLock: acquire, run fn, release. It is one Run phase for the
// observer.
func (l *Locker) withLock(ctx context.Context, key string, write bool, fn func(context.Context) error, opts []LockOption) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalid)
	}
	lc, err := l.lockConfig(key, write, opts)
	if err != nil {
		return err
	}
	info := observe.Info{Key: key, Name: lc.name, Attrs: lc.attrs, Write: write}
	return l.observed(ctx, observe.Run, info, func(ctx context.Context, info *observe.Info) error {
		le, err := l.acquire(ctx, key, write, lc)
		if err != nil {
			info.Result = acquireResult(err)
			return err
		}
		return l.runLocked(ctx, le, fn, info)
	})
}

// runLocked runs fn under le and releases le when fn returns or panics.
func (l *Locker) runLocked(ctx context.Context, le *Lease, fn func(context.Context) error, info *observe.Info) (err error) {
	jobCtx, cancel := context.WithCancelCause(withHold(ctx, le.h))
	// The hold's context, not the lease's: nothing releases le while fn
	// runs, so the two end together, and the lease's need not be made.
	hctx := le.h.ctx
	stop := context.AfterFunc(hctx, func() { cancel(context.Cause(hctx)) })
	defer func() {
		stop()
		cancel(context.Canceled)
		err = l.endRun(ctx, le, err, info)
		info.Err = err // for the observer, should fn have panicked
	}()
	return fn(jobCtx)
}

// endRun releases le after its job returned err, and returns the run's
// error: err, joined with the loss or the release failure if any.
func (l *Locker) endRun(ctx context.Context, le *Lease, err error, info *observe.Info) error {
	return l.settleRun(le, err, le.Release(ctx), info) // Release detaches from ctx's cancellation
}

// settleRun returns the error of a run whose job returned err and whose
// lease le's release returned relErr, and fills in info.
func (l *Locker) settleRun(le *Lease, err, relErr error, info *observe.Info) error {
	h := le.h
	info.Token, info.Reentrant, info.TTL = h.token, le.reentrant, h.timing.ttl
	info.Renewals = l.hb.renewals(h)
	info.Result = "released"
	switch cause := h.lossCause(); {
	case relErr == nil:
		// The release applied while the hold was still ours, even if
		// Close gave up on it meanwhile: no other owner got in.
		return err
	case cause != nil:
		info.Result = "lost"
		if errors.Is(err, cause) {
			return err // the job returned the cause (context.Cause): said once
		}
		return errors.Join(err, cause)
	default:
		return errors.Join(err, relErr)
	}
}

// ValidateLockOptions reports whether opts are valid for this Locker: the
// checks Acquire makes, including whether a TTL option leaves room for its
// renewal schedule, for a write lease. Adapters call it when they are built, so that a bad
// option fails at wiring time rather than on every run. The error matches
// ErrInvalid.
func (l *Locker) ValidateLockOptions(opts ...LockOption) error {
	lc, err := l.lockConfig("", true, opts)
	if err != nil {
		return err
	}
	_, err = l.cfg.scaled(lc.ttl)
	return err
}

// lockConfig applies opts for an acquisition of key (a write lease when
// write is set) on this Locker and validates them: newLockConfig's checks,
// and that the store bounds permits if they are asked for.
func (l *Locker) lockConfig(key string, write bool, opts []LockOption) (lockConfig, error) {
	lc, err := newLockConfig(l.cfg.ttl, key, write, opts)
	if err != nil {
		return lc, err
	}
	if lc.permits > 1 && !l.store.Caps().Permits {
		// A quorum: each master would admit n holders of its own, and n+1
		// holders can each hold a majority (3 masters, n = 2: {1,2} {2,3}
		// {1,3}), so a majority does not bound them by n.
		return lc, fmt.Errorf("%w: Permits(%d) on a quorum (NewQuorum): a majority of masters that each admit %d holders does not bound the fleet by %d", ErrInvalid, lc.permits, lc.permits, lc.permits)
	}
	return lc, nil
}

// maxKeyLen is the longest lock key accepted, in bytes. A key names up to
// five Redis keys and travels in every message about the lock, so one that
// a client can make arbitrarily long would let it fill Redis and the
// fleet's pub/sub with a single request.
const maxKeyLen = 512

func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(key) > maxKeyLen:
		return fmt.Errorf("%w: key of %d bytes; at most %d", ErrInvalid, len(key), maxKeyLen)
	case strings.Contains(key, "}"):
		return fmt.Errorf("%w: key %q must not contain '}' (it would break the Cluster hash tag)", ErrInvalid, key)
	}
	return nil
}

func (l *Locker) keysFor(name string) store.Keys { return store.KeysFor(l.cfg.prefix, name) }

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
		l.endLife()
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
		l.closeBy.Store(time.Now().Add(l.cfg.closeTimeout).UnixNano())
		timer := l.clock.NewTimer(l.cfg.closeTimeout)
		select {
		case <-drained:
		case <-timer.C():
		}
		timer.Stop()
		l.abandon()
		l.hb.close()
		l.notify.close()
		l.runner.stop()
		l.deadlines.stop()
		_ = l.store.Close()
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
		return "guard: locker closed, then " + detail(lost)
	}
	return "guard: locker closed: shutting down; release the lease"
}

func (c closingCause) Is(target error) bool { return target == ErrClosed }

// Unwrap returns the loss that came after Close canceled the context, if any.
func (c closingCause) Unwrap() error { return c.h.lossCause() }

// forget drops an ended hold from the Locker's holds; the last one lets a
// waiting Close go on.
func (l *Locker) forget(h *hold) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.holds, h)
	if len(l.holds) == 0 && l.drained != nil {
		close(l.drained)
		l.drained = nil
	}
}

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
	abandoned := func(h *hold) error {
		return &chain{
			msg:  fmt.Sprintf("%v: %q was still held when Close timed out after %v; no longer renewed, it expires in Redis", ErrLeaseLost, h.key, l.cfg.closeTimeout),
			errs: []error{ErrLeaseLost, ErrClosed},
		}
	}
	// Cancel every one before reporting any, so no job waits on a log handler.
	ended := slices.DeleteFunc(holds, func(h *hold) bool { return !h.end(abandoned(h)) })
	for _, h := range ended {
		l.log.Error("guard: lease still held when Close timed out; left to expire", "key", h.key, "token", h.token)
		h.reportLost(h.lossCause())
	}
}

// logBusy logs that key was busy: at Info the first time and then at
// most once a minute per key, with how many were not logged since
// (repeated), at Debug otherwise: a busy key is the normal state of a
// fleet. Every adapter logs what its retries repeat the same way.
func (l *Locker) logBusy(msg, key string, args ...any) {
	if ok, repeated := l.busy.Allow(key, l.clock.Now()); ok {
		args = append([]any{"key", key}, args...)
		if repeated > 0 {
			args = append(args, "repeated", repeated)
		}
		l.log.Info(msg, args...)
		return
	}
	if l.debugEnabled() {
		l.log.Debug(msg, append([]any{"key", key}, args...)...)
	}
}

// debugEnabled reports whether the logger takes Debug records. The hot path
// asks before logging at Debug: the call would box its arguments even for a
// handler that drops them. It asks as slog's Debug does, with Background.
func (l *Locker) debugEnabled() bool {
	return l.log.Enabled(context.Background(), slog.LevelDebug)
}

func (l *Locker) isClosed() bool {
	select {
	case <-l.closed:
		return true
	default:
		return false
	}
}
