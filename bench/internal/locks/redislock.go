package locks

import (
	"context"
	"errors"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// redislockLib is one redislock.Client, retrying a busy key with a linear
// backoff of RetryDelay (no retry when RetryDelay is 0).
type redislockLib struct {
	c   *redislock.Client
	opt *redislock.Options
	cfg Config
}

func newRedislock(client *redis.Client, cfg Config) *redislockLib {
	retry := redislock.NoRetry()
	if cfg.RetryDelay > 0 {
		retry = redislock.LinearBackoff(cfg.RetryDelay) // stateless: shared by all calls
	}
	return &redislockLib{c: redislock.New(client), opt: &redislock.Options{RetryStrategy: retry}, cfg: cfg}
}

func (r *redislockLib) Lock(ctx context.Context, key string) (Lease, error) {
	lock, err := r.c.Obtain(ctx, key, r.cfg.TTL, r.opt)
	if err != nil {
		return nil, err
	}
	l := &redislockLease{lock: lock}
	l.renew = startRenewer(r.cfg.RenewEvery, func(ctx context.Context) error {
		return lock.Refresh(ctx, r.cfg.TTL, nil)
	})
	return l, nil
}

func (r *redislockLib) Close() error { return nil }

type redislockLease struct {
	lock  *redislock.Lock
	renew *renewer
}

func (l *redislockLease) Unlock(ctx context.Context) error {
	l.renew.Stop()
	err := l.lock.Release(ctx)
	if errors.Is(err, redislock.ErrLockNotHeld) {
		return errors.Join(ErrNotHeld, err)
	}
	return err
}

func (l *redislockLease) Lost() bool { return l.renew.Lost() }
