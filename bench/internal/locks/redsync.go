package locks

import (
	"context"
	"errors"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redsyncLib is redsync over one goredis/v9 pool. Its mutexes keep the
// default 32 tries, with RetryDelay between them instead of the default
// random 50–250 ms.
type redsyncLib struct {
	rs  *redsync.Redsync
	cfg Config
}

func newRedsync(client *redis.Client, cfg Config) *redsyncLib {
	return &redsyncLib{rs: redsync.New(goredis.NewPool(client)), cfg: cfg}
}

func (r *redsyncLib) Lock(ctx context.Context, key string) (Lease, error) {
	opts := []redsync.Option{redsync.WithExpiry(r.cfg.TTL)}
	if r.cfg.RetryDelay > 0 {
		opts = append(opts, redsync.WithRetryDelay(r.cfg.RetryDelay))
	}
	m := r.rs.NewMutex(key, opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	l := &redsyncLease{m: m}
	l.renew = startRenewer(r.cfg.RenewEvery, func(ctx context.Context) error {
		ok, err := m.ExtendContext(ctx)
		if err == nil && !ok {
			err = redsync.ErrExtendFailed
		}
		return err
	})
	return l, nil
}

func (r *redsyncLib) Close() error { return nil }

type redsyncLease struct {
	m     *redsync.Mutex
	renew *renewer
}

func (l *redsyncLease) Unlock(ctx context.Context) error {
	l.renew.Stop()
	ok, err := l.m.UnlockContext(ctx)
	if errors.Is(err, redsync.ErrLockAlreadyExpired) || (err == nil && !ok) {
		return errors.Join(ErrNotHeld, err)
	}
	return err
}

func (l *redsyncLease) Lost() bool { return l.renew.Lost() }
