package locks

import (
	"context"
	"errors"

	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

// guardLib is one guard.Locker. It waits for a busy key on the Locker's
// pub/sub subscription and renews held leases on its heartbeat.
type guardLib struct{ l *guard.Locker }

func newGuard(client *redis.Client, cfg Config) (Lib, error) {
	l, err := guard.New(client, guard.WithTTL(cfg.TTL))
	if err != nil {
		return nil, err
	}
	return guardLib{l}, nil
}

func (g guardLib) Lock(ctx context.Context, key string) (Lease, error) {
	le, err := g.l.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return guardLease{le}, nil
}

func (g guardLib) Close() error { return g.l.Close() }

type guardLease struct{ le *guard.Lease }

func (g guardLease) Unlock(ctx context.Context) error {
	err := g.le.Release(ctx)
	if errors.Is(err, guard.ErrNotHeld) {
		return errors.Join(ErrNotHeld, err)
	}
	return err
}

func (g guardLease) Lost() bool {
	return errors.Is(context.Cause(g.le.Context()), guard.ErrLeaseLost)
}
