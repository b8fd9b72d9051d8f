package guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/jobguard/jobguard/guard/observe"
)

// WithClaim runs fn holding a write lease on key, as WithLock does, for
// work whose outcome key's claim keeps (see Claim): a request that must
// run once, whose result a retry is given instead. bind names what the run
// is for (a hash of the request's payload, say).
//
// If key's claim holds a value other than bind, WithClaim returns that
// value and a nil error: fn does not run and the lock is left alone,
// whether another holds it or not. Otherwise it tries once to acquire
// key: a busy key fails at once with ErrNotAcquired (HeldFor tells for how
// long). Acquiring stores bind as the claim for ttl if the claim held
// nothing, so that a run for another bind is given bind while this one
// runs. Then fn runs with a context that is canceled when the lease is
// lost (cause matching ErrLeaseLost), and the lease is renewed meanwhile.
//
// fn returns its result and for how long to keep it (keep must then be
// positive), or a nil result to leave the claim as it is. A result is
// stored as the claim only if the run's hold is still the newest on key,
// as ClaimFenced stores it: a run whose lease ran out unnoticed never
// overwrites a newer run's result; the error then matches ErrSuperseded.
// Nothing is stored once the lease is known lost. WithClaim returns the
// result it stored, or nil when fn ran and nothing of it was stored, and,
// as WithLock, fn's error joined with the loss of the lease or the failure
// of the release. A panic in fn releases the lease, stores nothing and
// continues.
//
// On one Redis deployment (New) the claim's check, the acquisition and
// the binding are one request, and so are the store and the release. On a
// quorum (NewQuorum), and for a context that already holds key, each is a
// request of its own (Claimed, the acquisition, Claim, ClaimFenced, the
// release), with the same outcome. WithClaim never waits: Wait(d) with d
// > 0 and Permits(n) with n > 1 are refused with ErrInvalid, and so are an
// empty bind and a ttl that is not positive.
func (l *Locker) WithClaim(ctx context.Context, key string, bind []byte, ttl time.Duration, fn func(ctx context.Context) (result []byte, keep time.Duration, err error), opts ...LockOption) ([]byte, error) {
	switch {
	case fn == nil:
		return nil, fmt.Errorf("%w: nil function", ErrInvalid)
	case ctx == nil:
		return nil, fmt.Errorf("%w: nil context", ErrInvalid)
	case len(bind) == 0:
		return nil, fmt.Errorf("%w: empty claim value to bind", ErrInvalid)
	case ttl <= 0:
		return nil, fmt.Errorf("%w: claim TTL %v must be positive", ErrInvalid, ttl)
	}
	lc, err := l.lockConfig(key, true, opts)
	switch {
	case err != nil:
		return nil, err
	case lc.waitSet && lc.wait > 0:
		return nil, fmt.Errorf("%w: WithClaim tries once; Wait(%v) does not apply", ErrInvalid, lc.wait)
	case lc.permits > 1:
		return nil, fmt.Errorf("%w: WithClaim takes the key itself; Permits(%d) does not apply", ErrInvalid, lc.permits)
	}
	lc.wait, lc.waitSet = 0, true
	var claim []byte
	info := observe.Info{Key: key, Name: lc.name, Attrs: lc.attrs, Write: true}
	err = l.observed(ctx, observe.Run, info, func(ctx context.Context, info *observe.Info) error {
		le, found, err := l.takeClaim(ctx, key, lc, bind, ttl)
		switch {
		case err != nil:
			info.Result = acquireResult(err)
			return err
		case le == nil:
			claim, info.Result = found, resultClaimed
			return nil
		}
		claim, err = l.runClaim(ctx, le, fn, info)
		return err
	})
	return claim, err
}

// claimOf returns the claim of the lock with keys k: what claimKey names.
func claimOf(k store.Keys) string { return k.Lock + ":claim" }

// resultClaimed is, for observers, the outcome of a WithClaim that found
// another value in the claim: nothing was acquired.
const resultClaimed = "claimed"

