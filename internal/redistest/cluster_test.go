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
