package chaos_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/chaos"
	"github.com/jobguard/jobguard/internal/redistest"
)

// Faults of a Cluster resharding: the slot of the workers' key moved to
// another master, as redis-cli --cluster reshard moves it (IMPORTING on
// the target, MIGRATING on the source, MIGRATE of its keys, SETSLOT NODE).
const (
	// kindMigrate: the slot moved at once, as a slot of a few keys is.
	kindMigrate = "Cluster slot migrated to another master"
	// kindMigrating: the slot left migrating for the fault's duration
	// before its keys move, as a slot of many keys is while the others
	// go first. Meanwhile the source answers a script whose keys it has
	// only some of with TRYAGAIN.
	kindMigrating = "Cluster slot migrating > TTL, then moved"
)

// runClusterReshard: a Cluster of three masters (no replicas: nothing
// fails over, so what happens is the migration's doing); the slot of the
// workers' key moves from its master to the next one, back and forth
// among the three, while holders run and waiters queue. A migration moves
// the lock's hash with its TTL, so no kind is one where only fencing
// protects the data.
func runClusterReshard(t *testing.T, p profile, seed uint64) []*chaos.Result {
	c := redistest.StartCluster(t)
	r := newRun(t, p, "cluster-reshard", chaos.Cluster)
	r.addrs = c.Addrs()
	g := &group{name: "g", promises: map[string]string{
		kindMigrate: "a migration moves the lock's keys (one slot, by their hash tag) with their TTLs: " +
			"every hold survives, nobody is told anything, and waiters follow the slot",
		kindMigrating: "while the slot migrates, holders keep their leases (renewals name one key); acquisitions get " +
			"TRYAGAIN and, within their Wait budget, try again until the slot has moved; a release that outlasts its " +
			"request timeout leaves the hold to its TTL",
	}}
	r.groups = []*group{g}
	r.startWorkers(g, p.workers)
	key := r.lockKey(g) // guard's keys hash on {key}: one slot
	slot := c.Slot(t, key)
	masters := c.Nodes()
	next := func(from *redistest.Server) *redistest.Server {
		for i, m := range masters {
			if m == from {
				return masters[(i+1)%len(masters)]
			}
		}
		t.Fatalf("cluster-reshard: %s is not a master", from.Addr())
		return nil
	}
	for _, s := range plan(p, seed, r.name, kindMigrate, kindMigrating) {
		if r.over() {
			break
		}
		time.Sleep(s.Gap)
		from := c.MasterOf(t, key)
		to := next(from)
		target := fmt.Sprintf("slot %d %s -> %s", slot, from.Addr(), to.Addr())
		switch s.Kind {
		case kindMigrate:
			r.inject(s.Kind, 0, func() string { c.MigrateSlot(t, slot, from, to); return target }, nil)
		case kindMigrating:
			var m *redistest.Migration
			r.inject(s.Kind, s.Duration, func() string { m = c.BeginMigration(t, slot, from, to); return target }, func() {
				m.MoveKeys(t)
				m.Finish(t)
			})
		}
	}
	return r.finish()
}
