package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name under which a Sentinel set monitors its master.
const SentinelMaster = "jobguard"

// Sentinel timing: a master that does not answer for two seconds is down
// for each Sentinel, and a failover that stalls is given up and tried
// again after twice the failover timeout. With one second, a Sentinel on
// a loaded 2-core machine once judged a just-promoted master down and
// failed over a second time.
const (
	sentinelDownAfter       = 2000 // ms
	sentinelFailoverTimeout = 3000 // ms
	sentinels               = 3
	sentinelQuorum          = 2
)

// Sentinel is a Sentinel set started by StartSentinel: a master, its
// replicas and three Sentinels that monitor it as SentinelMaster. Every
// process is a Server, so a test pauses, resumes, kills or restarts any of
// them with the Server's own methods; all are killed when the test ends,
// and the tail of every log is logged if the test failed.
type Sentinel struct {
	nodes     []*Server // the first master, then its replicas
	sentinels []*Server
}

// StartSentinel starts a master, replicas replicas of it (as StartReplica
// does) and three Sentinels (redis-server CONF --sentinel, from the same
// binary, each with its config file in its own t.TempDir(), since a
// Sentinel rewrites it), all on free loopback ports. The Sentinels monitor
// the master with quorum 2, down-after-milliseconds 2000 and
// failover-timeout 3000, so that a killed master's best replica is
// promoted within a few seconds. StartSentinel waits until every Sentinel
// knows the master, every replica and the other two Sentinels, and the
// quorum is reachable (SENTINEL CKQUORUM), and fails the test, with every
// log's tail, if that takes longer than 10s. args are appended to the
// command line of the master and the replicas.
func StartSentinel(t testing.TB, replicas int, args ...string) *Sentinel {
	t.Helper()
	s := &Sentinel{}
	master := Start(t, args...)
	s.nodes = append(s.nodes, master)
	for range replicas {
		s.nodes = append(s.nodes, StartReplica(t, master, args...))
	}
	for range sentinels {
		s.sentinels = append(s.sentinels, startSentinelProcess(t, master))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("redistest: sentinel set logs:\n%s", s.logTails())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := poll(ctx, func() string { return s.notReady(ctx, replicas) }); err != nil {
		t.Fatalf("redistest: sentinel set not ready: %v\n%s", err, s.logTails())
	}
	return s
}

// startSentinelProcess starts one Sentinel that monitors master.
func startSentinelProcess(t testing.TB, master *Server) *Server {
	t.Helper()
	s := newServer(t, nil)
	s.conf, s.sentinel = filepath.Join(s.dir, "sentinel.conf"), true
	conf := fmt.Sprintf(`sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d
sentinel down-after-milliseconds %[1]s %[4]d
sentinel failover-timeout %[1]s %[5]d
sentinel parallel-syncs %[1]s 1
`, SentinelMaster, master.Port(), sentinelQuorum, sentinelDownAfter, sentinelFailoverTimeout)
	if err := os.WriteFile(s.conf, []byte(conf), 0o644); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s.run(t, nil)
	return s
}

// notReady returns why some Sentinel does not see the whole set yet, or "".
func (s *Sentinel) notReady(ctx context.Context, replicas int) string {
	master := s.nodes[0].Addr()
	for _, sn := range s.sentinels {
		var why string
		err := withSentinelClient(sn, func(sc *redis.SentinelClient) error {
			m, err := sc.Master(ctx, SentinelMaster).Result()
			if err != nil {
				return err
			}
			switch addr := net.JoinHostPort(m["ip"], m["port"]); {
			case addr != master:
				why = fmt.Sprintf("master %s, want %s", addr, master)
			case m["flags"] != "master":
				why = "master flags " + m["flags"]
			case m["num-slaves"] != strconv.Itoa(replicas):
				why = fmt.Sprintf("%s replicas, want %d", m["num-slaves"], replicas)
			case m["num-other-sentinels"] != strconv.Itoa(sentinels-1):
				why = fmt.Sprintf("%s other sentinels, want %d", m["num-other-sentinels"], sentinels-1)
			}
			if why != "" {
				return nil
			}
			rs, err := sc.Replicas(ctx, SentinelMaster).Result()
			if err != nil {
				return err
			}
			for _, r := range rs {
				if r["flags"] != "slave" || r["master-link-status"] != "ok" {
					why = fmt.Sprintf("replica %s:%s flags %s, link %s", r["ip"], r["port"], r["flags"], r["master-link-status"])
					return nil
				}
			}
			return sc.CkQuorum(ctx, SentinelMaster).Err()
		})
		if err != nil {
			return fmt.Sprintf("sentinel %s: %v", sn.Addr(), err)
		}
		if why != "" {
			return fmt.Sprintf("sentinel %s: %s", sn.Addr(), why)
		}
	}
	return ""
}

// Nodes returns the master and replicas in the order they were started:
// the first master, then its replicas. Roles change with failovers; Master
// tells the current master.
func (s *Sentinel) Nodes() []*Server { return append([]*Server(nil), s.nodes...) }

// Sentinels returns the three Sentinel processes.
func (s *Sentinel) Sentinels() []*Server { return append([]*Server(nil), s.sentinels...) }

// SentinelAddrs returns the Sentinels' addresses, "127.0.0.1:port" each.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, sn := range s.sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// Client returns a new go-redis failover client (redis.NewFailoverClient)
// for the set, closed in t.Cleanup. Each opts function may modify the
// options before the client is created; MasterName and SentinelAddrs are
// preset.
func (s *Sentinel) Client(t testing.TB, opts ...func(*redis.FailoverOptions)) *redis.Client {
	t.Helper()
	o := &redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: s.SentinelAddrs()}
	for _, opt := range opts {
		opt(o)
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Master returns the node that the running Sentinels report as the master
// (SENTINEL GET-MASTER-ADDR-BY-NAME), once they all agree. It fails the
// test, with every log's tail, if they do not within 10s.
func (s *Sentinel) Master(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var master *Server
	err := poll(ctx, func() string {
		var why string
		master, why = s.agreedMaster(ctx)
		return why
	})
	if err != nil {
		t.Fatalf("redistest: sentinel master: %v\n%s", err, s.logTails())
	}
	return master
}

// agreedMaster returns the node every running Sentinel reports as the
// master, or why there is none.
func (s *Sentinel) agreedMaster(ctx context.Context) (*Server, string) {
	agreed := ""
	for _, sn := range s.sentinels {
		if !sn.Running() {
			continue
		}
		var addr string
		err := withSentinelClient(sn, func(sc *redis.SentinelClient) error {
			hp, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
			if err == nil && len(hp) == 2 {
				addr = net.JoinHostPort(hp[0], hp[1])
			}
			return err
		})
		switch {
		case err != nil:
			return nil, fmt.Sprintf("sentinel %s: %v", sn.Addr(), err)
		case agreed != "" && addr != agreed:
			return nil, fmt.Sprintf("sentinel %s reports master %s, another %s", sn.Addr(), addr, agreed)
		}
		agreed = addr
	}
	if agreed == "" {
		return nil, "no running sentinel"
	}
	for _, n := range s.nodes {
		if n.Addr() == agreed {
			return n, ""
		}
	}
	return nil, fmt.Sprintf("sentinels report master %s, not a node of the set", agreed)
}

// WaitFailover waits until the Sentinels have replaced old as the master
// and the failover has ended: every running Sentinel reports the same
// other node, with no failover in progress and the master not judged down
// (flags "master" alone), and that node runs and reports the master role.
// It returns that node, and fails the test, with every log's tail, if that
// takes longer than 20s. Replicas may still be resyncing with the new
// master when it returns; WaitSynced waits for them.
func (s *Sentinel) WaitFailover(t testing.TB, old *Server) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout)
	defer cancel()
	var promoted *Server
	err := poll(ctx, func() string {
		m, why := s.agreedMaster(ctx)
		switch {
		case why != "":
			return why
		case m == old:
			return "sentinels still report " + old.Addr()
		case !m.Running():
			return "sentinels report " + m.Addr() + ", which is not running"
		}
		if why := s.masterFlags(ctx); why != "" {
			return why
		}
		if role := roleOf(ctx, m); role != "master" {
			return fmt.Sprintf("sentinels report %s, which reports role %q", m.Addr(), role)
		}
		promoted = m
		return ""
	})
	if err != nil {
		t.Fatalf("redistest: failover from %s: %v\n%s", old.Addr(), err, s.logTails())
	}
	return promoted
}

