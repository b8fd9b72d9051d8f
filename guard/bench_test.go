package guard_test

// Benchmarks of the lock's hot paths. Each starts its own redis-server and
// reports its cost as a ratio to a PING round trip on the same client,
// measured in the same benchmark, so that the figures say how close the
// library comes to the network's floor on whatever machine runs them:
//
//	go test -run '^$' -bench . -benchtime 2s ./guard/
//	go test -run '^$' -bench Renew -benchtime 1x ./guard/

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// pingSamples is the least number of PINGs a baseline takes.
const pingSamples = 2000

// benchLocker returns a Locker on a client of its own, which it also returns
// for the PING baseline. Both are closed when the benchmark run ends.
func benchLocker(b *testing.B, addr string, opts ...guard.Option) (*guard.Locker, *redis.Client) {
	b.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr})
	l, err := guard.New(client, opts...)
	if err != nil {
		b.Fatalf("guard.New: %v", err)
	}
	b.Cleanup(func() {
		if err := l.Close(); err != nil {
			b.Errorf("Close: %v", err)
		}
		_ = client.Close()
	})
	return l, client
}

// pingTimes sends n sequential PINGs on c and returns their round trips.
func pingTimes(b *testing.B, c *redis.Client, n int) []time.Duration {
	b.Helper()
	ctx := context.Background()
	rtts := make([]time.Duration, n)
	for i := range rtts {
		start := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatalf("PING: %v", err)
		}
		rtts[i] = time.Since(start)
	}
	return rtts
}

// pingTotal sends n sequential PINGs on c and returns their summed round trips.
func pingTotal(b *testing.B, c *redis.Client, n int) time.Duration {
	b.Helper()
	var total time.Duration
	for _, d := range pingTimes(b, c, n) {
		total += d
	}
	return total
}

// percentile returns the nearest-rank p-quantile (0 < p <= 1) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// ratio returns d / (k × unit).
func ratio(d time.Duration, k float64, unit time.Duration) float64 {
	return float64(d) / (k * float64(unit))
}

// pingEvery is how many timed iterations of a sequential benchmark pass
// between two blocks of as many untimed PINGs.
const pingEvery = 64

// benchSequential times op, one lock round per iteration, and reports
// x2ping: the time per iteration over two PINGs, the floor for a lock round
// of two requests (acquire and release). The PINGs are sent on the Locker's
// client in blocks interleaved with the timed iterations, with the timer
// stopped, so that both see the same load on a shared machine.
//
// With latency > 0 every request crosses a faultproxy that delays each
// direction by latency, as a network between client and server would.
func benchSequential(b *testing.B, latency time.Duration, op func(ctx context.Context, l *guard.Locker) error) {
	addr := redistest.Start(b).Addr()
	if latency > 0 {
		proxy := faultproxy.New(b, addr)
		proxy.SetLatency(latency)
		addr = proxy.Addr()
	}
	l, client := benchLocker(b, addr)
	// b.Context() can be canceled, as a caller's context usually can; the
	// Locker then runs each request on a goroutine of its own (see call).
	ctx := b.Context()
	// Warm up: load the scripts and open the connection.
	for range 100 {
		if err := op(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
	var pings int
	var pingTime time.Duration
	for i := 0; b.Loop(); i++ {
		if err := op(ctx, l); err != nil {
			b.Fatal(err)
		}
		if i%pingEvery == pingEvery-1 {
			b.StopTimer()
			pingTime += pingTotal(b, client, pingEvery)
			pings += pingEvery
			b.StartTimer()
		}
	}
	perOp := b.Elapsed() / time.Duration(b.N)
	if pings < pingSamples { // a short run: top the baseline up
		pingTime += pingTotal(b, client, pingSamples)
		pings += pingSamples
	}
	ping := pingTime / time.Duration(pings)
	b.ReportMetric(micros(ping), "ping-µs")
	b.ReportMetric(ratio(perOp, 2, ping), "x2ping")
}

// networks are the links the sequential benchmarks run over: loopback, and
// a faultproxy asked for 100µs each way. Its timers are coarser than that
// (a PING through it takes about 2ms here), so read the reported ping-µs for
// the round trip, not the name.
var networks = []struct {
	name    string
	latency time.Duration
}{{"loopback", 0}, {"proxied", 100 * time.Microsecond}}

// BenchmarkAcquireRelease is one uncontended Acquire and Release on one
// Locker, sequentially. Target: x2ping <= 1.15.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, n := range networks {
		b.Run(n.name, func(b *testing.B) {
			benchSequential(b, n.latency, func(ctx context.Context, l *guard.Locker) error {
				le, err := l.Acquire(ctx, "bench")
				if err != nil {
					return err
				}
				return le.Release(ctx)
			})
		})
	}
}

