package failover_test

// A Cluster failover with go-redis's default client: guard reloads the
// slot map when a request gets no reply.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// As TestClusterFailoverKeepsLeaseAndWakesWaiter, but with go-redis's
// default ClusterClient, as users get it from redis.NewClusterClient:
// go-redis reloads its slot map on MOVED, not on a refused connection, and
// otherwise once it is a minute old (go-redis issue #3979), so without
// guard's reload the holder would go on renewing on the dead master and
// lose the lease that the promoted replica still has.
func TestClusterFailoverDefaultClientKeepsLease(t *testing.T) {
	const ttl = 15 * time.Second
	c := redistest.StartReplicatedCluster(t)
	tl := newTimeline(t)
	holder := clusterLocker(t, c, nil, guard.WithTTL(ttl), guard.WithObserver(tl.observer("holder")))
	rival := clusterLocker(t, c, nil, guard.WithTTL(ttl))
	m := c.Nodes()[0]
	name, _ := namesOn(t, c, m)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()

	le := mustAcquire(t, ctx, holder, name)
	held := watchLease(t, tl, "holder", le)
	if _, err := rival.Acquire(ctx, name, guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("rival before the failover: err = %v, want ErrNotAcquired", err)
	}
	c.WaitSynced(t)

	killed := tl.mark("SIGKILL master %s of %s", m.Addr(), name)
	m.Kill(t)
	promoted := c.WaitFailover(t, lockKey(name), m)
	moved := tl.mark("failover done: %s serves %s", promoted.Addr(), name)
	waitRenewedOrDone(ctx, tl, "holder", moved, held)
	if at, ended := held.endedBy(time.Now()); ended {
		t.Fatalf("holder's lease ended %v after the SIGKILL although the promoted replica had the hold: %v",
			at.Sub(killed), context.Cause(le.Context()))
	}
	released := tl.mark("holder releases %s", name)
	mustRelease(t, le)
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	a := <-acquireUntil(rctx, tl, "rival", rival, name)
	if a.err != nil {
		t.Fatalf("rival, within 5s of the release: %v", a.err)
	}
	defer mustRelease(t, a.le)
	t.Logf("rival acquired %v after the release", a.at.Sub(released))
}

// waitRenewedOrDone returns once a renewal of who after since was
// answered, the lease watched by w ended, or ctx is done.
func waitRenewedOrDone(ctx context.Context, tl *timeline, who string, since time.Time, w *leaseWatch) {
	for {
		tl.mu.Lock()
		for _, e := range tl.events {
			if e.at.After(since) && strings.HasPrefix(e.what, who+": "+renewedAll) {
				tl.mu.Unlock()
				return
			}
		}
		tl.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-w.done:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Finding 2. A waiter subscribed (sharded pub/sub) on a slot whose master
// is demoted by a manual CLUSTER FAILOVER: Redis unsubscribes it from the
// server side (an SUNSUBSCRIBE push, count 0), go-redis passes that on and
// keeps the connection, and guard ignores it, so the release that follows
// is published on the new master to nobody: the waiter is woken only by its
// fallback timer, up to the holder's TTL later (default 30s).

// A manual CLUSTER FAILOVER moves the slot: Redis 7 drops the shard
// channel's subscribers with a server-side sunsubscribe and keeps the
// connection, and go-redis does not resubscribe. guard replaces the slot's
// subscription on the new master, so a release after the failover still
// wakes the waiter at once, not at its fallback timer.
func TestClusterManualFailoverWakesWaiter(t *testing.T) {
	const ttl = 15 * time.Second
	c := redistest.StartReplicatedCluster(t)
	tl := newTimeline(t)
	holder := clusterLocker(t, c, nil, guard.WithTTL(ttl), guard.WithObserver(tl.observer("holder")))
	waiter := clusterLocker(t, c, nil, guard.WithTTL(ttl))
	m := c.Nodes()[0]
	name, _ := namesOn(t, c, m)
	replica := c.ReplicaOf(t, lockKey(name))
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()

	le := mustAcquire(t, ctx, holder, name)
	watchLease(t, tl, "holder", le)
	waited := acquireUntil(ctx, tl, "waiter", waiter, name)
	waitShardSubscribed(t, m.Client(t), 5*time.Second, releasedChannel(name))
	c.WaitSynced(t)

	tl.mark("CLUSTER FAILOVER on %s, replica of %s", replica.Addr(), m.Addr())
	if err := replica.Client(t).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER: %v", err)
	}
	c.WaitFailover(t, lockKey(name), m)
	tl.mark("failover done")
	waitShardSubscribedOn(t, 5*time.Second, releasedChannel(name), replica, m)
	tl.mark("waiter subscribed again in the shard")
	released := tl.mark("holder releases %s", name)
	mustRelease(t, le)
	a := <-waited
	if a.err != nil {
		t.Fatalf("waiter: %v", a.err)
	}
	defer mustRelease(t, a.le)
	if d := a.at.Sub(released); d > 4*time.Second {
		t.Errorf("waiter took %s %v after the release: woken by its fallback timer", name, d)
	}
}

// Finding 3. DESIGN.md, Cluster: "a master failover cancels the leases it
// cannot prove (or keeps them when the promoted replica has them), never
// both owners live". For a hold that never reached the replica, that is
// not so: the rival gets in on the promoted replica before the holder's
// next renewal finds the hold gone.

// waitShardSubscribedOn waits until channel has a sharded subscriber on one of nodes.
func waitShardSubscribedOn(t *testing.T, within time.Duration, channel string, nodes ...*redistest.Server) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, n := range nodes {
			counts, err := n.Client(t).PubSubShardNumSub(t.Context(), channel).Result()
			if err == nil && counts[channel] > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s has no subscriber on any node of its shard", within, channel)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