// takeClaim acquires key for WithClaim unless its claim holds a value
// other than bind, which it returns instead, and binds an empty claim to
// bind for ttl.
func (l *Locker) takeClaim(ctx context.Context, key string, lc lockConfig, bind []byte, ttl time.Duration) (*Lease, []byte, error) {
	if err := l.checkAcquire(ctx, key); err != nil {
		return nil, nil, err
	}
	cs, oneRequest := l.store.(store.ClaimHolds)
	if !oneRequest || holdIn(ctx, l, key) != nil {
		return l.takeClaimInSteps(ctx, key, lc, bind, ttl)
	}
	t, err := l.cfg.scaled(lc.ttl)
	if err != nil {
		return nil, nil, err
	}
	var le *Lease
	var found []byte
	info := observe.Info{Key: key, Name: lc.name, Attrs: lc.attrs, Write: true, TTL: lc.ttl, Attempts: 1}
	err = l.observed(ctx, observe.Acquire, info, func(actx context.Context, info *observe.Info) error {
		a := l.newAcquisition(ctx, key, true, lc, t)
		a.attempts = 1
		rep, sent, err := a.attemptClaim(actx, cs, claimOf(a.keys), bind, ttl)
		switch {
		case err == nil && rep.Claimed:
			found, info.Result = rep.Value, resultClaimed
			return nil
		case err == nil && rep.Acquired:
			if le, err = a.take(rep.Token, sent); le != nil {
				info.Token = le.h.token
			}
		case err == nil:
			a.held = &heldError{remaining: rep.HeldFor}
			err = a.budgetSpent()
		case ctx.Err() != nil:
			err = a.notAcquired(err)
		default:
			err = fmt.Errorf("guard: acquire %q: %w", key, err)
		}
		info.Result = acquireResult(err)
		return err
	})
	return le, found, err
}

// attemptClaim sends one acquire_claim request, as attempt sends an
// acquire request, and returns its answer and when it was sent. A hold
// whose caller gave up, or whose reply was lost, is dropped.
func (a *acquisition) attemptClaim(ctx context.Context, cs store.ClaimHolds, claim string, bind []byte, ttl time.Duration) (store.ClaimReply, time.Time, error) {
	l, k, owner, timeout := a.l, a.keys, a.args.Owner, a.timing.timeout
	sent := l.clock.Now()
	rep, err := request(ctx, l, observe.Info{Op: "acquire", Key: a.key, Name: a.lc.name}, func(ctx context.Context) (store.ClaimReply, error) {
		rep, err := cs.AcquireClaim(ctx, k, claim, bind, ttl, a.args)
		if rep.Acquired && err != nil { // held, but not well enough to rely on
			l.dropHold(k, owner, l.cfg.requestTimeout)
		}
		return rep, err
	}, func(rep store.ClaimReply, err error) {
		if err == nil && rep.Acquired {
			l.dropHold(k, owner, timeout)
		}
	})
	if _, lost := errors.AsType[*store.NoReplyError](err); lost && ctx.Err() == nil {
		// The script may have run and its reply been lost.
		l.runner.start(func() { l.dropHold(k, owner, timeout) })
	}
	return rep, sent, err
}

// takeClaimInSteps is takeClaim in requests of their own, for a store
// without ClaimHolds (a quorum) or a context that holds key already (a
// re-entry, which acquires nothing in Redis).
func (l *Locker) takeClaimInSteps(ctx context.Context, key string, lc lockConfig, bind []byte, ttl time.Duration) (*Lease, []byte, error) {
	// A completed run is answered without taking the lock.
	if found, ok, err := l.otherClaim(ctx, key, bind); err != nil || ok {
		return nil, found, err
	}
	le, err := l.acquire(ctx, key, true, lc)
	if err != nil {
		return nil, nil, err
	}
	bound, err := l.Claim(ctx, key, bind, ttl)
	var found []byte
	var ok bool
	if err == nil && !bound {
		// Bound before: to bind, or to another value that came meanwhile.
		found, ok, err = l.otherClaim(ctx, key, bind)
	}
	if err != nil || ok {
		_ = le.Release(ctx) // a failure is logged; the key expires within its TTL
		return nil, found, err
	}
	return le, nil, nil
}

