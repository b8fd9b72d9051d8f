package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartSentinel(t *testing.T) {
	s := StartSentinel(t, 2)
	if len(s.Nodes()) != 3 || len(s.Sentinels()) != 3 || len(s.SentinelAddrs()) != 3 {
		t.Fatalf("%d nodes, %d sentinels, %d addrs; want 3 each", len(s.Nodes()), len(s.Sentinels()), len(s.SentinelAddrs()))
	}
	if m := s.Master(t); m != s.Nodes()[0] {
		t.Fatalf("Master = %s, want the first node %s", m.Addr(), s.Nodes()[0].Addr())
	}
	ctx := t.Context()
	for _, sn := range s.Sentinels() {
		if role := roleOf(ctx, sn); role != "sentinel" {
			t.Errorf("%s: ROLE %q, want sentinel", sn.Addr(), role)
		}
	}
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the failover client: %v", err)
	}
	s.WaitSynced(t)
	for _, r := range s.Nodes()[1:] {
		if got, err := r.Client(t).Get(ctx, "k").Result(); err != nil || got != "v" {
			t.Fatalf("GET k on replica %s after WaitSynced = %q, %v; want v", r.Addr(), got, err)
		}
	}
}

// A killed master is replaced by a replica that has its synced data, the
// failover client follows, the other replica follows the new master, and
// the old master, restarted, is turned into a replica too.
func TestSentinelFailover(t *testing.T) {
	s := StartSentinel(t, 2)
	c := s.Client(t)
	ctx := t.Context()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.WaitSynced(t)
	old := s.Master(t)

	old.Kill(t)
	killed := time.Now()
	promoted := s.WaitFailover(t, old)
	t.Logf("failover finished %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
	if promoted == old {
		t.Fatal("WaitFailover returned the killed master")
	}
	waitFor(t, func() bool { return c.Get(ctx, "k").Val() == "v" })
	s.WaitSynced(t)
	t.Logf("other replica in sync with the new master %v after SIGKILL", time.Since(killed).Round(time.Millisecond))

	old.Restart(t)
	restarted := time.Now()
	// Sentinel turns a restarted old master into a replica once it has
	// been up, reporting the master role, for 8s (4 hello periods).
	ctx20, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := poll(ctx20, func() string {
		m, why := s.agreedMaster(ctx20)
		if why != "" {
			return why
		}
		if master, ok := replicaOf(ctx20, old); !ok || master != m.Addr() {
			return "old master not a replica of " + m.Addr() + " yet"
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	s.WaitSynced(t)
	t.Logf("restarted old master replicates the master %v after its restart", time.Since(restarted).Round(time.Millisecond))
	if m := s.Master(t); m != promoted {
		t.Errorf("Master = %s after the restart, want %s: another failover happened", m.Addr(), promoted.Addr())
	}
}

// A Sentinel killed and restarted reads the config it rewrote and is one
// of the quorum again.
func TestSentinelRestartSentinel(t *testing.T) {
	s := StartSentinel(t, 1)
	sn := s.Sentinels()[0]
	sn.Kill(t)
	if sn.Running() {
		t.Fatal("Running() = true for a killed sentinel")
	}
	sn.Restart(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := poll(ctx, func() string {
		var why string
		_ = withSentinelClient(sn, func(sc *redis.SentinelClient) error {
			if err := sc.CkQuorum(ctx, SentinelMaster).Err(); err != nil {
				why = err.Error()
			}
			return nil
		})
		return why
	})
	if err != nil {
		t.Fatalf("restarted sentinel: %v", err)
	}
	if m := s.Master(t); m != s.Nodes()[0] {
		t.Fatalf("Master = %s, want %s", m.Addr(), s.Nodes()[0].Addr())
	}
}
