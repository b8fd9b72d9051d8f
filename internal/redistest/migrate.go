package redistest

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// migrateBatch is how many keys one MIGRATE moves, as redis-cli --cluster
// reshard's default --cluster-pipeline 10 does.
const migrateBatch = 10

// migrateTimeout is MIGRATE's own timeout, in ms, for one batch.
const migrateTimeout = 5000

// Migration is one hash slot being moved from one master to another, as an
// operator's resharding (redis-cli --cluster reshard) moves it: started by
// BeginMigration, its keys moved by MoveKeys and the slot handed over by
// Finish. Between BeginMigration and Finish the source answers a command
// for a key it no longer has with ASK, and one that names keys of which it
// has some but not all with TRYAGAIN.
type Migration struct {
	c        *Cluster
	slot     int
	from, to *Server
	fromID   string
	toID     string
}

// Slot returns the hash slot of key (CLUSTER KEYSLOT on a running node).
// guard's keys for a lock share the hash tag {key}, so they are all in the
// slot of key.
func (c *Cluster) Slot(t testing.TB, key string) int {
	t.Helper()
	ctx := context.Background()
	for _, s := range c.running() {
		var slot int64
		err := withInfoClient(s, func(rc *redis.Client) (err error) {
			slot, err = rc.ClusterKeySlot(ctx, key).Result()
			return err
		})
		if err == nil {
			return int(slot)
		}
	}
	t.Fatalf("redistest: slot of %q: no running node answers", key)
	return 0
}

// MigrateSlot moves slot, with its keys and their TTLs, from the master
// from to the master to: BeginMigration, MoveKeys and Finish.
func (c *Cluster) MigrateSlot(t testing.TB, slot int, from, to *Server) {
	t.Helper()
	m := c.BeginMigration(t, slot, from, to)
	m.MoveKeys(t)
	m.Finish(t)
}

// BeginMigration marks slot as importing from from on to (CLUSTER SETSLOT
// slot IMPORTING from-id) and then as migrating to to on from (CLUSTER
// SETSLOT slot MIGRATING to-id), in the order redis-cli uses, so that a
// client sent to to by an ASK is served there. from must serve slot. It
// fails the test if either node refuses.
func (c *Cluster) BeginMigration(t testing.TB, slot int, from, to *Server) *Migration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	m := &Migration{c: c, slot: slot, from: from, to: to}
	var err error
	if m.fromID, err = nodeID(ctx, from); err != nil {
		t.Fatalf("redistest: migrate slot %d: %s: %v", slot, from.Addr(), err)
	}
	if m.toID, err = nodeID(ctx, to); err != nil {
		t.Fatalf("redistest: migrate slot %d: %s: %v", slot, to.Addr(), err)
	}
	if err := setSlot(ctx, to, slot, "IMPORTING", m.fromID); err != nil {
		t.Fatalf("redistest: migrate slot %d: %v", slot, err)
	}
	if err := setSlot(ctx, from, slot, "MIGRATING", m.toID); err != nil {
		t.Fatalf("redistest: migrate slot %d: %v", slot, err)
	}
	return m
}

// MoveKeys moves every key of the slot from the source to the target,
// migrateBatch keys per MIGRATE, each batch with its TTLs and atomically
// (the source deletes a batch once the target has it), until the source
// has none left. It fails the test if a MIGRATE fails, or if keys keep
// coming for 10s.
func (m *Migration) MoveKeys(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	err := withInfoClient(m.from, func(rc *redis.Client) error {
		for ctx.Err() == nil {
			keys, err := rc.ClusterGetKeysInSlot(ctx, m.slot, migrateBatch).Result()
			if err != nil {
				return fmt.Errorf("CLUSTER GETKEYSINSLOT %d: %w", m.slot, err)
			}
			if len(keys) == 0 {
				return nil
			}
			args := []any{"MIGRATE", "127.0.0.1", m.to.Port(), "", 0, migrateTimeout, "KEYS"}
			for _, k := range keys {
				args = append(args, k)
			}
			// A key that expires between GETKEYSINSLOT and MIGRATE is
			// skipped (NOKEY); it is gone either way.
			if err := rc.Do(ctx, args...).Err(); err != nil && err.Error() != "NOKEY" {
				return fmt.Errorf("MIGRATE %v to %s: %w", keys, m.to.Addr(), err)
			}
		}
		return ctx.Err()
	})
	if err != nil {
		t.Fatalf("redistest: migrate slot %d from %s: %v", m.slot, m.from.Addr(), err)
	}
}

// Finish assigns the slot to the target on the target itself, then on the
// source, then on every other running master (CLUSTER SETSLOT slot NODE
// to-id), as redis-cli does: the target bumps its config epoch, so the
// replicas learn it through the cluster bus. It waits until every running
// node names the target as the slot's master, and fails the test if that
// takes longer than 10s. Keys the source still has are lost to clients; call
// MoveKeys first.
func (m *Migration) Finish(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	order := []*Server{m.to, m.from}
	for _, s := range m.c.running() {
		if s != m.to && s != m.from && roleOf(ctx, s) == "master" {
			order = append(order, s)
		}
	}
	for _, s := range order {
		if err := setSlot(ctx, s, m.slot, "NODE", m.toID); err != nil {
			t.Fatalf("redistest: migrate slot %d: %v", m.slot, err)
		}
	}
	err := poll(ctx, func() string {
		for _, s := range m.c.running() {
			owner, err := slotMaster(ctx, s, m.slot)
			if err != nil {
				return fmt.Sprintf("%s: %v", s.Addr(), err)
			}
			if owner != m.to.Addr() {
				return fmt.Sprintf("%s says slot %d is served by %s", s.Addr(), m.slot, owner)
			}
		}
		return ""
	})
	if err != nil {
		t.Fatalf("redistest: migrate slot %d to %s: %v\n%s", m.slot, m.to.Addr(), err, m.c.logTails())
	}
}

// setSlot sends CLUSTER SETSLOT slot state id to s.
func setSlot(ctx context.Context, s *Server, slot int, state, id string) error {
	return withInfoClient(s, func(rc *redis.Client) error {
		if err := rc.Do(ctx, "CLUSTER", "SETSLOT", slot, state, id).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER SETSLOT %d %s %s: %w", s.Addr(), slot, state, id, err)
		}
		return nil
	})
}

// slotMaster returns the address of the master that s says serves slot
// (CLUSTER SLOTS).
func slotMaster(ctx context.Context, s *Server, slot int) (addr string, err error) {
	err = withInfoClient(s, func(rc *redis.Client) error {
		ranges, err := rc.ClusterSlots(ctx).Result()
		if err != nil {
			return err
		}
		for _, r := range ranges {
			if int64(r.Start) <= int64(slot) && int64(slot) <= int64(r.End) && len(r.Nodes) > 0 {
				addr = r.Nodes[0].Addr
				return nil
			}
		}
		return fmt.Errorf("slot %d is not served", slot)
	})
	return addr, err
}
