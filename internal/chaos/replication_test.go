package chaos_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/chaos"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
)

// kindReplCut: the link from the master to its replicas cut while
// holders go on acquiring and renewing on the master, then the master
// SIGKILLed: Sentinel promotes a replica that lacks the leases taken and
// renewed meanwhile.
const kindReplCut = "replication link cut, then Sentinel failover"

// whyReplCut: without replica ack, what the master granted while its
// replicas got nothing is not on the one promoted.
const whyReplCut = "a failover to a replica cut off from the master forgets the leases taken since"

// runSentinelReplication: a master with two replicas under three
// Sentinels, the same two groups as runSentinel (with and without
// WithReplicaAck(1, TTL/5)). Each fault cuts both replicas off the master
// for its duration, then SIGKILLs the master; the old master is restarted
// and linked as a replica before the next.
//
// The cut: each replica is told to replicate through a faultproxy,
// black-holed, in front of the master (REPLICAOF proxy). The replicas stay
// up and answer the Sentinels and clients; they get nothing from the
// master, and the master, whose replication connections closed, sees no
// replica, so WAIT gets no acknowledgement. Starting the replicas through
// proxies for good and black-holing those would be closer to a network
// partition, but a Sentinel re-points a replica that follows another
// address than the master's (+fix-slave-config in its log) at its next
// INFO of the replica once its failover timeout (3s here) has passed, so
// the proxies would not stay on the path. It can do so during a cut too:
// the end of a fault cuts again whatever a Sentinel re-pointed, and logs
// it. A cut of 1.5 to 2.5 TTLs plus the 2s down-after-milliseconds is far
// from what keeps a replica from being promoted (a link down for over ten
// times down-after-milliseconds), so the Sentinels are left at
// redistest's configuration.
func runSentinelReplication(t *testing.T, p profile, seed uint64) []*chaos.Result {
	s := redistest.StartSentinel(t, 2)
	r := newRun(t, p, "sentinel-replication", chaos.Sentinel)
	r.addrs, r.masterName = s.SentinelAddrs(), redistest.SentinelMaster
	ack := &group{name: "ack", suffix: ", replica ack 1", replicaAck: 1, promises: map[string]string{
		kindReplCut: "with the link cut, acquisitions fail with ErrNotReplicated and renewals fail, so a holder is told " +
			"before the promoted replica's copy of its hold can expire; nothing is acquired unacknowledged",
	}}
	noack := &group{name: "noack", suffix: ", no replica ack", fencingOnly: map[string]string{kindReplCut: whyReplCut}, promises: map[string]string{
		kindReplCut: "the promoted replica lacks every lease taken or renewed since the cut: another owner may get in " +
			"before the holder is told; fencing refuses the old holder",
	}}
	r.groups = []*group{ack, noack}
	r.startWorkers(ack, p.workers)
	r.startWorkers(noack, p.workers)
	steps := plan(p, seed, r.name, kindReplCut)
	for i, st := range steps {
		if r.over() {
			break
		}
		time.Sleep(st.Gap)
		old := s.Master(t)
		var replicas []*redistest.Server
		for _, n := range s.Nodes() {
			if n != old {
				replicas = append(replicas, n)
			}
		}
		proxy := faultproxy.New(t, old.Addr())
		proxy.Blackhole(true)
		r.inject(st.Kind, st.Duration, func() string {
			cutReplication(t, old, replicas, proxy)
			return old.Addr()
		}, func() {
			// A Sentinel may have re-pointed a replica to the master
			// meanwhile (see above): cut it again, so that what the
			// master granted since is missing on whichever is promoted.
			if n := cutReplication(t, old, replicas, proxy); n > 0 {
				t.Logf("sentinel-replication: %d replicas re-pointed to %s by a Sentinel during the cut, cut again", n, old.Addr())
			}
			old.Kill(t)
			t.Logf("sentinel-replication: %s promoted", s.WaitFailover(t, old).Addr())
		})
		if i < len(steps)-1 {
			old.Restart(t)
			waitRole(t, old, "slave")
		}
	}
	return r.finish()
}

// cutReplication makes each replica replicate through proxy, black-holed:
// its link to the master is down and stays down. It waits until the
// master has no replica connected, so that nothing it writes from then on
// reaches one, and returns how many replicas followed another master than
// proxy before (all, when the cut begins; a Sentinel's doing afterwards).
func cutReplication(t *testing.T, master *redistest.Server, replicas []*redistest.Server, proxy *faultproxy.Proxy) (repointed int) {
	t.Helper()
	host, port, err := net.SplitHostPort(proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	for _, rep := range replicas {
		rc := rep.Client(t, fastOptions)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && !strings.Contains(info, "master_port:"+port+"\r\n") {
			repointed++
		}
		if err == nil {
			err = rc.Do(ctx, "REPLICAOF", host, port).Err()
		}
		cancel()
		if err != nil {
			t.Fatalf("sentinel-replication: REPLICAOF %s on %s: %v", proxy.Addr(), rep.Addr(), err)
		}
	}
	mc := master.Client(t, fastOptions)
	var info string
	for range 100 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		var err error
		info, err = mc.Info(ctx, "replication").Result()
		cancel()
		if err == nil && strings.Contains(info, "connected_slaves:0\r\n") {
			return repointed
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("sentinel-replication: %s still has replicas after the cut: %s", master.Addr(), info)
	return repointed
}