// masterFlags returns which running Sentinel still has a failover in
// progress or judges the master down, or "".
func (s *Sentinel) masterFlags(ctx context.Context) string {
	for _, sn := range s.sentinels {
		if !sn.Running() {
			continue
		}
		var flags string
		err := withSentinelClient(sn, func(sc *redis.SentinelClient) error {
			m, err := sc.Master(ctx, SentinelMaster).Result()
			flags = m["flags"]
			return err
		})
		switch {
		case err != nil:
			return fmt.Sprintf("sentinel %s: %v", sn.Addr(), err)
		case flags != "master":
			return fmt.Sprintf("sentinel %s: master flags %s", sn.Addr(), flags)
		}
	}
	return ""
}

// WaitSynced waits until every running replica is linked to its master and
// has processed everything that master had written when WaitSynced was
// called. After a failover that includes the replicas the Sentinels
// reconfigure to follow the new master, and an old master that was
// restarted and turned into a replica. It fails the test after 10s.
func (s *Sentinel) WaitSynced(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := waitSynced(ctx, s.nodes); err != nil {
		t.Fatalf("redistest: sentinel set replicas not in sync: %v\n%s", err, s.logTails())
	}
}

// logTails returns the tail of every process's log, for failure messages.
func (s *Sentinel) logTails() string {
	var b strings.Builder
	for _, n := range s.nodes {
		fmt.Fprintf(&b, "node %s %s\n", n.Addr(), n.logTail())
	}
	for _, sn := range s.sentinels {
		fmt.Fprintf(&b, "sentinel %s %s\n", sn.Addr(), sn.logTail())
	}
	return b.String()
}

// withSentinelClient runs fn with a fail-fast Sentinel client to s,
// closed afterwards.
func withSentinelClient(s *Server, fn func(*redis.SentinelClient) error) error {
	sc := redis.NewSentinelClient(&redis.Options{
		Addr:         s.Addr(),
		Protocol:     2,
		MaxRetries:   -1,
		PoolSize:     1,
		DialTimeout:  infoTimeout,
		ReadTimeout:  infoTimeout,
		WriteTimeout: infoTimeout,
	})
	defer sc.Close()
	return fn(sc)
}
