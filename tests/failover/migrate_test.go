package failover_test

import (
	"context"
	"errors"
	"strings"
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

// A lock's slot left migrating (IMPORTING and MIGRATING set, its keys not
// moved yet, as while a large slot's other keys move) for longer than the
// TTL: the holder keeps its lease, as renewals name one key, which the
// source still has; an acquisition by another Locker names keys the
// source lacks (the waiters' queue), so Redis answers TRYAGAIN, and the
// acquisition fails with that error, not ErrNotAcquired: an outage, not
// contention. Once the keys have moved, the other Locker gets the key
// after the holder's release.
func TestClusterMigratingSlotKeepsLeaseRefusesAcquire(t *testing.T) {
	const ttl = 3 * time.Second
	c := redistest.StartCluster(t)
	tl := newTimeline(t)
	holder := clusterLocker(t, c, nil, guard.WithTTL(ttl), guard.WithObserver(tl.observer("holder")))
	other := clusterLocker(t, c, nil, guard.WithTTL(ttl))
	from, to := c.Nodes()[0], c.Nodes()[2]
	name, _ := namesOn(t, c, from)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()

	le := mustAcquire(t, ctx, holder, name)
	held := watchLease(t, tl, "holder", le)
	began := tl.mark("slot of %s migrating from %s to %s", name, from.Addr(), to.Addr())
	m := c.BeginMigration(t, c.Slot(t, lockKey(name)), from, to)
	for time.Since(began) < 2*ttl {
		_, err := other.Acquire(ctx, name, guard.Wait(ttl/3))
		tl.mark("other: Acquire %s: %v", name, err)
		switch {
		case err == nil:
			t.Fatalf("other acquired %s while the holder's lease was live", name)
		case errors.Is(err, guard.ErrNotAcquired):
			t.Fatalf("Acquire during the migration: %v; want TRYAGAIN, not contention", err)
		case !strings.Contains(err.Error(), "TRYAGAIN"):
			t.Fatalf("Acquire during the migration: %v; want TRYAGAIN", err)
		}
		time.Sleep(ttl / 10)
	}
	if at, ended := held.endedBy(time.Now()); ended {
		t.Fatalf("holder's lease ended %v into the migration: %v", at.Sub(began), context.Cause(le.Context()))
	}
	m.MoveKeys(t)
	m.Finish(t)
	tl.mark("migration done")
	waitRenewed(t, ctx, tl, "holder", time.Now())
	mustRelease(t, le)
	after := mustAcquire(t, ctx, other, name)
	defer mustRelease(t, after)
	if after.Token() <= le.Token() {
		t.Errorf("other's token %d not above the holder's %d", after.Token(), le.Token())
	}
}

// A Locker that waits for a key whose slot is left migrating (Redis
// answers its attempts TRYAGAIN) rides the migration out within its Wait
// budget, as it would wait out a holder: once the keys have moved and the
// holder releases, it gets the key with one Acquire call, not an error it
// would have to retry itself. A single try (Wait(0)) still gets TRYAGAIN
// at once.
func TestClusterWaitRidesOutMigratingSlot(t *testing.T) {
	const ttl = 3 * time.Second
	c := redistest.StartCluster(t)
	tl := newTimeline(t)
	holder := clusterLocker(t, c, nil, guard.WithTTL(ttl))
	other := clusterLocker(t, c, nil, guard.WithTTL(ttl))
	from, to := c.Nodes()[0], c.Nodes()[1]
	name, _ := namesOn(t, c, from)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()

	le := mustAcquire(t, ctx, holder, name)
	m := c.BeginMigration(t, c.Slot(t, lockKey(name)), from, to)
	if _, err := other.Acquire(ctx, name, guard.Wait(0)); err == nil || errors.Is(err, guard.ErrNotAcquired) || !strings.Contains(err.Error(), "TRYAGAIN") {
		t.Fatalf("a single try during the migration: %v; want TRYAGAIN", err)
	}
	type result struct {
		le  *guard.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		le, err := other.Acquire(ctx, name, guard.Wait(15*time.Second))
		got <- result{le, err}
	}()
	time.Sleep(ttl / 2) // attempts meet TRYAGAIN meanwhile
	m.MoveKeys(t)
	m.Finish(t)
	tl.mark("migration done")
	select {
	case r := <-got:
		t.Fatalf("the waiting Acquire returned while the holder held %s: %v", name, r.err)
	default:
	}
	mustRelease(t, le)
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("the waiting Acquire: %v", r.err)
		}
		defer mustRelease(t, r.le)
		if r.le.Token() <= le.Token() {
			t.Errorf("token %d not above the holder's %d", r.le.Token(), le.Token())
		}
	case <-ctx.Done():
		t.Fatal("the waiting Acquire did not return after the release")
	}
}
