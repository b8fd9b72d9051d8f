// Package failover_test holds guard's failover tests: a Sentinel
// promoting a replica, a Cluster master killed or demoted, a Cluster slot
// moved. They start whole deployments and wait for them to fail over, so
// they live apart from guard's unit tests, as etcd keeps its under tests/.
package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
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

// lockKey is the Redis key of the lock name under guard's default prefix.
func lockKey(name string) string { return "guard:{" + name + "}" }

// waitShardSubscribed polls PUBSUB SHARDNUMSUB on node until every channel
// has a subscriber, failing the test after within.
func waitShardSubscribed(t *testing.T, node *redis.Client, within time.Duration, channels ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		counts, err := node.PubSubShardNumSub(t.Context(), channels...).Result()
		if err != nil {
			t.Fatalf("PUBSUB SHARDNUMSUB: %v", err)
		}
		all := true
		for _, ch := range channels {
			all = all && counts[ch] > 0
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: PUBSUB SHARDNUMSUB = %v, want every channel > 0", within, counts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// releasedChannel is the release channel of the lock name.
func releasedChannel(name string) string { return lockKey(name) + ":released" }
