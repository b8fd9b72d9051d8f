package guard

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/jobguard/jobguard/guard/observe"
	"github.com/jobguard/jobguard/internal/throttle"
)

// acquire re-enters the hold on key that ctx carries, or takes the key
// afresh, waiting as long as lc allows. It is one Acquire phase for the
// observer.
func (l *Locker) acquire(ctx context.Context, key string, write bool, lc lockConfig) (*Lease, error) {
	if err := l.checkAcquire(ctx, key); err != nil {
		return nil, err
	}
	info := observe.Info{Key: key, Name: lc.name, Attrs: lc.attrs, Write: write, TTL: lc.ttl}
	outer := holdIn(ctx, l, key)
	var t timing
	if outer != nil {
		info.Reentrant, info.TTL, info.Token = true, outer.timing.ttl, outer.token
	} else {
		var err error
		if t, err = l.cfg.scaled(lc.ttl); err != nil {
			return nil, err
		}
	}
	var le *Lease
	err := l.observed(ctx, observe.Acquire, info, func(actx context.Context, info *observe.Info) error {
		var err error
		if outer != nil {
			le, err = l.reenter(actx, outer, write, lc.permits)
			if le != nil || err != nil {
				info.Result = acquireResult(err)
				return err
			}
			// The context's hold was released: this is a fresh acquisition.
			info.Reentrant, info.TTL, info.Token = false, lc.ttl, 0
			if t, err = l.cfg.scaled(lc.ttl); err != nil {
				info.Result = acquireResult(err)
				return err
			}
		}
		a := l.newAcquisition(ctx, key, write, lc, t)
		le, err = a.run(actx)
		info.Attempts, info.Result = a.attempts, acquireResult(err)
		if le != nil {
			info.Token = le.h.token
		}
		return err
	})
	return le, err
}

func (l *Locker) checkAcquire(ctx context.Context, key string) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalid)
	}
	if err := checkKey(key); err != nil {
		return err
	}
	if l.isClosed() {
		return ErrClosed
	}
	return nil
}

// reenter takes another lease on a hold that ctx carries, for an
// acquisition that asks for permits. It returns (nil, nil) when that hold
// has been released, so the caller acquires afresh. The lease is counted in
// the hold alone, with no round trip: only this process can re-enter its
// own hold, and Redis keeps the hold as its outermost acquisition took it
// (counts.go). So the answer is the hold's as this process knows it: one
// that was lost gives its loss cause, one whose loss is not yet known (a
// renewal will find it) is re-entered, as a job under it keeps running
// until then.
func (l *Locker) reenter(ctx context.Context, h *hold, write bool, permits int) (*Lease, error) {
	h.mu.Lock()
	if h.over.Load() || h.final {
		over := h.over.Load()
		h.mu.Unlock()
		if over {
			if cause := h.endCause(); errors.Is(cause, ErrLeaseLost) {
				return nil, cause // it names the key
			}
		}
		return nil, nil
	}
	var err error
	switch {
	case permits != h.permits:
		// A plain lock inside a permit would believe itself alone.
		err = fmt.Errorf("%w: key %q: the context holds one of %d permits, the re-entry asks for %d", ErrPermitsDiffer, h.key, h.permits, permits)
	case write && h.writes == 0:
		err = fmt.Errorf("%w: key %q", ErrUpgrade, h.key)
	case ctx.Err() != nil:
		// As a fresh acquisition, a re-entry under a done ctx fails.
		err = fmt.Errorf("guard: re-enter %q: %w", h.key, context.Cause(ctx))
	default:
		h.writes, h.reads = counts(h.writes, h.reads, write, +1)
	}
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return newLease(h, write, true), nil
}

// acquisition is one fresh acquisition: its attempts and its wait.
type acquisition struct {
	l        *Locker
	parent   context.Context // the caller's: the hold keeps its values
	key      string
	keys     store.Keys
	args     store.AcquireArgs
	lc       lockConfig
	timing   timing
	deadline time.Time // end of the Wait budget, when lc sets one
	attempts int
	// tryAgains counts the attempts Redis asked to make again (TRYAGAIN),
	// for their backoff; tryAgainSince is when the first was sent,
	// tryAgainErr the last such answer, and tryAgainWarned whether the
	// wait has been logged as an outage.
	tryAgains      int
	tryAgainSince  time.Time
	tryAgainErr    error
	tryAgainWarned bool
	held           *heldError // Redis's last busy answer; nil while none came
	waiter         *waiter    // set once the acquisition waits for a release
	// registered is set while the lock's queue may hold the acquisition's
	// registration (acquire.lua adds it when the key is busy); registeredAt
	// is when the last attempt that refreshed it was sent, and minted the
	// newest token when it ran: a grant with a token not above it is gone.
	registered   bool
	registeredAt time.Time
	minted       int64
}

