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

// guardNoCancel is guard called under contexts that cannot be canceled
// (context.WithoutCancel of the caller's): each request then runs on the
// caller's goroutine, bounded by guard's request timeout, instead of being
// handed to a goroutine that lets the call return the moment its context
// is done. Beside "guard", it shows what that promise costs.
type guardNoCancel struct{ guardLib }

func newGuardNoCancel(client *redis.Client, cfg Config) (Lib, error) {
	g, err := newGuard(client, cfg)
	if err != nil {
		return nil, err
	}
	return guardNoCancel{g.(guardLib)}, nil
}

func (g guardNoCancel) Lock(ctx context.Context, key string) (Lease, error) {
	le, err := g.l.Acquire(context.WithoutCancel(ctx), key)
	if err != nil {
		return nil, err
	}
	return guardNoCancelLease{guardLease{le}}, nil
}

type guardNoCancelLease struct{ guardLease }

func (g guardNoCancelLease) Unlock(ctx context.Context) error {
	return g.guardLease.Unlock(context.WithoutCancel(ctx))
}

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
