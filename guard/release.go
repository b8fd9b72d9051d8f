package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobguard/jobguard/guard/observe"
)

// release ends one lease of a hold (Lease.Release): one Release phase for
// the observer.
func (l *Locker) release(ctx context.Context, le *Lease) error {
	h := le.h
	info := observe.Info{Key: h.key, Name: h.name, Write: le.write, TTL: h.timing.ttl, Token: h.token, Reentrant: le.reentrant}
	return l.observed(ctx, observe.Release, info, func(ctx context.Context, _ *observe.Info) error {
		return l.releaseLease(ctx, le)
	})
}

// releaseLease takes le's lease off its hold's counts in Redis; the last
// lease frees the key (after MinHold).
func (l *Locker) releaseLease(ctx context.Context, le *Lease) error {
	h := le.h
	h.mu.Lock()
	defer h.mu.Unlock()
	writes, reads := counts(h.writes, h.reads, le.write, -1)
	final := writes == 0 && reads == 0
	h.writes, h.reads = writes, reads
	ctx, cancel := context.WithTimeout(ctx, h.timing.timeout)
	defer cancel()
	if h.over.Load() {
		return l.releaseEnded(ctx, h, final)
	}
	if final {
		l.hb.remove(h) // no renewal is sent after this point
	}
	// A retry of a final release whose first try applied finds the owner's
	// release marker and answers applied; any other "expired" or "taken"
	// means the hold was gone before the release.
	res, err := releaseRetrying(ctx, h, writes, reads)
	switch {
	case err == nil && res != applied:
		h.lose(lostCause(h.key, res))
		if res == taken {
			return fmt.Errorf("%w: %q is now held by another owner", ErrNotHeld, h.key)
		}
		return fmt.Errorf("%w: %q expired before it was released", ErrNotHeld, h.key)
	case final:
		return l.releasedLast(h, err)
	default:
		return err
	}
}

// releaseEnded releases a lease of a hold that was lost or abandoned by
// Close. Its last lease still frees the key if the hold is ours on the
// server, so the next owner need not wait for the TTL.
func (l *Locker) releaseEnded(ctx context.Context, h *hold, final bool) error {
	var state string
	if final {
		res, err := h.setCounts(ctx, 0, 0, "release")
		switch {
		case err != nil:
		case res == applied:
			state = "; it was still held and is now released"
		case res == taken:
			state = "; the key is now held by another owner"
		default:
			state = "; the key expired"
		}
	}
	return fmt.Errorf("%w: lease on %q: %w%s", ErrNotHeld, h.key, context.Cause(h.ctx), state)
}

// releasedLast ends a hold whose final release was sent; err says whether
// Redis confirmed it.
func (l *Locker) releasedLast(h *hold, err error) error {
	if h.end(ErrReleased) {
		l.obs.Event(h.obsCtx, observe.Held, observe.Info{Key: h.key, Name: h.name, Token: h.token, Delta: -1, Result: "released", Duration: l.clock.Now().Sub(h.start)})
	}
	if err != nil {
		l.log.Warn("guard: release failed; the key expires within its TTL", "key", h.key, "err", err)
		return fmt.Errorf("guard: release %q: %w", h.key, err)
	}
	if l.debugEnabled() {
		l.log.Debug("guard: released", "key", h.key, "token", h.token)
	}
	return nil
}

// Release retries back off from releaseBackoff to releaseMaxBackoff: the
// first retry comes soon enough to catch a dropped connection that go-redis
// replaces at once, later ones leave a struggling server room.
const (
	releaseBackoff    = 10 * time.Millisecond
	releaseMaxBackoff = 200 * time.Millisecond
)

// releaseRetrying sets h's counts for a release, retrying on transport
// errors until ctx is done. The script sets counts rather than adding to them, and a final
// release leaves a marker, so a retry after a lost reply is harmless.
func releaseRetrying(ctx context.Context, h *hold, writes, reads int) (outcome, error) {
	backoff := releaseBackoff
	for {
		res, err := h.setCounts(ctx, writes, reads, "release")
		if err == nil {
			return res, nil
		}
		if errors.Is(err, ErrWrongType) || errors.Is(err, ErrClosed) || ctx.Err() != nil {
			return 0, err
		}
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, releaseMaxBackoff)
		case <-ctx.Done():
			return 0, err
		}
	}
}