// BenchmarkWithLock is one uncontended WithLock with an empty job.
// Target: x2ping <= 1.15.
func BenchmarkWithLock(b *testing.B) {
	noop := func(context.Context) error { return nil }
	for _, n := range networks {
		b.Run(n.name, func(b *testing.B) {
			benchSequential(b, n.latency, func(ctx context.Context, l *guard.Locker) error {
				return l.WithLock(ctx, "bench", noop)
			})
		})
	}
}

const (
	// handOffRound is how many acquisitions a hand-off round makes, and
	// handOffRoundPings how many PINGs are timed before each round.
	handOffRound      = 1000
	handOffRoundPings = 200
)

// BenchmarkHandOff has N waiters, spread round-robin over the Lockers, loop Acquire (default wait) → Release on one key until
// b.N acquisitions are made in all; the job in between is empty. A hand-off
// is timed from the start of the previous holder's Release call to the
// return of the next holder's Acquire. The next holder may be the goroutine
// that just released (it barges in with a fresh Acquire, as a loop does);
// "self%" says how often that happened and the "other" percentiles cover
// the hand-offs to a different goroutine alone. ns/op is the cycle time
// per acquisition; p50xping is the p50 over the median PING, timed in
// blocks between rounds of 1000 acquisitions; cmds/acq counts the commands
// clients sent (see clientCommands). Targets: p50xping <= 4 and cmds/acq
// <= 4 at 64 waiters.
//
// The waiters are spread over 1 Locker (one process) or 4 Lockers with
// separate clients (a fleet of four). A release wakes the first waiter of
// each process, so with 4 processes up to 4 retries follow each release.
func BenchmarkHandOff(b *testing.B) {
	for _, lockers := range []int{1, 4} {
		for _, waiters := range []int{8, 64} {
			name := fmt.Sprintf("lockers=%d/waiters=%d", lockers, waiters)
			b.Run(name, func(b *testing.B) { benchHandOff(b, lockers, waiters) })
		}
	}
}

// handOff is the shared state of a hand-off benchmark. releasedAt and
// releasedBy are the baton each holder passes to the next; only the holder
// writes them.
type handOff struct {
	base         time.Time
	releasedAt   atomic.Int64 // ns since base when the last Release started; 0 before the first
	releasedBy   atomic.Int64 // id of the goroutine that called it
	tickets      atomic.Int64 // acquisitions left to take
	acquisitions atomic.Int64 // acquisitions made
	opts         []guard.LockOption
}

// sample is one hand-off: its latency and whether the releaser re-acquired.
type sample struct {
	d    time.Duration
	self bool
}

