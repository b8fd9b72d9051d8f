package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// Cluster is a Redis Cluster of three masters, no replicas, started by
// StartCluster. Its nodes are Servers, so a test pauses, resumes or kills
// one with the Server's own methods; all are killed when the test ends.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts three redis-server processes with cluster mode on,
// each on a free loopback port (and a free cluster bus port) in its own
// t.TempDir(), gives each a third of the 16384 slots, joins them with
// CLUSTER MEET and waits until every node reports cluster_state:ok, knows
// all three nodes and sees all slots served. It fails the test if that takes
// longer than 10s. The nodes run with
//
//	--cluster-node-timeout 5000 --cluster-require-full-coverage no <args>
//
// so that a test can pause a master for a few seconds without the cluster
// failing: the node timeout is far longer than such a pause, so no node is
// even suspected (PFAIL), and were one declared failed, the other masters
// would keep serving their slots rather than reject every command with
// CLUSTERDOWN. args override these defaults.
func StartCluster(t testing.TB, args ...string) *Cluster {
	t.Helper()
	nodeArgs := append([]string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", // in the node's own --dir
		"--cluster-node-timeout", "5000",
		"--cluster-require-full-coverage", "no",
	}, args...)
	// The bus port would default to port+10000, which may be taken or
	// beyond 65535; a free port of its own avoids both.
	busPort := func() ([]string, error) {
		p, err := freePort()
		return []string{"--cluster-port", strconv.Itoa(p)}, err
	}
	c := &Cluster{nodes: make([]*Server, 3)}
	for i := range c.nodes {
		c.nodes[i] = start(t, busPort, nodeArgs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := c.join(ctx); err != nil {
		t.Fatalf("redistest: create cluster: %v\n%s", err, c.logTails())
	}
	if err := c.waitReady(ctx); err != nil {
		t.Fatalf("redistest: cluster not ready: %v\n%s", err, c.logTails())
	}
	return c
}

// join assigns each node an equal range of slots and a distinct config
// epoch, as redis-cli --cluster create does, and introduces them.
func (c *Cluster) join(ctx context.Context) error {
	per := clusterSlots / len(c.nodes)
	for i, s := range c.nodes {
		first, last := i*per, (i+1)*per-1
		if i == len(c.nodes)-1 {
			last = clusterSlots - 1
		}
		err := withInfoClient(s, func(rc *redis.Client) error {
			if err := rc.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
				return err
			}
			return rc.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err()
		})
		if err != nil {
			return fmt.Errorf("%s: %w", s.Addr(), err)
		}
	}
	return withInfoClient(c.nodes[0], func(rc *redis.Client) error {
		for _, s := range c.nodes[1:] {
			// MEET assumes the bus on port+10000 unless told.
			err := rc.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", s.Port(), s.busPort()).Err()
			if err != nil {
				return fmt.Errorf("CLUSTER MEET %s: %w", s.Addr(), err)
			}
		}
		return nil
	})
}

// waitReady polls CLUSTER INFO on every node until all agree the cluster is
// whole. cluster_state alone is not enough: without full coverage required
// a node reports ok before it has learned the others' slots.
func (c *Cluster) waitReady(ctx context.Context) error {
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_known_nodes":    strconv.Itoa(len(c.nodes)),
		"cluster_slots_ok":       strconv.Itoa(clusterSlots),
		"cluster_slots_assigned": strconv.Itoa(clusterSlots),
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		last := c.notReady(ctx, want)
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %v: %s", readyTimeout, last)
		case <-tick.C:
		}
	}
}

// notReady returns why some node does not report want yet, or "".
func (c *Cluster) notReady(ctx context.Context, want map[string]string) string {
	for _, s := range c.nodes {
		var info string
		err := withInfoClient(s, func(rc *redis.Client) (err error) {
			info, err = rc.ClusterInfo(ctx).Result()
			return err
		})
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER INFO: %v", s.Addr(), err)
		}
		for field, v := range want {
			if got := infoField(info, field); got != v {
				return fmt.Sprintf("%s: %s:%s, want %s", s.Addr(), field, got, v)
			}
		}
	}
	return ""
}

// Nodes returns the cluster's nodes, all masters.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// Addrs returns the nodes' addresses, "127.0.0.1:port" each.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Client returns a new go-redis ClusterClient seeded with every node,
// closed in t.Cleanup. Each opts function may modify the options before the
// client is created; Addrs is preset.
func (c *Cluster) Client(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs()}
	for _, opt := range opts {
		opt(o)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// MasterOf returns the node that serves key's slot, as the first node that
// answers says (CLUSTER KEYSLOT, then CLUSTER SLOTS). Call it while that
// node is not paused, or it waits for the client's 1s timeout.
func (c *Cluster) MasterOf(t testing.TB, key string) *Server {
	t.Helper()
	ctx := context.Background()
	var lastErr error
	for _, s := range c.nodes {
		var owner int
		err := withInfoClient(s, func(rc *redis.Client) error {
			slot, err := rc.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				return err
			}
			ranges, err := rc.ClusterSlots(ctx).Result()
			if err != nil {
				return err
			}
			for _, r := range ranges {
				if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
					owner, err = portOf(r.Nodes[0].Addr)
					return err
				}
			}
			return fmt.Errorf("slot %d of %q is not served", slot, key)
		})
		if err != nil {
			lastErr = fmt.Errorf("%s: %w", s.Addr(), err)
			continue
		}
		for _, n := range c.nodes {
			if n.Port() == owner {
				return n
			}
		}
		lastErr = fmt.Errorf("%s: slot of %q is served on unknown port %d", s.Addr(), key, owner)
	}
	t.Fatalf("redistest: master of %q: %v", key, lastErr)
	return nil
}

// busPort returns the --cluster-port the node was started with.
func (s *Server) busPort() string {
	port := ""
	for i, a := range s.args[:len(s.args)-1] {
		if a == "--cluster-port" {
			port = s.args[i+1] // the last one wins, as in redis-server
		}
	}
	return port
}

// portOf returns the port of "host:port".
func portOf(addr string) (int, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return 0, fmt.Errorf("address %q has no port", addr)
	}
	return strconv.Atoi(addr[i+1:])
}

// logTails returns the tail of every node's log, for failure messages.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, s := range c.nodes {
		fmt.Fprintf(&b, "node %s %s\n", s.Addr(), s.logTail())
	}
	return b.String()
}

// withInfoClient runs fn with a fail-fast client to s, closed afterwards.
func withInfoClient(s *Server, fn func(*redis.Client) error) error {
	rc := infoClient(s.Addr())
	defer rc.Close()
	return fn(rc)
}
