package guard_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// renewTrip is one request a Cluster node client sent that carried
// renewals: a pipeline, or a single FCALL.
type renewTrip struct {
	at       time.Time
	renewals int    // FCALLs of guard's renew function in it
	first    string // its first command's name
}

// tripCounter is a go-redis hook on every node client of a ClusterClient
// (ClusterOptions' OnNewNode): it records, per node address, each request
// that carried renewals, and counts every other request.
type tripCounter struct {
	mu    sync.Mutex
	trips map[string][]renewTrip // every request, renewals 0 for the others
}

func newTripCounter(cc *redis.ClusterClient) *tripCounter {
	tc := &tripCounter{trips: map[string][]renewTrip{}}
	cc.OnNewNode(func(node *redis.Client) { node.AddHook(tripHook{tc, node.Options().Addr}) })
	return tc
}

func (tc *tripCounter) record(addr string, cmds []redis.Cmder) {
	n := 0
	for _, c := range cmds {
		if isRenewCall(c) {
			n++
		}
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.trips[addr] = append(tc.trips[addr], renewTrip{at: time.Now(), renewals: n, first: cmds[0].FullName()})
}

// between returns, per node, the requests recorded in [from, to).
func (tc *tripCounter) between(from, to time.Time) map[string][]renewTrip {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	out := map[string][]renewTrip{}
	for addr, trips := range tc.trips {
		for _, tr := range trips {
			if !tr.at.Before(from) && tr.at.Before(to) {
				out[addr] = append(out[addr], tr)
			}
		}
	}
	return out
}

// isRenewCall reports an FCALL of guard's renew function (guard_…_renew).
func isRenewCall(c redis.Cmder) bool {
	args := c.Args()
	if len(args) < 2 || !strings.EqualFold(fmt.Sprint(args[0]), "fcall") {
		return false
	}
	return strings.HasSuffix(fmt.Sprint(args[1]), "_renew")
}

type tripHook struct {
	tc   *tripCounter
	addr string
}

func (h tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.tc.record(h.addr, []redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.tc.record(h.addr, cmds)
		return next(ctx, cmds)
	}
}

// fcallsOn returns the FCALLs each node has run (INFO commandstats).
func fcallsOn(t *testing.T, nodes []*redistest.Server) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, n := range nodes {
		info, err := n.Client(t, func(o *redis.Options) { o.Protocol = 2 }).Info(t.Context(), "commandstats").Result()
		if err != nil {
			t.Fatalf("INFO commandstats on %s: %v", n.Addr(), err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:calls="); ok {
				var calls int64
				fmt.Sscan(strings.SplitN(rest, ",", 2)[0], &calls)
				out[n.Addr()] = calls
			}
		}
	}
	return out
}