func (l *Locker) newAcquisition(parent context.Context, key string, write bool, lc lockConfig, t timing) *acquisition {
	a := &acquisition{l: l, parent: parent, key: key, keys: l.keysFor(key), lc: lc, timing: t}
	a.args = store.AcquireArgs{
		Owner: rand.Text(), // 26 base32 characters: 130 random bits
		TTL:   t.ttl, Write: write, MinHold: lc.minHold, FenceTTL: lc.fenceTTL, Permits: lc.permits,
		Identity: l.cfg.identity,
	}
	if !lc.waitSet || lc.wait > 0 {
		a.args.Waiter = l.id // a caller that will wait is woken by name, or granted the key
	}
	if lc.waitSet {
		a.deadline = l.clock.Now().Add(lc.wait)
	}
	return a
}

// run attempts until the key is taken, the wait budget is spent or ctx is
// done, sleeping between attempts until a release may have freed the key
// or granted it.
func (a *acquisition) run(ctx context.Context) (*Lease, error) {
	defer a.stopWaiting(ctx)
	for {
		before := a.l.notify.mark(a.keys.Channel)
		sent := a.l.clock.Now()
		rep, err := a.attempt(ctx)
		if errors.Is(err, store.ErrTryAgain) {
			if ctx.Err() == nil && a.tryAgainLater(ctx, sent, err) {
				continue
			}
			return nil, a.stopTryingAgain(ctx, err)
		}
		switch {
		case err != nil && ctx.Err() != nil && a.tryAgainErr != nil && a.held == nil:
			// ctx ended while an attempt was on the wire: Redis's last
			// answer is the reason.
			return nil, fmt.Errorf("guard: acquire %q: %w; then %w", a.key, a.tryAgainErr, context.Cause(ctx))
		case err != nil && ctx.Err() != nil:
			return nil, a.notAcquired(err)
		case err != nil:
			return nil, fmt.Errorf("guard: acquire %q: %w", a.key, err)
		case rep.Acquired:
			return a.take(rep.Token, sent)
		}
		a.registeredAt, a.minted = sent, rep.Minted
		a.held = &heldError{remaining: rep.HeldFor}
		if err := a.budgetSpent(); err != nil {
			return nil, err
		}
		if err := a.wait(ctx, before, rep.HeldFor); err != nil {
			return nil, err
		}
		if ctx.Err() != nil { // a grant that came too late is withdrawn and dropped
			return nil, a.notAcquired(context.Cause(ctx))
		}
		if token, ok := a.grant(); ok {
			return a.take(token, a.registeredAt)
		}
	}
}

// stopTryingAgain gives up an acquisition whose last attempt Redis asked
// to make again (TRYAGAIN, or a redirection go-redis did not follow to its
// end), because the Locker closed, ctx is done or the Wait budget is spent,
// and returns why. go-redis may have run an earlier try of that attempt
// before its connection broke, so the attempt is given up as one whose
// reply was lost: its registration withdrawn, or a hold it may have taken
// dropped. The error is ErrNotAcquired when an earlier attempt of this
// acquisition found the key held, as a wait that ran out between two such
// answers would be; else the outage it is.
func (a *acquisition) stopTryingAgain(ctx context.Context, err error) error {
	l, k, owner, timeout := a.l, a.keys, a.args.Owner, a.timing.timeout
	if a.args.Waiter != "" {
		a.registered = true
	} else {
		l.runner.start(func() { l.dropHold(k, owner, timeout) })
	}
	switch {
	case l.isClosed():
		return fmt.Errorf("%w: acquire %q: %w", ErrClosed, a.key, err)
	case a.held != nil && ctx.Err() != nil:
		return a.notAcquired(context.Cause(ctx))
	case a.held != nil:
		if spent := a.budgetSpent(); spent != nil {
			return spent
		}
	case ctx.Err() != nil:
		return fmt.Errorf("guard: acquire %q: %w; then %w", a.key, err, context.Cause(ctx))
	}
	return fmt.Errorf("guard: acquire %q: %w", a.key, err)
}

// Backoff between attempts that Redis asked to try again.
const (
	tryAgainBackoff    = 10 * time.Millisecond
	tryAgainMaxBackoff = 250 * time.Millisecond
)