func benchHandOff(b *testing.B, handOffLockers, waiters int, opts ...guard.LockOption) {
	srv := redistest.Start(b)
	counter := srv.Client(b)
	lockers := make([]*guard.Locker, handOffLockers)
	clients := make([]*redis.Client, handOffLockers)
	for i := range lockers {
		lockers[i], clients[i] = benchLocker(b, srv.Addr())
	}
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	const key = "handoff"
	for _, l := range lockers { // warm up: scripts loaded, connections open
		le := mustAcquire(b, ctx, l, key, opts...)
		mustRelease(b, le)
	}

	// The acquisitions run in rounds with a PING block before each, so
	// that the baseline follows the machine's load through the run.
	var pings []time.Duration
	var cmds int64
	perWaiter := make([][]sample, waiters)
	st := &handOff{base: time.Now(), opts: opts}
	b.ResetTimer()
	for done := 0; done < b.N; done += handOffRound {
		b.StopTimer()
		pings = append(pings, pingTimes(b, clients[0], handOffRoundPings)...)
		cmdsBefore := clientCommands(b, counter)
		st.releasedAt.Store(0) // the round's first acquisition is no hand-off
		st.tickets.Store(int64(min(handOffRound, b.N-done)))
		b.StartTimer()
		var wg sync.WaitGroup
		for id := range waiters {
			l := lockers[id%len(lockers)]
			wg.Go(func() { perWaiter[id] = append(perWaiter[id], st.loop(b, ctx, l, key, int64(id+1))...) })
		}
		wg.Wait()
		b.StopTimer()
		cmds += clientCommands(b, counter) - cmdsBefore
		if b.Failed() {
			b.FailNow()
		}
	}
	if got := st.acquisitions.Load(); got != int64(b.N) {
		b.Fatalf("%d acquisitions, want %d", got, b.N)
	}

	var all, other []time.Duration
	for _, ss := range perWaiter {
		for _, s := range ss {
			all = append(all, s.d)
			if !s.self {
				other = append(other, s.d)
			}
		}
	}
	slices.Sort(all)
	slices.Sort(other)
	slices.Sort(pings)
	p50, ping := percentile(all, 0.50), percentile(pings, 0.50)
	b.ReportMetric(micros(ping), "ping-p50-µs")
	b.ReportMetric(micros(p50), "p50-µs")
	b.ReportMetric(micros(percentile(all, 0.99)), "p99-µs")
	b.ReportMetric(ratio(p50, 1, ping), "p50xping")
	b.ReportMetric(float64(cmds)/float64(b.N), "cmds/acq")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)-1])/float64(time.Millisecond), "max-ms")
		slow := len(all) - sort.Search(len(all), func(i int) bool { return all[i] >= 40*time.Millisecond })
		b.ReportMetric(float64(slow), "over-40ms")
	}
	if len(all) > 0 {
		b.ReportMetric(100*float64(len(all)-len(other))/float64(len(all)), "self%")
	}
	if len(other) > 0 {
		b.ReportMetric(micros(percentile(other, 0.50)), "other-p50-µs")
		b.ReportMetric(micros(percentile(other, 0.99)), "other-p99-µs")
	}
}

// loop is one waiter: it takes a ticket, acquires, records the hand-off
// from the previous holder, and releases, until the tickets run out.
func (st *handOff) loop(b *testing.B, ctx context.Context, l *guard.Locker, key string, id int64) []sample {
	var samples []sample
	for st.tickets.Add(-1) >= 0 {
		le, err := l.Acquire(ctx, key, st.opts...)
		if err != nil {
			b.Errorf("waiter %d: Acquire: %v", id, err)
			return samples
		}
		now := int64(time.Since(st.base))
		st.acquisitions.Add(1)
		// The previous holder stored these before its Release reached the
		// server, so before this Acquire could succeed.
		if prev := st.releasedAt.Load(); prev != 0 {
			samples = append(samples, sample{d: time.Duration(now - prev), self: st.releasedBy.Load() == id})
		}
		st.releasedBy.Store(id)
		st.releasedAt.Store(int64(time.Since(st.base)))
		if err := le.Release(ctx); err != nil {
			b.Errorf("waiter %d: Release: %v", id, err)
			return samples
		}
	}
	return samples
}

// pipelineCounter is a go-redis hook that counts the pipelines a client
// sends while it is on, with their commands and the time they took: summed
// (busy) and as wall-clock time during which at least one was in flight
// (wall), which is what a renewal round costs when pipelines overlap.
type pipelineCounter struct {
	on        atomic.Bool
	mu        sync.Mutex
	pipelines int
	cmds      int
	busy      time.Duration // sum of pipeline round trips
	wall      time.Duration // union of pipeline round trips
	longest   time.Duration
	active    int       // pipelines in flight
	since     time.Time // when active last went from 0 to 1
}

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (pc *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		pc.mu.Lock()
		start := time.Now()
		if pc.active == 0 {
			pc.since = start
		}
		pc.active++
		pc.mu.Unlock()
		err := next(ctx, cmds)
		pc.mu.Lock()
		defer pc.mu.Unlock()
		now := time.Now()
		pc.active--
		if !pc.on.Load() {
			return err
		}
		d := now.Sub(start)
		pc.pipelines++
		pc.cmds += len(cmds)
		pc.busy += d
		pc.longest = max(pc.longest, d)
		if pc.active == 0 {
			pc.wall += now.Sub(pc.since)
		}
		return err
	}
}

