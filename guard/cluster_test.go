package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/guard/observe"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// newClusterLocker returns a Locker on a ClusterClient of its own, both
// closed when the test ends.
func newClusterLocker(t testing.TB, c *redistest.Cluster, opts ...guard.Option) (*guard.Locker, *redis.ClusterClient) {
	t.Helper()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
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
	return l, client
}

// lockKey and releasedChannel are the Redis names guard gives lock name
// under the default prefix.
func lockKey(name string) string         { return "guard:{" + name + "}" }
func releasedChannel(name string) string { return lockKey(name) + ":released" }

// keysOnOneMaster returns n lock names whose keys are in n different slots
// of the same master.
func keysOnOneMaster(t *testing.T, cc *redis.ClusterClient, n int) []string {
	t.Helper()
	ctx := t.Context()
	byMaster := map[string][]string{}
	slots := map[int64]bool{}
	for i := range 1000 {
		name := fmt.Sprintf("job-%d", i)
		slot, err := cc.ClusterKeySlot(ctx, lockKey(name)).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		if slots[slot] {
			continue
		}
		slots[slot] = true
		m, err := cc.MasterForKey(ctx, lockKey(name))
		if err != nil {
			t.Fatalf("MasterForKey: %v", err)
		}
		addr := m.Options().Addr
		byMaster[addr] = append(byMaster[addr], name)
		if len(byMaster[addr]) == n {
			return byMaster[addr]
		}
	}
	t.Fatalf("no master with %d of 1000 names in distinct slots", n)
	return nil
}

// keysOnMasters returns one lock name on each of two different masters.
func keysOnMasters(t *testing.T, c *redistest.Cluster) (a, b string) {
	t.Helper()
	a = "job-0"
	ma := c.MasterOf(t, lockKey(a))
	for i := 1; i < 1000; i++ {
		b = fmt.Sprintf("job-%d", i)
		if c.MasterOf(t, lockKey(b)) != ma {
			return a, b
		}
	}
	t.Fatal("all 1000 names on one master")
	return "", ""
}