// tryAgainLater sleeps before another attempt after Redis answered
// TRYAGAIN, and reports whether to make it: not when the Wait budget is
// spent (Wait(0) returns the answer at once, an outage rather than
// contention), ctx is done or the Locker closed. A resharding moves a
// slot's keys in milliseconds, or seconds for a large slot, and the
// scripts, which name keys that are usually absent (the queue, the release
// marker), get TRYAGAIN for as long as the slot is migrating: a wait
// rides it out instead of failing a job that would have waited anyway.
//
// A slot can stay migrating for good (a resharding aborted half way leaves
// it so until redis-cli --cluster fix), and an acquisition without a Wait
// budget would then retry in silence until its ctx ends: once the slot has
// answered TRYAGAIN for a TTL, the acquisition logs it, once, as the
// outage it is.
func (a *acquisition) tryAgainLater(ctx context.Context, sent time.Time, err error) bool {
	d := min(tryAgainBackoff<<min(a.tryAgains, 5), tryAgainMaxBackoff)
	if a.tryAgains == 0 {
		a.tryAgainSince = sent
	}
	a.tryAgains, a.tryAgainErr = a.tryAgains+1, err
	if since := a.l.clock.Now().Sub(a.tryAgainSince); !a.tryAgainWarned && since >= a.timing.ttl {
		a.tryAgainWarned = true
		a.l.log.Warn("guard: the lock's Cluster slot has been migrating for a TTL; the acquisition keeps trying",
			"key", a.key, "for", since, "attempts", a.tryAgains, "err", err)
	}
	if a.lc.waitSet {
		left := a.deadline.Sub(a.l.clock.Now())
		if left <= 0 {
			return false
		}
		d = min(d, left)
	}
	t := a.l.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
	case <-a.l.closed:
	}
	return false
}

// take turns the hold taken with token, by a request sent at sent, into a
// lease.
func (a *acquisition) take(token int64, sent time.Time) (*Lease, error) {
	a.registered = false
	if a.waiter != nil {
		a.waiter.acquired = true
	}
	return a.l.newHold(a, token, sent)
}

// grant returns the token of a hold that a release granted the
// acquisition (see set_counts.lua) while it slept, if it may be used as
// is. A grant made after the last attempt ran (its token is above what
// that attempt saw minted) ends no earlier than the TTL after that attempt
// was sent, so the lease is timed from that send. One made before it is
// gone (the attempt found the key held: the grant expired or a failover
// lost it) and is ignored. When the send leaves less than a renew
// interval, the next attempt extends the hold instead (acquire.lua finds
// it the owner's) and times it afresh.
func (a *acquisition) grant() (int64, bool) {
	if a.waiter == nil {
		return 0, false
	}
	token := a.waiter.granted.Load()
	if token <= a.minted || a.l.clock.Now().Sub(a.registeredAt) >= a.timing.interval {
		return 0, false
	}
	return token, true
}

// attempt sends one acquire request. A request whose caller gave up, or
// whose reply was lost, may still have taken the key: the hold is dropped
// rather than left to block the key for a TTL.
func (a *acquisition) attempt(ctx context.Context) (store.AcquireReply, error) {
	a.attempts++
	l, k, owner, timeout := a.l, a.keys, a.args.Owner, a.timing.timeout
	rep, err := request(ctx, l, observe.Info{Op: "acquire", Key: a.key, Name: a.lc.name}, func(ctx context.Context) (store.AcquireReply, error) {
		rep, err := l.store.Acquire(ctx, k, a.args)
		if rep.Acquired && err != nil { // held, but not well enough to rely on
			l.dropHold(k, owner, l.cfg.requestTimeout)
		}
		return rep, err
	}, func(rep store.AcquireReply, err error) {
		switch {
		case a.args.Waiter != "":
			// The attempt may have registered, or taken the key, or been
			// granted it since: withdraw, dropping any hold it finds.
			l.withdraw(k, a.args, timeout)
		case err == nil && rep.Acquired:
			l.dropHold(k, owner, timeout)
		}
	})
	if a.waiter != nil && err == nil {
		a.waiter.woken = false // the attempt saw the key after the wake-up
	}
	_, lost := errors.AsType[*store.NoReplyError](err)
	if lost && ctx.Err() == nil {
		// The script may have run and its reply been lost.
		l.runner.start(func() { l.dropHold(k, owner, timeout) })
	}
	if a.args.Waiter != "" && (lost || err == nil && !rep.Acquired) {
		a.registered = true // it may have registered, too
	}
	return rep, err
}

