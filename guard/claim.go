package guard

import (
	"context"
	"fmt"
	"time"
)

// Claim stores value under key for ttl unless a value is stored there
// already, and reports whether this call stored it: a fleet-wide "first one
// wins" marker that expires by itself. The cron adapter claims each tick
// with it; the queue adapter records finished work, the HTTP adapter binds
// a key to its payload. A claim lives beside the lock of the same key (same
// Cluster slot) and never blocks it. The ttl must be positive; it is counted
// on the server. ClaimFenced writes the same value, newest hold first, and
// WithClaim binds it to a run and stores the run's result.
//
// On a quorum (NewQuorum) a claim stands when a majority of masters stored
// it. Claimers that ask at once can split the masters so that none has a
// majority; each then takes back what it stored and tries again after a
// random delay, so one of them wins, or, when the masters cannot be had
// before ctx's deadline or the request timeout, each gets an error.
func (l *Locker) Claim(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if ctx == nil {
		return false, fmt.Errorf("%w: nil context", ErrInvalid)
	}
	if err := l.checkClaim(key); err != nil {
		return false, err
	}
	if ttl <= 0 {
		return false, fmt.Errorf("%w: claim TTL %v must be positive", ErrInvalid, ttl)
	}
	k := l.claimKey(key)
	stored, err := await(ctx, l, func(ctx context.Context) (bool, error) {
		return l.store.Claim(ctx, k, value, ttl)
	}, nil)
	return stored, redisError(key, err)
}

// Claimed returns the value that Claim stored under key, and whether one is
// stored (it may have expired).
func (l *Locker) Claimed(ctx context.Context, key string) ([]byte, bool, error) {
	if ctx == nil {
		return nil, false, fmt.Errorf("%w: nil context", ErrInvalid)
	}
	if err := l.checkClaim(key); err != nil {
		return nil, false, err
	}
	k := l.claimKey(key)
	type claimedValue struct {
		value []byte
		ok    bool
	}
	v, err := await(ctx, l, func(ctx context.Context) (claimedValue, error) {
		value, ok, err := l.store.Claimed(ctx, k)
		return claimedValue{value, ok}, err
	}, nil)
	if err != nil {
		return nil, false, redisError(key, err)
	}
	return v.value, v.ok, nil
}

func (l *Locker) checkClaim(key string) error {
	if l.isClosed() {
		return ErrClosed
	}
	return checkKey(key)
}

func (l *Locker) claimKey(key string) string { return l.keysFor(key).Lock + ":claim" }