// 1000 leases of one Locker, on keys spread over the three masters of a
// Cluster and acquired together, are renewed in one pipeline per master per
// renew interval: every round each master gets one request (ProcessHook and
// ProcessPipelineHook on its node client) that renews every lease it serves
// and nothing else, and runs one FCALL per lease (INFO commandstats). No
// lease is lost. "Together" is the heartbeat's batch window, a tenth of the
// interval: holds whose renewals come due further apart than that are
// renewed in batches of their own, each one request per master, so when the
// acquisitions (slowed by the race detector) take longer than the window,
// the test asserts that bound instead of one.
func TestClusterRenewsThousandLeasesOnePipelinePerNode(t *testing.T) {
	const (
		leases   = 1000
		workers  = 10 // more only contend for the 2 cores the race detector slows
		ttl      = 9 * time.Second
		interval = 3 * time.Second // holds due within interval/10 share a batch
		window   = interval / 10
		rounds   = 3
	)
	c := redistest.StartCluster(t)
	cc := c.Client(t)
	trips := newTripCounter(cc)
	l, err := guard.New(cc, guard.WithTTL(ttl), guard.WithRenewInterval(interval))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	names := make([]string, leases)
	perNode := map[string]int{}
	for i := range names {
		names[i] = fmt.Sprintf("renew-%d", i)
		m, err := cc.MasterForKey(ctx, lockKey(names[i]))
		if err != nil {
			t.Fatalf("MasterForKey: %v", err)
		}
		perNode[m.Options().Addr]++
	}
	if len(perNode) != 3 {
		t.Fatalf("leases per master = %v, want a share on each of 3 masters", perNode)
	}
	for addr, n := range perNode {
		if n < leases/6 {
			t.Fatalf("master %s serves %d of %d keys, want at least %d", addr, n, leases, leases/6)
		}
	}

	// Warm up, so that the leases are acquired close together: the
	// library loaded on each master, the workers' connections open. The
	// warm-up's holds are due in an hour: the heartbeat's timer, set for
	// the first of them, must not wake it just before the leases' first
	// round, when a batch would take only the leases whose window had
	// opened by then (it did, once in CI: 12 to 20 leases per master in a
	// second request 0.28s later).
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range 3 {
				le, err := l.Acquire(ctx, fmt.Sprintf("warm-%d-%d", w, i), guard.Wait(0), guard.TTL(time.Hour))
				if err != nil {
					t.Errorf("warm-up: %v", err)
					return
				}
				_ = le.Release(ctx)
			}
		})
	}
	wg.Wait()

	held := make([]*guard.Lease, leases)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := w; i < leases; i += workers {
				le, err := l.Acquire(ctx, names[i], guard.Wait(0))
				if err != nil {
					t.Errorf("Acquire(%q): %v", names[i], err)
					return
				}
				held[i] = le
			}
		})
	}
	wg.Wait()
	spread := time.Since(start) // bounds how far apart the leases' renewals are due
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("acquired %d leases in %v; per master %v", leases, spread, perNode)
	// Round k is due k intervals after each lease's acquisition, and its
	// batch may go up to a window early: measure rounds 1 to 3, from half
	// an interval after the first acquisition to two windows before round
	// 4 could start. The last lease's round 3 must be due well inside.
	from, to := start.Add(interval/2), start.Add((rounds+1)*interval-2*window)
	if margin := to.Sub(start.Add(spread + rounds*interval)); margin < 200*time.Millisecond {
		t.Fatalf("the acquisitions took %v: the last lease's round %d is due %v before the end of the count, want at least 200ms", spread, rounds, margin)
	}
	time.Sleep(time.Until(from))
	before := fcallsOn(t, c.Nodes())
	time.Sleep(time.Until(to))
	after := fcallsOn(t, c.Nodes())
	got := trips.between(from, to)

	// Holds due within the batch window of the first share its pipelines;
	// later ones make another batch, and so another request to each node.
	batches := 1
	if spread > window {
		batches = int((spread+window-1)/window) + 1
	}
	for addr, want := range perNode {
		var sizes []int
		var sent []time.Duration // when each renewal request went, from the first acquisition
		renewed, dials, reloads := 0, 0, 0
		var others []string
		for _, tr := range got[addr] {
			switch {
			case tr.first == "hello" || tr.first == "client":
				dials++ // a new connection's handshake (HELLO, CLIENT SETINFO)
				continue
			case tr.first == "cluster":
				reloads++ // go-redis loading the slot map
				continue
			case tr.renewals == 0:
				others = append(others, tr.first)
				continue
			}
			sizes = append(sizes, tr.renewals)
			sent = append(sent, tr.at.Sub(start).Round(time.Millisecond))
			renewed += tr.renewals
		}
		ran := after[addr] - before[addr]
		t.Logf("master %s: %d leases; %d renewal requests in %d intervals, renewals in each %v, sent at %v; %d connections opened, %d slot map loads, other requests %v; the server ran %d FCALLs",
			addr, want, len(sizes), rounds, sizes, sent, dials, reloads, others, ran)
		if ran != int64(want*rounds) || renewed != want*rounds {
			t.Errorf("master %s: the client sent %d renewals and the server ran %d FCALLs in %d intervals, want %d leases × %d = %d",
				addr, renewed, ran, rounds, want, rounds, want*rounds)
		}
		if len(others) != 0 {
			t.Errorf("master %s: requests other than renewals while the leases were only held: %v", addr, others)
		}
		if len(sizes) < rounds || len(sizes) > rounds*batches {
			t.Errorf("master %s: %d renewal requests in %d intervals, want %d per interval (acquired within %v, batch window %v)",
				addr, len(sizes), rounds, batches, spread, window)
		}
		if batches == 1 && slices.ContainsFunc(sizes, func(n int) bool { return n != want }) {
			t.Errorf("master %s: renewals per request %v, want all %d of its leases in each", addr, sizes, want)
		}
	}
	for i, le := range held {
		if err := le.Context().Err(); err != nil {
			t.Errorf("lease %s ended: %v", names[i], context.Cause(le.Context()))
		}
	}
	for w := range workers {
		wg.Go(func() {
			for i := w; i < leases; i += workers {
				if err := held[i].Release(context.Background()); err != nil {
					t.Errorf("Release(%q): %v", names[i], err)
				}
			}
		})
	}
	wg.Wait()
}