// evalshaCalls returns the server's count of EVALSHA calls.
func evalshaCalls(b *testing.B, c *redis.Client) int64 {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var calls int64
	if _, rest, ok := strings.Cut(info, "cmdstat_evalsha:calls="); ok {
		n, _, _ := strings.Cut(rest, ",")
		if calls, err = strconv.ParseInt(n, 10, 64); err != nil {
			b.Fatal(err)
		}
	}
	return calls
}

// guardGoroutines counts the goroutines that are running code of package
// guard: the ones a Locker started, and callers blocked in its methods.
func guardGoroutines() int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "\ngithub.com/jobguard/jobguard/guard.") {
			count++
		}
	}
	return count
}

// forEach runs fn(i) for i in [0, n) on workers goroutines.
func forEach(n, workers int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// BenchmarkRenew holds 10 000 or 50 000 leases on one Locker (TTL 3s, so
// renewals every 1s) for two renewal intervals and reports what keeping
// them alive costs: the goroutines the Locker runs (the most seen at once
// with package guard on their stack; a runtime.NumGoroutine() delta would be
// skewed by goroutines go-redis starts and stops on its own), renewal
// scripts per lease per interval, renewal pipelines per interval, the time
// one renewal round of all leases takes (round-ms: wall-clock time with a
// renewal pipeline in flight; busy-ms: their summed round trips; both per
// interval, also in PINGs), and leases lost (must be 0). The slow case puts
// a faultproxy between Locker and server that delays each direction by 5ms
// once the leases are acquired; renewal pipelines on the wire at once
// overlap their latency. Run it with
// -benchtime 1x; each iteration repeats the whole scenario.
func BenchmarkRenew(b *testing.B) {
	cases := []struct {
		name    string
		leases  int
		latency time.Duration
	}{
		{"leases=10000", 10_000, 0},
		{"leases=50000", 50_000, 0},
		{"leases=10000/latency=5ms", 10_000, 5 * time.Millisecond},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				benchRenew(b, c.leases, c.latency)
			}
		})
	}
}

func benchRenew(b *testing.B, leases int, latency time.Duration) {
	const (
		ttl      = 3 * time.Second
		interval = ttl / 3 // the default renew interval
		window   = 2 * interval
		workers  = 16 // parallel acquisitions and releases
	)
	b.StopTimer()
	srv := redistest.Start(b)
	stats := srv.Client(b)
	addr := srv.Addr()
	var proxy *faultproxy.Proxy
	if latency > 0 {
		proxy = faultproxy.New(b, addr)
		addr = proxy.Addr()
	}
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: workers + 4})
	counter := &pipelineCounter{}
	client.AddHook(counter)
	defer func() { _ = client.Close() }() // after the Locker's Close, deferred below
	if err := client.Ping(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	l, err := guard.New(client, guard.WithTTL(ttl))
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := l.Close(); err != nil {
			b.Errorf("Close: %v", err)
		}
	}()
	ctx := b.Context()

	// Warm up: one short lease renewed once, so the renewal script is in
	// the server's cache before the rounds are counted.
	warm := mustAcquire(b, ctx, l, "warm", guard.TTL(300*time.Millisecond))
	time.Sleep(200 * time.Millisecond)
	mustRelease(b, warm)

	b.StartTimer()
	held := make([]*guard.Lease, leases)
	acquireStart := time.Now()
	forEach(leases, workers, func(i int) {
		le, err := l.Acquire(ctx, fmt.Sprintf("lease-%05d", i))
		if err != nil {
			b.Errorf("Acquire %d: %v", i, err)
			return
		}
		held[i] = le
	})
	acquireTime := time.Since(acquireStart)
	if b.Failed() {
		b.FailNow() // Close, deferred above, releases what was acquired
	}
	if proxy != nil {
		// Slow only from here: the leases were acquired close together, so
		// their renewals come due close together.
		proxy.SetLatency(latency)
	}

	// Hold for two intervals, counting renewals and goroutines. A lease is
	// renewed when its renewal window opens, a tenth of the interval before
	// it is due, so the window sees two or three renewals of each lease
	// depending on where its edges fall.
	evalBefore := evalshaCalls(b, stats)
	counter.on.Store(true)
	holdStart := time.Now()
	maxGoroutines := 0
	for time.Since(holdStart) < window {
		maxGoroutines = max(maxGoroutines, guardGoroutines())
		time.Sleep(10 * time.Millisecond)
	}
	counter.on.Store(false)
	heldFor := time.Since(holdStart)
	renewals := evalshaCalls(b, stats) - evalBefore
	lost := 0
	for _, le := range held {
		if le.Context().Err() != nil {
			lost++
		}
	}
	b.StopTimer()

	ping := pingTotal(b, client, pingSamples) / pingSamples
	var releaseErrs atomic.Int64
	forEach(leases, workers, func(i int) {
		if err := held[i].Release(context.Background()); err != nil {
			releaseErrs.Add(1)
		}
	})
	if n := releaseErrs.Load(); n > 0 {
		b.Errorf("%d releases failed", n)
	}
	if lost > 0 {
		b.Errorf("%d of %d leases lost while held", lost, leases)
	}

	intervals := float64(heldFor) / float64(interval)
	counter.mu.Lock()
	pipelines, cmds, busy, wall, longest := counter.pipelines, counter.cmds, counter.busy, counter.wall, counter.longest
	counter.mu.Unlock()
	round := time.Duration(float64(wall) / intervals)
	b.ReportMetric(float64(maxGoroutines), "goroutines")
	b.ReportMetric(float64(renewals)/float64(leases)/intervals, "evalsha/lease/interval")
	b.ReportMetric(float64(pipelines)/intervals, "rtt_per_interval")
	b.ReportMetric(float64(cmds)/math.Max(float64(pipelines), 1), "cmds/pipeline")
	b.ReportMetric(float64(round)/float64(time.Millisecond), "round-ms")
	b.ReportMetric(ratio(round, 1, ping), "roundxping")
	b.ReportMetric(float64(busy)/intervals/float64(time.Millisecond), "busy-ms")
	b.ReportMetric(float64(longest)/float64(time.Millisecond), "longest-pipeline-ms")
	b.ReportMetric(float64(acquireTime)/float64(time.Millisecond), "acquire-ms")
	b.ReportMetric(micros(ping), "ping-µs")
	b.ReportMetric(float64(lost), "lost")
}

