package chaos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/chaos"
	"github.com/jobguard/jobguard/internal/redistest"
)

// Faults of the replicated topologies.
const (
	kindSentinel   = "Sentinel failover (master SIGKILL)"
	kindCluster    = "Cluster master SIGKILL (replica promoted)"
	kindMinority   = "1 of 3 masters SIGSTOP > TTL"
	kindEmptyNode  = "1 of 3 masters SIGKILL+restart empty"
	whyClusterNoAk = "a Cluster failover has no replica ack and can forget the lease"
)

// runSentinel: a master with two replicas under three Sentinels; one
// group of workers acknowledges every acquisition and renewal on a
// replica (WithReplicaAck(1, TTL/5)), the other does not. Each failover
// SIGKILLs the master; the old master is restarted and linked as a
// replica before the next.
func runSentinel(t *testing.T, p profile, seed uint64) []*chaos.Result {
	s := redistest.StartSentinel(t, 2)
	r := newRun(t, p, "sentinel", chaos.Sentinel)
	r.addrs, r.masterName = s.SentinelAddrs(), redistest.SentinelMaster
	ack := &group{name: "ack", suffix: ", replica ack 1", replicaAck: 1, promises: map[string]string{
		kindSentinel: "every acquisition and renewal a replica acknowledged survives the failover: the holder keeps its lease or is told in time",
	}}
	noack := &group{name: "noack", suffix: ", no replica ack", fencingOnly: map[string]string{kindSentinel: whyNoAck}, promises: map[string]string{
		kindSentinel: "a failover without replica ack can forget the latest acquisitions: another owner may get in before the holder is told; fencing refuses the old holder",
	}}
	r.groups = []*group{ack, noack}
	r.startWorkers(ack, p.workers)
	r.startWorkers(noack, p.workers)
	steps := plan(p, seed, r.name, kindSentinel)
	for i, st := range steps {
		if r.over() {
			break
		}
		time.Sleep(st.Gap)
		old := s.Master(t)
		r.inject(st.Kind, 0, func() string { old.Kill(t); return old.Addr() }, func() {
			t.Logf("sentinel: %s promoted", s.WaitFailover(t, old).Addr())
		})
		if i < len(steps)-1 { // the next failover needs the replicas back
			// Linked is enough: WaitSynced's 10s, once, ran out while
			// the restarted master and a reconfigured replica
			// resynchronized on a loaded machine.
			old.Restart(t)
			waitRole(t, old, "slave")
		}
	}
	return r.finish()
}

// runCluster: a Cluster of three masters with a replica each; the master
// of the workers' key is SIGKILLed and its replica promoted. The killed
// node is restarted and rejoins as a replica before the next.
func runCluster(t *testing.T, p profile, seed uint64) []*chaos.Result {
	c := redistest.StartReplicatedCluster(t)
	r := newRun(t, p, "cluster", chaos.Cluster)
	r.addrs = c.Addrs()
	g := &group{name: "g", fencingOnly: map[string]string{kindCluster: whyClusterNoAk}}
	r.groups = []*group{g}
	r.startWorkers(g, p.workers)
	key := r.lockKey(g) // guard's keys hash on {key}: the same slot
	steps := plan(p, seed, r.name, kindCluster)
	for i, st := range steps {
		if r.over() {
			break
		}
		time.Sleep(st.Gap)
		m := c.MasterOf(t, key)
		r.inject(st.Kind, 0, func() string { m.Kill(t); return m.Addr() }, func() {
			t.Logf("cluster: %s promoted", c.WaitFailover(t, key, m).Addr())
		})
		if i < len(steps)-1 {
			m.Restart(t) // nodes.conf in its directory: it rejoins as a replica
			c.WaitHealthy(t)
			c.WaitSynced(t)
		}
	}
	return r.finish()
}

// runQuorum: Redlock over three independent masters; one master is
// stopped for longer than the TTL and resumed (a minority lost and back),
// or SIGKILLed and restarted empty.
func runQuorum(t *testing.T, p profile, seed uint64) []*chaos.Result {
	masters := redistest.StartMasters(t, 3)
	r := newRun(t, p, "redlock", chaos.Quorum)
	for _, m := range masters {
		r.addrs = append(r.addrs, m.Addr())
	}
	g := &group{name: "g", fencingOnly: map[string]string{kindEmptyNode: whyEmptyNode}}
	r.groups = []*group{g}
	r.startWorkers(g, p.workers)
	for i, st := range plan(p, seed, r.name, kindMinority, kindEmptyNode) {
		if r.over() {
			break
		}
		time.Sleep(st.Gap)
		m := masters[i%len(masters)]
		switch st.Kind {
		case kindMinority:
			r.inject(st.Kind, st.Duration, func() string { m.Pause(t); return m.Addr() }, func() { m.Resume(t) })
		case kindEmptyNode:
			r.inject(st.Kind, st.Duration/5, func() string { m.Kill(t); return m.Addr() }, func() { m.Restart(t) })
		}
	}
	return r.finish()
}

// waitRole waits up to 20s until s reports role in INFO replication.
func waitRole(t *testing.T, s *redistest.Server, role string) {
	t.Helper()
	c := s.Client(t, fastOptions)
	var last string
	for range 200 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		info, err := c.Info(ctx, "replication").Result()
		cancel()
		if err == nil && strings.Contains(info, "role:"+role+"\r\n") && strings.Contains(info, "master_link_status:up") {
			return
		}
		last = info
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s does not become a linked %s: %s", s.Addr(), role, last)
}
