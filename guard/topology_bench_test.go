package guard_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkTopologyAcquireRelease is one uncontended Acquire and Release of
// a free key on each topology of docs/topologies.md: a
// Sentinel set (a master and one replica) without and with
// WithReplicaAck(1, 1s), and a Cluster of three masters. Each sub-benchmark
// interleaves, op by op, the same operation on New over one standalone
// server, so that both see the same load:
//
//	go test -run '^$' -bench Topology -benchtime 2s -count 3 ./guard/
//
// Per operation it reports each one's time and their ratio, the round
// trips the client sent (requests seen by a hook on the client, or on each
// node client of the Cluster), and the script calls and commands the
// servers ran (INFO commandstats, commands inside scripts included; the
// Sentinel master's, all masters together on the Cluster). Commands that
// Sentinels and replicas send on their own (PING, INFO, REPLCONF) are not
// counted; a Sentinel's hello PUBLISH, once every 2s, is.
func BenchmarkTopologyAcquireRelease(b *testing.B) {
	standalone := redistest.Start(b)
	sc := redis.NewClient(&redis.Options{Addr: standalone.Addr()})
	b.Cleanup(func() { _ = sc.Close() })
	single, singleTrips := topologyLocker(b, sc, sc)

	sentinel := redistest.StartSentinel(b, 1)
	master := sentinel.Master(b)
	cluster := redistest.StartCluster(b)
	cc := cluster.Client(b)
	var clusterTrips roundTrips
	cc.OnNewNode(func(node *redis.Client) { node.AddHook(&clusterTrips) })
	clusterLocker, err := guard.New(cc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = clusterLocker.Close() })

	cases := []struct {
		name    string
		locker  func(b *testing.B) (*guard.Locker, *roundTrips)
		servers []*redistest.Server
	}{
		{"Sentinel", func(b *testing.B) (*guard.Locker, *roundTrips) {
			c := sentinel.Client(b)
			return topologyLocker(b, c, c)
		}, []*redistest.Server{master}},
		{"SentinelReplicaAck", func(b *testing.B) (*guard.Locker, *roundTrips) {
			c := sentinel.Client(b)
			return topologyLocker(b, c, c, guard.WithReplicaAck(1, time.Second))
		}, []*redistest.Server{master}},
		{"Cluster", func(*testing.B) (*guard.Locker, *roundTrips) {
			return clusterLocker, &clusterTrips
		}, cluster.Nodes()},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			l, trips := tc.locker(b)
			benchTopology(b, single, singleTrips, standalone, l, trips, tc.servers)
		})
	}
}

// benchTopology interleaves an uncontended acquire and release on single
// (over standalone) and on l (over servers) and reports both.
func benchTopology(b *testing.B, single *guard.Locker, singleTrips *roundTrips, standalone *redistest.Server,
	l *guard.Locker, trips *roundTrips, servers []*redistest.Server) {
	op := func(l *guard.Locker, key string) time.Duration { return timedAcquireRelease(b, l, key) }
	for i := range 100 { // load the scripts, open the connections
		op(single, "warm-"+strconv.Itoa(i))
		op(l, "warm-"+strconv.Itoa(i))
	}
	time.Sleep(50 * time.Millisecond) // let the requests not waited for land
	beforeSingle, before := serverStats(b, []*redistest.Server{standalone}), serverStats(b, servers)
	tripsSingle, tripsL := singleTrips.n.Load(), trips.n.Load()
	var tSingle, tL time.Duration
	for i := 0; b.Loop(); i++ {
		key := "bench-" + strconv.Itoa(i) // a free key each time
		tSingle += op(single, key)
		tL += op(l, key)
	}
	n := float64(b.N)
	tripsSingle, tripsL = singleTrips.n.Load()-tripsSingle, trips.n.Load()-tripsL
	time.Sleep(50 * time.Millisecond)
	afterSingle, after := serverStats(b, []*redistest.Server{standalone}), serverStats(b, servers)
	b.ReportMetric(micros(tSingle)/n, "new1-µs/op")
	b.ReportMetric(micros(tL)/n, "µs/op")
	b.ReportMetric(float64(tL)/float64(tSingle), "ratio")
	b.ReportMetric(float64(tripsSingle)/n, "new1-trips/op")
	b.ReportMetric(float64(tripsL)/n, "trips/op")
	b.ReportMetric(float64(afterSingle[0]-beforeSingle[0])/n, "new1-cmds/op")
	b.ReportMetric(float64(afterSingle[1]-beforeSingle[1])/n, "new1-scripts/op")
	b.ReportMetric(float64(after[0]-before[0])/n, "cmds/op")
	b.ReportMetric(float64(after[1]-before[1])/n, "scripts/op")
}

// topologyLocker returns a Locker on client, closed when the benchmark
// ends, and the round trips counted by a hook added to hooked.
func topologyLocker(b *testing.B, client redis.UniversalClient, hooked *redis.Client, opts ...guard.Option) (*guard.Locker, *roundTrips) {
	b.Helper()
	trips := &roundTrips{}
	hooked.AddHook(trips)
	l, err := guard.New(client, opts...)
	if err != nil {
		b.Fatalf("guard.New: %v", err)
	}
	b.Cleanup(func() {
		if err := l.Close(); err != nil {
			b.Errorf("Close: %v", err)
		}
	})
	return l, trips
}

// roundTrips is a go-redis hook that counts requests: each command sent
// alone and each pipeline, except a new connection's handshake.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.count(cmd)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 {
			r.count(cmds[0])
		}
		return next(ctx, cmds)
	}
}

func (r *roundTrips) count(first redis.Cmder) {
	if name := first.Name(); name != "hello" && name != "client" {
		r.n.Add(1)
	}
}

// serverStats returns the commands servers ran together (INFO
// commandstats, less INFO itself and what Sentinels and replicas send on
// their own: PING, REPLCONF) and the script calls among them (FCALL,
// EVALSHA, EVAL).
func serverStats(b *testing.B, servers []*redistest.Server) [2]int64 {
	b.Helper()
	var out [2]int64
	for _, s := range servers {
		c := s.Client(b, func(o *redis.Options) { o.Protocol = 2 })
		info, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
			if !ok || name == "info" || name == "ping" || name == "replconf" {
				continue
			}
			calls, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			out[0] += calls
			if name == "fcall" || name == "evalsha" || name == "eval" {
				out[1] += calls
			}
		}
	}
	return out
}
