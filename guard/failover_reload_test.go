package guard_test

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