// waitShardSubscribed polls PUBSUB SHARDNUMSUB on node until every channel
// has a subscriber, failing the test after within.
func waitShardSubscribed(t *testing.T, node *redis.Client, within time.Duration, channels ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	var counts map[string]int64
	for {
		var err error
		counts, err = node.PubSubShardNumSub(t.Context(), channels...).Result()
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

// After the server drops the subscription connection, a waiter on each of
// two slots of one master is still woken by the release notification, not
// by its fallback timer (the TTL is 20s).
func TestClusterWaitersWokenAfterPubSubReconnect(t *testing.T) {
	c := redistest.StartCluster(t)
	holder, cc := newClusterLocker(t, c, guard.WithTTL(20*time.Second))
	waiter, _ := newClusterLocker(t, c, guard.WithTTL(20*time.Second))
	names := keysOnOneMaster(t, cc, 2)
	master := c.MasterOf(t, lockKey(names[0])).Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	held := make([]*guard.Lease, len(names))
	for i, name := range names {
		held[i] = mustAcquire(t, ctx, holder, name)
	}
	acquired := make(chan string, len(names))
	errs := make(chan error, len(names))
	for _, name := range names {
		go func() {
			le, err := waiter.Acquire(ctx, name)
			if err != nil {
				errs <- err
				return
			}
			acquired <- name
			_ = le.Release(context.Background())
		}()
	}
	channels := []string{releasedChannel(names[0]), releasedChannel(names[1])}
	waitShardSubscribed(t, master, 5*time.Second, channels...)

	if err := master.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	waitShardSubscribed(t, master, 5*time.Second, channels...)

	for i, name := range names {
		start := time.Now()
		mustRelease(t, held[i])
		select {
		case got := <-acquired:
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("%s handed off after %v; want a notification's worth, far below the 20s TTL", got, d)
			}
		case err := <-errs:
			t.Fatalf("waiter: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: waiter not woken within 5s of the release (TTL 20s)", name)
		}
	}
	// With no waiters left, the waiter's per-slot connections are closed.
	waitNoPubSubClients(t, master, 5*time.Second)
}

// waitNoPubSubClients polls CLIENT LIST TYPE pubsub on node until it is
// empty, failing the test after within.
func waitNoPubSubClients(t *testing.T, node *redis.Client, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		list, err := node.Do(t.Context(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
		if err != nil {
			t.Fatalf("CLIENT LIST: %v", err)
		}
		if strings.TrimSpace(list) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, subscription connections are still open:\n%s", within, list)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A master that hangs for longer than the TTL costs only the leases on it:
// a lease on a healthy master keeps being renewed and its job runs on.
func TestClusterHungMasterLosesOnlyItsLeases(t *testing.T) {
	const ttl = 2 * time.Second // renew every 667ms, each try bounded by 200ms
	c := redistest.StartCluster(t)
	rec := newRecorder()
	l, _ := newClusterLocker(t, c, guard.WithTTL(ttl), guard.WithObserver(rec))
	healthyName, hungName := keysOnMasters(t, c)
	healthy := c.MasterOf(t, lockKey(healthyName))
	hung := c.MasterOf(t, lockKey(hungName))
	// Acquired together, the two leases are due together, so their
	// renewals are sent in the same round.
	healthyLease := mustAcquire(t, t.Context(), l, healthyName)
	hungLease := mustAcquire(t, t.Context(), l, hungName)

	hung.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			hung.Resume(t)
		}
	}()
	select {
	case <-hungLease.Context().Done():
	case <-time.After(ttl + time.Second):
		t.Fatalf("lease on the paused master still live %v after the pause", ttl+time.Second)
	}
	time.Sleep(ttl / 2) // the healthy lease gets past its own stop deadline too

	if cause := context.Cause(hungLease.Context()); !errors.Is(cause, guard.ErrLeaseLost) {
		t.Errorf("lease on the paused master ended with %v, want ErrLeaseLost", cause)
	}
	if err := healthyLease.Context().Err(); err != nil {
		rec.mu.Lock()
		for _, e := range rec.events[observe.RenewFailed] {
			if e.Key == healthyName {
				t.Logf("renewal of %s failed: %v", e.Key, e.Err)
			}
		}
		rec.mu.Unlock()
		t.Fatalf("lease on the healthy master %s ended while %s was paused: %v",
			healthy.Addr(), hung.Addr(), context.Cause(healthyLease.Context()))
	}
	pttl, err := healthy.Client(t).PTTL(t.Context(), lockKey(healthyName)).Result()
	if err != nil || pttl <= 0 {
		t.Fatalf("PTTL %s on the healthy master = %v, %v; want the hold still there", lockKey(healthyName), pttl, err)
	}

	hung.Resume(t)
	resumed = true
	mustRelease(t, healthyLease)
	if err := hungLease.Release(t.Context()); !errors.Is(err, guard.ErrNotHeld) {
		t.Errorf("Release of the lost lease: %v, want ErrNotHeld", err)
	}
}

// After a slot moves to a master whose script cache lacks the scripts (a
// resharding, a promoted replica), the first Acquire on it must still work:
// before the refactor a NOSCRIPT fell back to EVAL, which follows MOVED.
func TestAcquireAfterSlotMovedToColdMaster(t *testing.T) {
	c := redistest.StartCluster(t)
	cc := c.Client(t)
	l, err := guard.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fails := 0
	for i := range 10 {
		name := fmt.Sprintf("mv%d", i)
		from := c.MasterOf(t, "guard:{"+name+"}")
		// Warm up: the client knows the slot map; the scripts are cached on from.
		warm := ""
		for j := 0; ; j++ {
			w := fmt.Sprintf("w%d-%d", i, j)
			if c.MasterOf(t, "guard:{"+w+"}") == from {
				warm = w
				break
			}
		}
		le, err := l.Acquire(t.Context(), warm, guard.FenceTTL(1))
		if err != nil {
			t.Fatal(err)
		}
		_ = le.Release(t.Context())
		var to *redistest.Server
		for _, n := range c.Nodes() {
			if n != from {
				to = n
				break
			}
		}
		toClient := to.Client(t)
		toID, err := toClient.ClusterMyID(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		slot, err := toClient.ClusterKeySlot(t.Context(), "guard:{"+name+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range c.Nodes() {
			if err := n.Client(t).Do(t.Context(), "CLUSTER", "SETSLOT", slot, "NODE", toID).Err(); err != nil {
				t.Fatalf("SETSLOT on %s: %v", n.Addr(), err)
			}
		}
		if err := toClient.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		le, err = l.Acquire(context.Background(), name, guard.Wait(0))
		if err != nil {
			fails++
			t.Logf("attempt %d: Acquire after the slot moved: %v", i, err)
			continue
		}
		_ = le.Release(t.Context())
	}
	if fails > 0 {
		t.Fatalf("%d of 10 acquisitions failed right after their slot moved", fails)
	}
}
