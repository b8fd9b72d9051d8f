package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// A lock's slot migrated to another master, as redis-cli --cluster
// reshard moves it, with Lockers on go-redis's default ClusterClient: the
// hold moves with its TTL, so the holder keeps its lease (a renewal lands
// on the new master) and is told nothing; a Locker that was waiting for
// the key since before the migration does not get in while the lease is
// held, and is woken by the release rather than by its fallback timer: its
// sharded subscription, which Redis ended when the slot left the old
// master, followed the slot.
func TestClusterMigrationKeepsLeaseAndWakesWaiter(t *testing.T) {
	const ttl = 15 * time.Second // the waiter's fallback timer: the holder's remaining TTL, over 5s
	c := redistest.StartCluster(t)
	tl := newTimeline(t)
	holder := clusterLocker(t, c, nil, guard.WithTTL(ttl), guard.WithObserver(tl.observer("holder")))
	waiter := clusterLocker(t, c, nil, guard.WithTTL(ttl))
	from := c.Nodes()[0]
	to := c.Nodes()[1]
	name, _ := namesOn(t, c, from)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()

	le := mustAcquire(t, ctx, holder, name)
	held := watchLease(t, tl, "holder", le)
	waited := acquireUntil(ctx, tl, "waiter", waiter, name)
	waitShardSubscribed(t, from.Client(t), 5*time.Second, releasedChannel(name))

	migrated := tl.mark("migrate slot of %s from %s to %s", name, from.Addr(), to.Addr())
	c.MigrateSlot(t, c.Slot(t, lockKey(name)), from, to)
	tl.mark("migration done")
	waitShardSubscribed(t, to.Client(t), 10*time.Second, releasedChannel(name))
	tl.mark("waiter subscribed on %s", to.Addr())
	// A renewal that lands after the migration proves the lease on the
	// new master.
	waitRenewed(t, ctx, tl, "holder", time.Now())

	if at, ended := held.endedBy(time.Now()); ended {
		t.Fatalf("holder's lease ended %v after the migration began: %v", at.Sub(migrated), context.Cause(le.Context()))
	}
	select {
	case a := <-waited:
		t.Fatalf("waiter got %s while the holder's lease was live: %v, %v", name, a.le != nil, a.err)
	default:
	}
	released := tl.mark("holder releases %s", name)
	mustRelease(t, le)
	select {
	case a := <-waited:
		if a.err != nil {
			t.Fatalf("waiter: %v", a.err)
		}
		defer mustRelease(t, a.le)
		if d := a.at.Sub(released); d > 4*time.Second {
			t.Errorf("waiter took %s %v after the release: woken by its fallback timer, not the notification", name, d)
		}
		if a.le.Token() <= le.Token() {
			t.Errorf("waiter's token %d not above the holder's %d", a.le.Token(), le.Token())
		}
	case <-ctx.Done():
		t.Fatalf("waiter did not get %s after the release", name)
	}
}
