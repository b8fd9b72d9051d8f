package guard

import (
	"context"
	"fmt"
	"time"
)

// Charge spends amount from the budget named key, shared by every Locker
// on the same Redis, if the budget's window has spent no more than limit
// with it; otherwise it spends nothing. A window lasts window, counted on
// the server from the first spend after the last window ended, and the
// budget is whole again when it ends. Charge reports whether it spent, and
// how long until the window ends (the time to wait before a refused amount
// may fit). Adapters cap what one client may store with it (httpguard's
// Quota). A budget lives beside the lock of the same key (same Cluster
// slot) and never blocks it. amount must not be negative, limit must be
// positive, and window at least a millisecond.
func (l *Locker) Charge(ctx context.Context, key string, amount, limit int64, window time.Duration) (spent bool, left time.Duration, err error) {
	if ctx == nil {
		return false, 0, fmt.Errorf("%w: nil context", ErrInvalid)
	}
	if err := l.checkClaim(key); err != nil {
		return false, 0, err
	}
	switch {
	case amount < 0:
		return false, 0, fmt.Errorf("%w: charge amount %d must not be negative", ErrInvalid, amount)
	case limit <= 0:
		return false, 0, fmt.Errorf("%w: charge limit %d must be positive", ErrInvalid, limit)
	case window < time.Millisecond:
		return false, 0, fmt.Errorf("%w: charge window %v must be at least 1ms", ErrInvalid, window)
	}
	k := l.keysFor(key).Lock + ":budget"
	type answer struct {
		spent bool
		left  time.Duration
	}
	a, err := await(ctx, l, func(ctx context.Context) (answer, error) {
		spent, left, err := l.store.Charge(ctx, k, amount, limit, window)
		return answer{spent, left}, err
	}, nil)
	if err != nil {
		return false, 0, redisError(key, err)
	}
	return a.spent, a.left, nil
}
