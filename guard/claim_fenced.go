package guard

import (
	"context"
	"fmt"
	"time"
)

// ClaimFenced stores value as key's claim (what Claimed returns) for ttl,
// replacing any claim there, but only if token is still the newest fencing
// token minted for key's lock: no acquisition of key, write or read, has
// begun since the one that got token. Otherwise it stores nothing and
// returns an error matching ErrSuperseded. The check and the store are one
// script on the server that holds the lock (same Cluster slot), so a holder
// whose lease ended unnoticed (a pause, a partition) can neither overwrite
// the value of a newer hold nor store one after a newer hold began.
//
// Pass the token of the hold that produced value (Lease.Token, TokenFrom).
// Storing again with the same token replaces the value and restarts its
// ttl, so a retry is harmless; after an error without a reply from Redis
// the value may or may not be stored, and calling again settles it. The
// ttl must be positive; it is counted on the server. The lock's fencing
// counter is what proves a token the newest: a key whose counter is gone
// (it expired, see FenceTTL, which must then outlast any hold that stores;
// or a failover lost it) refuses every token until the next acquisition.
// Claim and ClaimFenced write the same value; use one of them per key.
func (l *Locker) ClaimFenced(ctx context.Context, key string, token int64, value []byte, ttl time.Duration) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalid)
	}
	if err := l.checkClaim(key); err != nil {
		return err
	}
	switch {
	case token <= 0:
		return fmt.Errorf("%w: fencing token %d must be positive", ErrInvalid, token)
	case ttl <= 0:
		return fmt.Errorf("%w: claim TTL %v must be positive", ErrInvalid, ttl)
	}
	k := l.keysFor(key)
	claim := l.claimKey(key)
	counter, err := await(ctx, l, func(ctx context.Context) (int64, error) {
		return l.store.ClaimFenced(ctx, k.Fence, claim, token, value, ttl)
	}, nil)
	if err != nil {
		return redisError(key, err)
	}
	return redisError(key, superseded(token, counter))
}

// superseded returns nil when counter, a lock's fencing counter, is token,
// and otherwise why a value fenced by token was not stored (ErrSuperseded).
func superseded(token, counter int64) error {
	switch {
	case counter == token:
		return nil
	case counter == 0:
		return fmt.Errorf("%w: token %d: the lock's fencing counter is gone (expired or lost), so no token can be proven the newest", ErrSuperseded, token)
	case counter > token:
		return fmt.Errorf("%w: token %d, newest %d", ErrSuperseded, token, counter)
	default:
		return fmt.Errorf("%w: token %d is above the lock's fencing counter %d: not minted by it (the counter was lost and started again, or the token is another key's)", ErrSuperseded, token, counter)
	}
}
