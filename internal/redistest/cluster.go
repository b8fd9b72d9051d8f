package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// clusterReadyTimeout bounds creating a Cluster: joining its nodes and
// waiting until every node sees every slot covered. Gossip takes a second
// or two on a quiet machine, and several times that while other test
// binaries load both cores (it took over 10s under go test -race -count=3
// of four packages at once).
const clusterReadyTimeout = 30 * time.Second

// failoverTimeout bounds how long WaitFailover waits, on a Cluster or a
// Sentinel set, for a failover to finish and every live node to agree.
const failoverTimeout = 20 * time.Second

// Cluster is a Redis Cluster of three masters started by StartCluster, or
// of three masters with one replica each started by StartReplicatedCluster.
// Its nodes are Servers, so a test pauses, resumes, kills or restarts one
// with the Server's own methods; all are killed when the test ends, and
// the tail of every node's log is logged if the test failed.
type Cluster struct {
	nodes   []*Server // the masters first, then replica i of master i
	masters int       // how many of nodes started as masters
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
	return startCluster(t, 0, append([]string{
		"--cluster-node-timeout", "5000",
		"--cluster-require-full-coverage", "no",
	}, args...))
}

// StartReplicatedCluster starts a Cluster of three masters, each with a
// third of the slots, and one replica of each, six nodes in all, as
// redis-cli --cluster create --cluster-replicas 1 would, but with
// CLUSTER MEET and CLUSTER REPLICATE so that only redis-server is needed.
// It waits until every node is ok, knows all six and sees every slot
// served, and every replica is linked to its master and caught up (see
// WaitHealthy); it fails the test after 10s. The nodes run with
//
//	--cluster-node-timeout 2000 --cluster-require-full-coverage no
//	--cluster-replica-validity-factor 0 --cluster-allow-replica-migration no <args>
//
// so that a killed master's replica takes over within a few seconds (a
// shorter node timeout risks a needless failover when a loaded machine
// delays a node's answers for a second), the
// other masters keep serving meanwhile, a replica may always take over
// however long its link was down, and no replica moves to another master.
// A master paused for longer than the node timeout is failed over too.
// args override these defaults.
func StartReplicatedCluster(t testing.TB, args ...string) *Cluster {
	t.Helper()
	return startCluster(t, 1, append([]string{
		"--cluster-node-timeout", "2000",
		"--cluster-require-full-coverage", "no",
		"--cluster-replica-validity-factor", "0",
		"--cluster-allow-replica-migration", "no",
	}, args...))
}

// startCluster starts three masters and replicas replicas of each with
// args after the cluster-mode ones, and joins them.
func startCluster(t testing.TB, replicas int, args []string) *Cluster {
	t.Helper()
	nodeArgs := append([]string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", // in the node's own --dir
	}, args...)
	// The bus port would default to port+10000, which may be taken or
	// beyond 65535; a free port of its own avoids both.
	busPort := func() ([]string, error) {
		p, err := freePort()
		return []string{"--cluster-port", strconv.Itoa(p)}, err
	}
	const masters = 3
	c := &Cluster{nodes: make([]*Server, masters*(1+replicas)), masters: masters}
	for i := range c.nodes {
		c.nodes[i] = start(t, busPort, nodeArgs)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("redistest: cluster logs:\n%s", c.logTails())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	if err := c.join(ctx); err != nil {
		t.Fatalf("redistest: create cluster: %v\n%s", err, c.logTails())
	}
	if err := c.waitHealthy(ctx); err != nil {
		t.Fatalf("redistest: cluster not ready: %v\n%s", err, c.logTails())
	}
	return c
}

