package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
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

// releaseLease takes le's lease off its hold's counts (counts.go). A lease
// that is not the hold's last is counted off in the process alone, unless
// it is the last write lease beside read leases: Redis then makes the hold
// a read hold. The last lease frees the key (after MinHold), and the
// update's sender ends the hold when Redis answers. A release that goes to
// Redis waits for the answer until ctx is done: the update goes on without
// the caller, and a key whose release does not land expires within its TTL.
func (l *Locker) releaseLease(ctx context.Context, le *Lease) error {
	h := le.h
	h.mu.Lock()
	ended := h.over.Load()
	s := h.dropLeaseLocked(ctx, le.write, ended)
	h.mu.Unlock()
	if ended {
		return l.releaseEnded(ctx, h, s)
	}
	if s == nil {
		return nil // Redis keeps the hold as it was
	}
	if err := s.await(ctx, h); err != nil {
		return fmt.Errorf("guard: release %q: %w; the release goes on without waiting, and the key expires within its TTL if it does not land", h.key, err)
	}
	// A retry of a final release whose first try applied finds the owner's
	// release marker and answers applied; any other "expired" or "taken"
	// means the hold was gone before the release.
	switch {
	case s.err != nil:
		return fmt.Errorf("guard: release %q: %w", h.key, s.err)
	case s.res == store.Applied:
		return nil
	}
	h.lose(lostCause(h.key, s.res))
	if s.res == store.Taken {
		return fmt.Errorf("%w: %q is now held by another owner", ErrNotHeld, h.key)
	}
	return fmt.Errorf("%w: %q expired before it was released", ErrNotHeld, h.key)
}

// releaseEnded releases a lease of a hold that was lost or abandoned by
// Close. Its last lease still frees the key if the hold is ours on the
// server (s is that update; nil for another lease), so the next owner need
// not wait for the TTL.
func (l *Locker) releaseEnded(ctx context.Context, h *hold, s *countSync) error {
	cause := h.endCause()
	var state string
	if s != nil {
		switch err := s.await(ctx, h); {
		case err != nil, s.err != nil:
		case s.res == store.Applied:
			state = "; it was still held on the server, and is now released"
		case s.res == store.Taken && !errors.Is(cause, errTaken):
			state = "; the key is now held by another owner"
		case s.res == store.Expired && !errors.Is(cause, errGone):
			state = "; the key expired"
		}
	}
	// The cause names the key (lostCause, overdue, Close's): said once.
	return &chain{msg: ErrNotHeld.Error() + ": " + detail(cause) + state, errs: []error{ErrNotHeld, cause}}
}

// Count updates retry transport errors, backing off from releaseBackoff to
// releaseMaxBackoff: the first retry comes soon enough to catch a dropped
// connection that go-redis replaces at once, later ones leave a struggling
// server room.
const (
	releaseBackoff    = 10 * time.Millisecond
	releaseMaxBackoff = 200 * time.Millisecond
)
