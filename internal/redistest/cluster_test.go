package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartCluster(t *testing.T) {
	c := StartCluster(t)
	if len(c.Nodes()) != 3 || len(c.Addrs()) != 3 {
		t.Fatalf("%d nodes, %d addrs; want 3", len(c.Nodes()), len(c.Addrs()))
	}
	cc := c.Client(t)
	ctx := t.Context()
	masters := map[string]bool{}
	for i := range 30 {
		key := fmt.Sprintf("k%d", i)
		if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		m := c.MasterOf(t, key)
		masters[m.Addr()] = true
		// The key lives on the node MasterOf names, as go-redis routes it.
		got, err := m.Client(t).Get(ctx, key).Result()
		if err != nil || got != "v" {
			t.Fatalf("GET %s on %s = %q, %v; want v", key, m.Addr(), got, err)
		}
		mk, err := cc.MasterForKey(ctx, key)
		if err != nil || mk.Options().Addr != m.Addr() {
			t.Fatalf("MasterForKey(%s) = %v, %v; MasterOf says %s", key, mk, err, m.Addr())
		}
	}
	if len(masters) != 3 {
		t.Errorf("30 keys landed on %d masters, want all 3", len(masters))
	}
}

// A master paused for 1.5s, as the guard tests do, leaves the others
// serving and the cluster ok, and serves again once resumed.
func TestClusterPauseOneMaster(t *testing.T) {
	c := StartCluster(t)
	cc := c.Client(t, func(o *redis.ClusterOptions) {
		o.MaxRetries = -1
		o.ReadTimeout = 300 * time.Millisecond
	})
	paused := c.Nodes()[0]
	var healthyKey, pausedKey string
	for i := 0; healthyKey == "" || pausedKey == ""; i++ {
		key := fmt.Sprintf("k%d", i)
		if c.MasterOf(t, key) == paused {
			pausedKey = key
		} else {
			healthyKey = key
		}
	}

	paused.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			paused.Resume(t)
		}
	}()
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := cc.Set(ctx, healthyKey, "v", 0).Err()
		cancel()
		if err != nil {
			t.Fatalf("SET on a healthy master while another is paused: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := cc.Set(t.Context(), pausedKey, "v", 0).Err(); err == nil {
		t.Fatal("SET on the paused master succeeded")
	}
	for _, s := range c.Nodes()[1:] {
		info, err := s.Client(t).ClusterInfo(t.Context()).Result()
		if err != nil || infoField(info, "cluster_state") != "ok" {
			t.Fatalf("%s during the pause: cluster_state:%s, %v; want ok", s.Addr(), infoField(info, "cluster_state"), err)
		}
	}

	paused.Resume(t)
	resumed = true
	waitFor(t, func() bool { return cc.Set(t.Context(), pausedKey, "v", 0).Err() == nil })
}

func TestStartReplicatedCluster(t *testing.T) {
	c := StartReplicatedCluster(t)
	if len(c.Nodes()) != 6 || len(c.Addrs()) != 6 {
		t.Fatalf("%d nodes, %d addrs; want 6", len(c.Nodes()), len(c.Addrs()))
	}
	ctx := t.Context()
	for i, s := range c.Nodes() {
		want := "master"
		if i >= 3 {
			want = "slave"
		}
		if role := roleOf(ctx, s); role != want {
			t.Errorf("node %d %s: ROLE %q, want %q", i, s.Addr(), role, want)
		}
	}
	cc := c.Client(t)
	masters := map[*Server]*Server{}
	for i := 0; len(masters) < 3; i++ {
		if i == 1000 {
			t.Fatalf("1000 keys landed on %d masters, want 3", len(masters))
		}
		key := fmt.Sprintf("k%d", i)
		m, r := c.MasterOf(t, key), c.ReplicaOf(t, key)
		if _, seen := masters[m]; seen {
			continue
		}
		masters[m] = r
		if m == r {
			t.Fatalf("%q: master and replica are both %s", key, m.Addr())
		}
		if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		c.WaitSynced(t)
		rc := r.Client(t)
		if err := rc.ReadOnly(ctx).Err(); err != nil {
			t.Fatalf("READONLY: %v", err)
		}
		if got, err := rc.Get(ctx, key).Result(); err != nil || got != "v" {
			t.Fatalf("GET %s on replica %s after WaitSynced = %q, %v; want v", key, r.Addr(), got, err)
		}
	}
}

// A killed master's replica takes its slots with the data it had synced,
// the cluster client follows, and the old master, restarted, comes back as
// a replica of the node that replaced it.
func TestReplicatedClusterFailover(t *testing.T) {
	c := StartReplicatedCluster(t)
	cc := c.Client(t)
	ctx := t.Context()
	const key = "failover-key"
	if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	c.WaitSynced(t)
	old, replica := c.MasterOf(t, key), c.ReplicaOf(t, key)

	old.Kill(t)
	killed := time.Now()
	promoted := c.WaitFailover(t, key, old)
	t.Logf("failover finished %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
	if promoted != replica {
		t.Fatalf("slot moved to %s, want its replica %s", promoted.Addr(), replica.Addr())
	}
	if m := c.MasterOf(t, key); m != promoted {
		t.Fatalf("MasterOf = %s after the failover, want %s", m.Addr(), promoted.Addr())
	}
	// go-redis reloads the slot map on MOVED, or once a minute: not on a
	// refused connection.
	cc.ReloadState(ctx)
	waitFor(t, func() bool { return cc.Get(ctx, key).Val() == "v" })

	old.Restart(t)
	c.WaitHealthy(t)
	if role := roleOf(ctx, old); role != "slave" {
		t.Fatalf("restarted old master: ROLE %q, want slave", role)
	}
	if r := c.ReplicaOf(t, key); r != old {
		t.Fatalf("ReplicaOf = %s, want the restarted %s", r.Addr(), old.Addr())
	}
}

// A master stopped (SIGSTOP) for longer than the node timeout is failed
// over like a dead one, and once resumed it finds its slots taken and
// follows the node that took them.
func TestReplicatedClusterPausedMasterFailsOver(t *testing.T) {
	c := StartReplicatedCluster(t)
	const key = "paused-key"
	old := c.MasterOf(t, key)
	old.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			old.Resume(t)
		}
	}()
	if old.Running() {
		t.Fatal("Running() = true for a paused node")
	}
	promoted := c.WaitFailover(t, key, old)
	old.Resume(t)
	resumed = true
	c.WaitHealthy(t)
	if master, ok := replicaOf(t.Context(), old); !ok || master != promoted.Addr() {
		t.Fatalf("resumed old master replicates %q (%v), want %s", master, ok, promoted.Addr())
	}
}