// otherClaim returns key's claim and true if it holds a value other than
// bind.
func (l *Locker) otherClaim(ctx context.Context, key string, bind []byte) ([]byte, bool, error) {
	v, ok, err := l.Claimed(ctx, key)
	if err != nil || !ok || bytes.Equal(v, bind) {
		return nil, false, err
	}
	return v, true, nil
}

// runClaim runs fn under le, then stores its result and releases le (see
// endClaim); a panic in fn releases le, stores nothing, and continues.
func (l *Locker) runClaim(ctx context.Context, le *Lease, fn func(context.Context) ([]byte, time.Duration, error), info *observe.Info) (claim []byte, err error) {
	jobCtx, cancel := context.WithCancelCause(withHold(ctx, le.h))
	// The hold's context, as runLocked's.
	hctx := le.h.ctx
	stop := context.AfterFunc(hctx, func() { cancel(context.Cause(hctx)) })
	var result []byte
	var keep time.Duration
	returned := false
	defer func() {
		stop()
		cancel(context.Canceled)
		if returned {
			claim, err = l.endClaim(ctx, le, err, result, keep, info)
		} else {
			err = l.endRun(ctx, le, err, info)
		}
		info.Err = err // for the observer, should fn have panicked
	}()
	result, keep, err = fn(jobCtx)
	returned = true
	return nil, err
}

// endClaim stores result, the result of le's job, as the claim for keep,
// fenced, and releases le; it returns the result if it stored it, and the
// run's error: err, joined with the loss of the lease, the failure of the
// release or the refusal of the store.
func (l *Locker) endClaim(ctx context.Context, le *Lease, err error, result []byte, keep time.Duration, info *observe.Info) ([]byte, error) {
	if result == nil {
		return nil, l.endRun(ctx, le, err, info)
	}
	if keep <= 0 {
		bad := fmt.Errorf("%w: the result's TTL %v must be positive; nothing stored", ErrInvalid, keep)
		return nil, errors.Join(l.endRun(ctx, le, err, info), bad)
	}
	stored, storeErr, relErr := l.releaseClaim(ctx, le, result, keep)
	err = errors.Join(l.settleRun(le, err, relErr, info), storeErr)
	if !stored {
		return nil, err
	}
	return result, err
}

// releaseClaim stores value as le's key's claim for keep if le's hold is
// still the newest on the key, and releases le: in one request when le is
// its hold's last lease and the store has ClaimHolds, else in two. It
// stores nothing for a hold known lost. It reports whether it stored the
// value, why not (storeErr: ErrSuperseded, a key of another type), and the
// release's error, as Release returns it.
func (l *Locker) releaseClaim(ctx context.Context, le *Lease, value []byte, keep time.Duration) (stored bool, storeErr, relErr error) {
	h := le.h
	if cs, ok := l.store.(store.ClaimHolds); ok && h.takeFinal(le) {
		return l.releaseClaimFinal(ctx, cs, le, value, keep)
	}
	if h.over.Load() {
		return false, nil, le.Release(ctx)
	}
	storeErr = l.ClaimFenced(context.WithoutCancel(ctx), h.key, h.token, value, keep)
	return storeErr == nil, storeErr, le.Release(ctx)
}

// takeFinal takes le, its hold's last lease, off the hold's counts for a
// final release that the caller sends itself, as dropLeaseLocked would,
// and reports whether it did: not when other leases of the hold remain, a
// count update is due or under way, or the hold has ended.
func (h *hold) takeFinal(le *Lease) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	writes, reads := counts(h.writes, h.reads, le.write, -1)
	if le.reentrant || writes != 0 || reads != 0 || h.final || h.next != nil || h.syncing || h.over.Load() {
		return false
	}
	h.writes, h.reads, h.final = 0, 0, true
	h.l.hb.remove(h) // no renewal is sent after the final update
	return true
}