// timedAcquireRelease takes key on l and releases it, and returns how long
// both took.
func timedAcquireRelease(b *testing.B, l *guard.Locker, key string) time.Duration {
	start := time.Now()
	le, err := l.Acquire(b.Context(), key)
	if err != nil {
		b.Fatal(err)
	}
	if err := le.Release(b.Context()); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkReenter is one re-entry through a lease's context and its
// release, on a hold that the context keeps: a write lease in a write hold,
// a read lease in a read hold, and a read lease in a write hold (a
// downgrade that ends while the write lease goes on). A re-entry is the
// process's own business: trips/op (requests seen by a hook on the client)
// must be 0. xping is the time per iteration over one PING's, measured on
// the same client before and after.
func BenchmarkReenter(b *testing.B) {
	cases := []struct {
		name         string
		outer, inner bool // write leases
	}{{"write-in-write", true, true}, {"read-in-read", false, false}, {"read-in-write", true, false}}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			srv := redistest.Start(b)
			client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			l, trips := topologyLocker(b, client, client)
			b.Cleanup(func() { _ = client.Close() })
			acquire := func(ctx context.Context, write bool) (*guard.Lease, error) {
				if write {
					return l.Acquire(ctx, "bench")
				}
				return l.AcquireRead(ctx, "bench")
			}
			outer, err := acquire(b.Context(), c.outer)
			if err != nil {
				b.Fatal(err)
			}
			ctx := outer.Context()
			ping := pingTotal(b, client, pingSamples/2)
			before := trips.n.Load()
			b.ReportAllocs()
			for b.Loop() {
				le, err := acquire(ctx, c.inner)
				if err != nil {
					b.Fatal(err)
				}
				if err := le.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			perOp := b.Elapsed() / time.Duration(b.N)
			sent := trips.n.Load() - before
			ping = (ping + pingTotal(b, client, pingSamples/2)) / pingSamples
			if err := outer.Release(b.Context()); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(sent)/float64(b.N), "trips/op")
			b.ReportMetric(micros(ping), "ping-µs")
			b.ReportMetric(ratio(perOp, 1, ping), "xping")
		})
	}
}
