package guard_test

import (
	"context"
	"testing"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// newLocker returns a Locker on its own client to addr, closed when the test ends.
func newLocker(t testing.TB, addr string, opts ...guard.Option) *guard.Locker {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr})
	l, err := guard.New(client, opts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		_ = client.Close()
	})
	return l
}

// newLockers starts a server and n Lockers, each on its own connection pool,
// standing in for n processes of a fleet.
func newLockers(t testing.TB, n int, opts ...guard.Option) (*redistest.Server, []*guard.Locker) {
	t.Helper()
	srv := redistest.Start(t)
	ls := make([]*guard.Locker, n)
	for i := range ls {
		ls[i] = newLocker(t, srv.Addr(), opts...)
	}
	return srv, ls
}

func mustAcquire(t testing.TB, ctx context.Context, l *guard.Locker, key string, opts ...guard.LockOption) *guard.Lease {
	t.Helper()
	le, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return le
}

func mustRelease(t testing.TB, le *guard.Lease) {
	t.Helper()
	if err := le.Release(context.Background()); err != nil {
		t.Fatalf("Release(%q): %v", le.Key(), err)
	}
}
