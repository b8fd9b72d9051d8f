package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A migrated slot takes its keys and their TTLs to the new master, a
// client follows it, and a key written through ASK while the slot moves is
// on the new master afterwards.
func TestClusterMigrateSlot(t *testing.T) {
	c := StartCluster(t)
	cc := c.Client(t)
	ctx := t.Context()
	const key = "{mig}"
	slot := c.Slot(t, key)
	from := c.MasterOf(t, key)
	var to *Server
	for _, s := range c.Nodes() {
		if s != from {
			to = s
			break
		}
	}
	for i := range 25 { // more than one MIGRATE batch
		if err := cc.Set(ctx, fmt.Sprintf("%s:%d", key, i), i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cc.Set(ctx, key, "no ttl", 0).Err(); err != nil {
		t.Fatal(err)
	}

	m := c.BeginMigration(t, slot, from, to)
	// The source still has the key: it serves it.
	if got, err := cc.Get(ctx, key).Result(); err != nil || got != "no ttl" {
		t.Fatalf("GET during migration = %q, %v", got, err)
	}
	// A new key is created on the target, through ASK.
	if err := cc.Set(ctx, key+":new", "asked", time.Minute).Err(); err != nil {
		t.Fatalf("SET of a new key during migration: %v", err)
	}
	m.MoveKeys(t)
	m.Finish(t)

	if got := c.MasterOf(t, key); got != to {
		t.Fatalf("slot %d served by %s after the migration, want %s", slot, got.Addr(), to.Addr())
	}
	tc := to.Client(t)
	n, err := tc.Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", slot).Int64()
	if err != nil || n != 27 {
		t.Fatalf("target has %d keys of slot %d (%v), want 27", n, slot, err)
	}
	if ttl, err := tc.PTTL(ctx, key+":3").Result(); err != nil || ttl <= 0 || ttl > time.Minute {
		t.Errorf("PTTL of a migrated key = %v, %v; want its TTL kept", ttl, err)
	}
	if ttl, err := tc.PTTL(ctx, key).Result(); err != nil || ttl != -1 {
		t.Errorf("PTTL of a migrated key without TTL = %v, %v; want -1", ttl, err)
	}
	if got, err := cc.Get(ctx, key+":new").Result(); err != nil || got != "asked" {
		t.Errorf("GET of the key set through ASK = %q, %v", got, err)
	}

	// And back, as the chaos suite does.
	c.MigrateSlot(t, slot, to, from)
	if got := c.MasterOf(t, key); got != from {
		t.Fatalf("slot %d served by %s after migrating back, want %s", slot, got.Addr(), from.Addr())
	}
	if got, err := cc.Get(ctx, key+":24").Result(); err != nil || got != "24" {
		t.Errorf("GET after migrating back = %q, %v", got, err)
	}
}

// While a slot migrates, a command naming several keys of it of which the
// source has some but not all gets TRYAGAIN; go-redis retries it a few
// times and then returns it.
func TestClusterMigrationTryAgain(t *testing.T) {
	c := StartCluster(t)
	cc := c.Client(t, func(o *redis.ClusterOptions) { o.MaxRedirects = 0 })
	ctx := t.Context()
	const key = "{try}"
	from := c.MasterOf(t, key)
	to := c.Nodes()[0]
	if to == from {
		to = c.Nodes()[1]
	}
	if err := cc.Set(ctx, key+":a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m := c.BeginMigration(t, c.Slot(t, key), from, to)
	err := cc.MGet(ctx, key+":a", key+":missing").Err()
	if err == nil || !redis.IsTryAgainError(err) {
		t.Errorf("MGET of a present and a missing key during migration: %v, want TRYAGAIN", err)
	}
	m.MoveKeys(t)
	m.Finish(t)
	if err := cc.MGet(context.Background(), key+":a", key+":missing").Err(); err != nil {
		t.Errorf("MGET after the migration: %v", err)
	}
}

// On a Cluster with replicas, SETSLOT NODE goes to the masters alone;
// the replicas learn the new owner through the bus before Finish returns,
// and the cluster is whole afterwards.
func TestReplicatedClusterMigrateSlot(t *testing.T) {
	c := StartReplicatedCluster(t)
	cc := c.Client(t)
	const key = "{rmig}"
	if err := cc.Set(t.Context(), key, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	from := c.MasterOf(t, key)
	to := c.Nodes()[0]
	if to == from {
		to = c.Nodes()[1]
	}
	c.MigrateSlot(t, c.Slot(t, key), from, to)
	c.WaitHealthy(t)
	if got := c.MasterOf(t, key); got != to {
		t.Fatalf("%q served by %s after the migration, want %s", key, got.Addr(), to.Addr())
	}
	c.ReplicaOf(t, key) // fails the test if the new master has no replica
	if got, err := cc.Get(t.Context(), key).Result(); err != nil || got != "v" {
		t.Errorf("GET after the migration = %q, %v", got, err)
	}
}