// budgetSpent returns ErrNotAcquired once the Wait budget is spent. It
// logs the busy key unless the caller (an adapter) logs it itself.
func (a *acquisition) budgetSpent() error {
	if !a.lc.waitSet || a.l.clock.Now().Before(a.deadline) {
		return nil
	}
	quiet := throttle.LoggedByCaller(a.parent, a.key)
	if a.lc.wait == 0 {
		if !quiet {
			a.l.logBusy("guard: lock busy", a.key)
		}
		return fmt.Errorf("%w: %q: %w: %w", ErrNotAcquired, a.key, errBusy, a.held)
	}
	if !quiet {
		a.l.logBusy("guard: lock busy after waiting", a.key, "wait", a.lc.wait)
	}
	return fmt.Errorf("%w: %q: %w after %v: %w", ErrNotAcquired, a.key, errTimeout, a.lc.wait, a.held)
}

// notAcquired is the error of a wait that ended for why: ErrNotAcquired
// only when Redis answered that the key is held, else why no answer came.
func (a *acquisition) notAcquired(why error) error {
	if a.held == nil {
		return fmt.Errorf("guard: acquire %q: no answer from Redis: %w", a.key, why)
	}
	return fmt.Errorf("%w: %q: %w: %w", ErrNotAcquired, a.key, why, a.held)
}

// wait sleeps until a release may have freed the key: a notification, the
// holder's remaining TTL (a crashed holder never publishes), or the end of
// the Wait budget.
func (a *acquisition) wait(ctx context.Context, before mark, heldFor time.Duration) error {
	if a.waiter == nil {
		w, err := a.l.notify.join(ctx, a.keys, a.args.Write, a.args.Owner)
		if err != nil {
			return err
		}
		a.waiter = w
		a.l.obs.Event(ctx, observe.Waiting, observe.Info{Key: a.key, Name: a.lc.name, Write: a.args.Write, Delta: +1})
		if !a.l.notify.quietSince(before) {
			return nil // a release may have come between the attempt and the subscription
		}
	}
	// At least once a TTL, so the registration is renewed while a holder
	// with a longer TTL, or a long MinHold, keeps the key: acquire.lua
	// keeps it for twice the TTL, which outlives the gap, and one whose
	// process crashed drops out of the queue within it.
	sleep := min(heldFor+time.Millisecond, a.timing.ttl)
	if a.lc.waitSet {
		sleep = min(sleep, a.deadline.Sub(a.l.clock.Now()))
	}
	timer := a.l.clock.NewTimer(sleep)
	defer timer.Stop()
	select {
	case <-a.waiter.C:
		a.waiter.woken = true
	case <-timer.C():
	case <-ctx.Done():
		return a.notAcquired(context.Cause(ctx))
	case <-a.l.closed:
		return ErrClosed
	}
	return nil
}

func (a *acquisition) stopWaiting(ctx context.Context) {
	if a.waiter != nil {
		a.waiter.leave()
		a.l.obs.Event(ctx, observe.Waiting, observe.Info{Key: a.key, Name: a.lc.name, Write: a.args.Write, Delta: -1})
	}
	if a.registered {
		l, k, args, timeout := a.l, a.keys, a.args, a.timing.timeout
		if !l.runner.start(func() { l.withdraw(k, args, timeout) }) {
			l.withdraw(k, args, timeout) // Close stopped the runner: withdraw before returning
		}
	}
}

// withdraw takes an acquisition that gave up out of the lock's queue. If
// its registration was gone, a release may have granted it the key in the
// meantime: that hold is dropped rather than left to block the key until
// it expires.
func (l *Locker) withdraw(k store.Keys, args store.AcquireArgs, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	removed, err := l.store.Withdraw(ctx, k, args)
	cancel()
	if err == nil && removed {
		return
	}
	l.dropHold(k, args.Owner, timeout)
}

// dropHold frees a hold that was never handed to a caller (an abandoned or
// unacknowledged acquisition), at once and MinHold or not, so it does not
// block the key for its TTL.
func (l *Locker) dropHold(k store.Keys, owner string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := l.store.SetCounts(ctx, k, store.CountArgs{Owner: owner, Marker: store.MarkerDrop})
	if err != nil {
		l.log.Warn("guard: could not drop an abandoned hold; it expires within its TTL", "key", k.Lock, "err", err)
	}
}