// releaseClaimFinal is releaseClaim in one request, for a lease that
// takeFinal took off its hold: one Release phase for the observer. It waits
// for the answer as Release does: until ctx is done (or, for a ctx already
// done, up to the request timeout), while the request goes on without it.
func (l *Locker) releaseClaimFinal(ctx context.Context, cs store.ClaimHolds, le *Lease, value []byte, keep time.Duration) (stored bool, storeErr, relErr error) {
	h := le.h
	le.released.Store(true)
	defer le.end()
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	var rep store.ReleaseClaimReply
	var sendErr, waitErr error
	info := observe.Info{Key: h.key, Name: h.name, Write: le.write, TTL: h.timing.ttl, Token: h.token}
	relErr = l.observed(ctx, observe.Release, info, func(ctx context.Context, _ *observe.Info) error {
		rep, sendErr, waitErr = h.finishClaim(ctx, cs, value, keep)
		switch {
		case waitErr != nil:
			return fmt.Errorf("guard: release %q: %w; the release goes on without waiting, and the key expires within its TTL if it does not land", h.key, waitErr)
		case sendErr != nil:
			return fmt.Errorf("guard: release %q: %w", h.key, sendErr)
		case rep.Outcome == store.Applied:
			return nil
		case rep.Outcome == store.Taken:
			return fmt.Errorf("%w: %q is now held by another owner", ErrNotHeld, h.key)
		default:
			return fmt.Errorf("%w: %q expired before it was released", ErrNotHeld, h.key)
		}
	})
	switch {
	case waitErr != nil, sendErr != nil:
		return false, nil, relErr // stored or not: nobody can tell
	case rep.ClaimErr != nil:
		return false, redisError(h.key, rep.ClaimErr), relErr
	}
	storeErr = redisError(h.key, superseded(h.token, rep.Counter))
	return storeErr == nil, storeErr, relErr
}

// finishClaim sends the final release with its claim from a goroutine of
// the Locker's runner, which ends the hold when Redis answers, and waits
// for the answer until ctx is done (waitErr is then ctx's cause), as a
// final Release waits for its count update: a caller that gives up on a
// dead link is not held for the request's retries.
func (h *hold) finishClaim(ctx context.Context, cs store.ClaimHolds, value []byte, keep time.Duration) (rep store.ReleaseClaimReply, sendErr, waitErr error) {
	s := &countSync{obsCtx: ctx, done: make(chan struct{})}
	var r store.ReleaseClaimReply
	if !h.l.runner.start(func() {
		r, s.err = h.sendReleaseClaim(s.obsCtx, cs, value, keep)
		h.settleFinal(r.Outcome, s.err)
		close(s.done)
	}) {
		h.settleFinal(0, ErrClosed)
		return rep, ErrClosed, nil
	}
	if err := s.await(ctx, h); err != nil {
		return rep, nil, err
	}
	return r, s.err, nil
}

// sendReleaseClaim stores value fenced and sends the hold's final count
// update in one request, retrying transport errors for up to the request
// timeout as sendCounts does.
func (h *hold) sendReleaseClaim(obsCtx context.Context, cs store.ClaimHolds, value []byte, keep time.Duration) (store.ReleaseClaimReply, error) {
	l := h.l
	ctx := new(deadlineCtx) // the retries' bound; WithTimeout's costs more
	ctx.start(&l.deadlines, context.Background(), h.timing.timeout)
	defer ctx.stop()
	// As sendCounts' marker: it outlives every retry.
	a := store.CountArgs{Owner: h.owner, Marker: 2 * max(h.timing.timeout, time.Second)}
	claim := claimOf(h.keys)
	backoff := releaseBackoff
	for {
		start := l.clock.Now()
		rep, err := try(ctx, l, func(ctx context.Context) (store.ReleaseClaimReply, error) {
			return cs.ReleaseClaim(ctx, h.keys, claim, h.token, value, keep, a)
		})
		l.obs.Event(obsCtx, observe.RoundTrip, observe.Info{Op: "release", Key: h.key, Name: h.name, Duration: l.clock.Now().Sub(start), Err: err})
		if err == nil || errors.Is(err, ErrWrongType) || ctx.Err() != nil {
			return rep, err
		}
		t := l.clock.NewTimer(backoff)
		select {
		case <-t.C():
			backoff = min(2*backoff, releaseMaxBackoff)
		case <-ctx.Done():
			t.Stop()
			return rep, err
		}
	}
}
