package guard

import (
	"context"
	"fmt"

	"github.com/jobguard/jobguard/guard/internal/store"
)

// ForceRelease is an operator's override: it ends every hold on key at
// once, whoever holds it, and returns the state it ended (empty when the
// key was free). It deletes the lock's holds in one script and wakes the
// waiting acquisitions as a release does: the Locker whose registration was
// refreshed longest ago is named and its first waiter tries at once (a
// reader wakes the readers behind it too); the other Lockers' waiters try
// if it has not taken the key after a short grace. The fencing counter is
// left alone, so the next acquisition's token is higher than every token
// handed out before.
//
// A holder is not told at once: its next renewal (within its renew
// interval, TTL/3 by default) finds the hold gone and cancels its lease
// context, and under WithLock its job's, with a cause matching
// ErrLeaseLost. Until then the job runs on while another may hold the key,
// which is why the protected resource should check fencing tokens. Use it
// for a holder that is stuck but still renewing; a holder that crashed
// frees the key by itself within its TTL.
func (l *Locker) ForceRelease(ctx context.Context, key string) (LockState, error) {
	if ctx == nil {
		return LockState{}, fmt.Errorf("%w: nil context", ErrInvalid)
	}
	if err := l.checkClaim(key); err != nil { // open, and a valid key
		return LockState{}, err
	}
	k := l.keysFor(key)
	raw, err := await(ctx, l, func(ctx context.Context) (store.LockState, error) {
		return l.store.ForceRelease(ctx, k)
	}, nil)
	if err != nil {
		return LockState{}, redisError(key, err)
	}
	st := stateOf(key, raw)
	if len(st.Holders) > 0 {
		l.log.Warn("guard: lock force-released", "key", key, "holders", len(st.Holders), "waiters", len(st.Waiters))
	}
	return st, nil
}