// join assigns each master an equal range of slots and a distinct config
// epoch, as redis-cli --cluster create does, introduces every node to the
// first, and makes each replica replicate its master.
func (c *Cluster) join(ctx context.Context) error {
	per := clusterSlots / c.masters
	for i, s := range c.nodes[:c.masters] {
		first, last := i*per, (i+1)*per-1
		if i == c.masters-1 {
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
	err := withInfoClient(c.nodes[0], func(rc *redis.Client) error {
		for _, s := range c.nodes[1:] {
			// MEET assumes the bus on port+10000 unless told.
			err := rc.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", s.Port(), s.busPort()).Err()
			if err != nil {
				return fmt.Errorf("CLUSTER MEET %s: %w", s.Addr(), err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, r := range c.nodes[c.masters:] {
		if err := replicate(ctx, r, c.nodes[i%c.masters]); err != nil {
			return fmt.Errorf("replica %s of %s: %w", r.Addr(), c.nodes[i%c.masters].Addr(), err)
		}
	}
	return nil
}

// replicate makes r a replica of master once r has learned of master
// through the cluster bus: CLUSTER REPLICATE refuses an unknown node.
func replicate(ctx context.Context, r, master *Server) error {
	id, err := nodeID(ctx, master)
	if err != nil {
		return err
	}
	return withInfoClient(r, func(rc *redis.Client) error {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			err := rc.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
			if err == nil {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("CLUSTER REPLICATE %s: %w", id, err)
			case <-tick.C:
			}
		}
	})
}

// nodeID returns the cluster node id of s (CLUSTER MYID).
func nodeID(ctx context.Context, s *Server) (id string, err error) {
	err = withInfoClient(s, func(rc *redis.Client) error {
		id, err = rc.ClusterMyID(ctx).Result()
		return err
	})
	return id, err
}

// WaitHealthy waits until every node of the cluster runs and agrees that
// the cluster is whole: each reports cluster_state:ok, knows every node and
// sees every slot served by a master that nobody suspects, no node flags
// another as failing, and every replica is linked to its master and has
// processed everything its master had written when WaitHealthy was called.
// Call it after restarting a node, for example: a master that was failed
// over comes back as a replica of the node that took its slots. It fails
// the test, with the tail of every node's log, after 10s.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	for _, s := range c.nodes {
		if !s.Running() {
			t.Fatalf("redistest: cluster node %s is not running (killed or paused)", s.Addr())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := c.waitHealthy(ctx); err != nil {
		t.Fatalf("redistest: cluster not healthy: %v\n%s", err, c.logTails())
	}
}

// waitHealthy polls every node until all agree the cluster is whole, then
// waits until the replicas have caught up. cluster_state alone is not
// enough: without full coverage required a node reports ok before it has
// learned the others' slots.
func (c *Cluster) waitHealthy(ctx context.Context) error {
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_known_nodes":    strconv.Itoa(len(c.nodes)),
		"cluster_size":           strconv.Itoa(c.masters),
		"cluster_slots_ok":       strconv.Itoa(clusterSlots),
		"cluster_slots_assigned": strconv.Itoa(clusterSlots),
	}
	err := poll(ctx, func() string {
		if why := c.notReady(ctx, c.nodes, want); why != "" {
			return why
		}
		return c.notWhole(ctx)
	})
	if err != nil {
		return err
	}
	return waitSynced(ctx, c.nodes)
}

// notReady returns why some node of nodes does not report want in CLUSTER
// INFO yet, or "".
func (c *Cluster) notReady(ctx context.Context, nodes []*Server, want map[string]string) string {
	for _, s := range nodes {
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

// notWhole returns why some node's CLUSTER NODES does not show the whole
// cluster yet: a node flagged as failing (fail, fail? or noaddr) or still
// in handshake, fewer masters with slots than started, or a replica whose
// master it does not know. It returns "" when every node shows it whole.
func (c *Cluster) notWhole(ctx context.Context) string {
	replicas := len(c.nodes) - c.masters
	for _, s := range c.nodes {
		var nodes string
		err := withInfoClient(s, func(rc *redis.Client) (err error) {
			nodes, err = rc.ClusterNodes(ctx).Result()
			return err
		})
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER NODES: %v", s.Addr(), err)
		}
		masters, linked := 0, 0
		for line := range strings.SplitSeq(strings.TrimSpace(nodes), "\n") {
			// id addr flags master ping-sent pong-recv epoch link slot...
			f := strings.Fields(line)
			if len(f) < 8 {
				continue
			}
			for flag := range strings.SplitSeq(f[2], ",") {
				switch flag {
				case "fail", "fail?", "handshake", "noaddr":
					return fmt.Sprintf("%s sees %s as %s", s.Addr(), f[1], f[2])
				case "master":
					if len(f) > 8 {
						masters++
					}
				case "slave":
					if f[3] != "-" {
						linked++
					}
				}
			}
		}
		if masters != c.masters || linked != replicas {
			return fmt.Sprintf("%s sees %d masters with slots and %d replicas, want %d and %d", s.Addr(), masters, linked, c.masters, replicas)
		}
	}
	return ""
}

// WaitSynced waits until every running replica is linked to its master and
// has processed everything that master had written when WaitSynced was
// called: a write acknowledged before the call is then on the replicas,
// so a failover keeps it. It fails the test after 10s.
func (c *Cluster) WaitSynced(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := waitSynced(ctx, c.nodes); err != nil {
		t.Fatalf("redistest: cluster replicas not in sync: %v\n%s", err, c.logTails())
	}
}

// WaitFailover waits until the slot of key has moved from old to another
// node, after old was killed, paused for longer than the node timeout, or
// demoted by CLUSTER FAILOVER, and the failover has finished as every
// running node sees it: each reports cluster_state:ok with every slot
// served by a master nobody suspects, and names the same node as the
// slot's master, which itself reports the master role. It returns that
// node, and fails the test, with the tail of every node's log, if that
// takes longer than 20s.
func (c *Cluster) WaitFailover(t testing.TB, key string, old *Server) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout)
	defer cancel()
	want := map[string]string{
		"cluster_state":      "ok",
		"cluster_slots_ok":   strconv.Itoa(clusterSlots),
		"cluster_slots_fail": "0",
	}
	var promoted *Server
	err := poll(ctx, func() string {
		live := c.running()
		if why := c.notReady(ctx, live, want); why != "" {
			return why
		}
		owner := ""
		for _, s := range live {
			addr, err := slotOwner(ctx, s, key)
			switch {
			case err != nil:
				return fmt.Sprintf("%s: %v", s.Addr(), err)
			case addr == old.Addr():
				return fmt.Sprintf("%s: %q still served by %s", s.Addr(), key, addr)
			case owner != "" && addr != owner:
				return fmt.Sprintf("%s: %q served by %s, another node says %s", s.Addr(), key, addr, owner)
			}
			owner = addr
		}
		promoted = c.node(owner)
		if promoted == nil || !promoted.Running() {
			return fmt.Sprintf("%q served by %s, not a running node", key, owner)
		}
		if role := roleOf(ctx, promoted); role != "master" {
			return fmt.Sprintf("%s serves %q but reports role %q", owner, key, role)
		}
		return ""
	})
	if err != nil {
		t.Fatalf("redistest: failover of %q from %s: %v\n%s", key, old.Addr(), err, c.logTails())
	}
	return promoted
}

// running returns the nodes whose process runs and is not paused.
func (c *Cluster) running() []*Server {
	var live []*Server
	for _, s := range c.nodes {
		if s.Running() {
			live = append(live, s)
		}
	}
	return live
}

// node returns the node listening on addr, or nil.
func (c *Cluster) node(addr string) *Server {
	for _, s := range c.nodes {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// Nodes returns the cluster's nodes in the order they were started: the
// three masters, then (StartReplicatedCluster) the replica of each master
// in the same order. Roles change with failovers; MasterOf and ReplicaOf
// tell the current ones.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// Addrs returns the nodes' addresses, "127.0.0.1:port" each, in the order
// of Nodes.
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

// MasterOf returns the node that serves key's slot, as the first running
// node that answers says (CLUSTER KEYSLOT, then CLUSTER SLOTS). After a
// failover, call WaitFailover first, so that every node knows.
func (c *Cluster) MasterOf(t testing.TB, key string) *Server {
	t.Helper()
	ctx := context.Background()
	lastErr := errors.New("no running node")
	for _, s := range c.running() {
		addr, err := slotOwner(ctx, s, key)
		if err != nil {
			lastErr = fmt.Errorf("%s: %w", s.Addr(), err)
			continue
		}
		if n := c.node(addr); n != nil {
			return n
		}
		lastErr = fmt.Errorf("%s: slot of %q is served by unknown node %s", s.Addr(), key, addr)
	}
	t.Fatalf("redistest: master of %q: %v", key, lastErr)
	return nil
}

// ReplicaOf returns a running replica of the node that serves key's slot
// (MasterOf): a node whose ROLE names that master. It fails the test if
// there is none.
func (c *Cluster) ReplicaOf(t testing.TB, key string) *Server {
	t.Helper()
	m := c.MasterOf(t, key)
	ctx := context.Background()
	for _, s := range c.running() {
		if master, ok := replicaOf(ctx, s); ok && master == m.Addr() {
			return s
		}
	}
	t.Fatalf("redistest: master %s of %q has no running replica", m.Addr(), key)
	return nil
}

// replicaOf returns the address of the master s replicates, as ROLE says,
// and false if s is not a replica or does not answer.
func replicaOf(ctx context.Context, s *Server) (master string, ok bool) {
	_ = withInfoClient(s, func(rc *redis.Client) error {
		reply, err := rc.Do(ctx, "ROLE").Slice()
		if err != nil || len(reply) < 3 || reply[0] != "slave" {
			return err
		}
		host, _ := reply[1].(string)
		port, _ := reply[2].(int64)
		master, ok = net.JoinHostPort(host, strconv.FormatInt(port, 10)), true
		return nil
	})
	return master, ok
}

// slotNodes returns the nodes that CLUSTER SLOTS lists for key's slot, its
// master first.
func slotNodes(ctx context.Context, rc *redis.Client, key string) ([]redis.ClusterNode, error) {
	slot, err := rc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	ranges, err := rc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			return r.Nodes, nil
		}
	}
	return nil, fmt.Errorf("slot %d of %q is not served", slot, key)
}

// slotOwner returns the address of the master that s says serves key.
func slotOwner(ctx context.Context, s *Server, key string) (addr string, err error) {
	err = withInfoClient(s, func(rc *redis.Client) error {
		nodes, err := slotNodes(ctx, rc, key)
		if err == nil {
			addr = nodes[0].Addr
		}
		return err
	})
	return addr, err
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
