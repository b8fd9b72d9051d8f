package guard_test

// Benchmarks of the lock's hot paths. Each starts its own redis-server and
// reports its cost as a ratio to a PING round trip on the same client,
// measured in the same benchmark, so that the figures say how close the
// library comes to the network's floor on whatever machine runs them:
//
//	go test -run '^$' -bench . -benchtime 2s ./guard/
//	go test -run '^$' -bench Renew10k -benchtime 1x ./guard/

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// pingSamples is how many PINGs a baseline takes: about 50ms on loopback.
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

// rtt summarizes a run of sequential PINGs.
type rtt struct {
	mean, p50 time.Duration
}

// pingRTT sends n sequential PINGs on c and returns their mean and median
// round trip.
func pingRTT(b *testing.B, c *redis.Client, n int) rtt {
	b.Helper()
	ctx := context.Background()
	samples := make([]time.Duration, n)
	start := time.Now()
	for i := range samples {
		t := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatalf("PING: %v", err)
		}
		samples[i] = time.Since(t)
	}
	total := time.Since(start)
	slices.Sort(samples)
	return rtt{mean: total / time.Duration(n), p50: percentile(samples, 0.50)}
}

// avg averages two baselines, one taken before the timed part of a
// benchmark and one after, so that drift during the run evens out.
func (r rtt) avg(o rtt) rtt {
	return rtt{mean: (r.mean + o.mean) / 2, p50: (r.p50 + o.p50) / 2}
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

// benchSequential times op, one lock round per iteration, and reports
// x2ping: the time per iteration over two PINGs, the floor for a lock round
// of two requests (acquire and release).
func benchSequential(b *testing.B, op func(ctx context.Context, l *guard.Locker) error) {
	srv := redistest.Start(b)
	l, client := benchLocker(b, srv.Addr())
	// b.Context() can be canceled, as a caller's context usually can; the
	// Locker then runs each request on a goroutine of its own (see call).
	ctx := b.Context()
	// Warm up: load the scripts and open the connection.
	for range 100 {
		if err := op(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
	before := pingRTT(b, client, pingSamples)
	for b.Loop() {
		if err := op(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
	perOp := b.Elapsed() / time.Duration(b.N)
	ping := before.avg(pingRTT(b, client, pingSamples))
	b.ReportMetric(micros(ping.mean), "ping-µs")
	b.ReportMetric(ratio(perOp, 2, ping.mean), "x2ping")
}

// BenchmarkAcquireRelease is one uncontended Acquire and Release on one
// Locker, sequentially. Target: x2ping <= 1.15.
func BenchmarkAcquireRelease(b *testing.B) {
	benchSequential(b, func(ctx context.Context, l *guard.Locker) error {
		le, err := l.Acquire(ctx, "bench")
		if err != nil {
			return err
		}
		return le.Release(ctx)
	})
}

// BenchmarkWithLock is one uncontended WithLock with an empty job.
// Target: x2ping <= 1.15.
func BenchmarkWithLock(b *testing.B) {
	noop := func(context.Context) error { return nil }
	benchSequential(b, func(ctx context.Context, l *guard.Locker) error {
		return l.WithLock(ctx, "bench", noop)
	})
}

// handOffLockers is how many Lockers, each with its own client, the
// hand-off waiters are spread over, standing in for processes of a fleet.
const handOffLockers = 4

// BenchmarkHandOff has N waiters, spread round-robin over 4 Lockers with
// separate clients, loop Acquire (default wait) → Release on one key until
// b.N acquisitions are made in all; the job in between is empty. A hand-off
// is timed from the start of the previous holder's Release call to the
// return of the next holder's Acquire. The next holder may be the goroutine
// that just released (it barges in with a fresh Acquire, as a loop does);
// "self%" says how often that happened and the "other" percentiles cover
// the hand-offs to a different goroutine alone. ns/op is the cycle time
// per acquisition. Targets: p50 <= 4 PINGs, cmds/acq <= 4 at 64 waiters.
func BenchmarkHandOff(b *testing.B) {
	for _, waiters := range []int{8, 64} {
		b.Run("waiters="+strconv.Itoa(waiters), func(b *testing.B) { benchHandOff(b, waiters) })
	}
}

// handOff is the shared state of a hand-off benchmark: the baton passed
// from each holder to the next. Only the holder writes it.
type handOff struct {
	base        time.Time
	releasedAt  atomic.Int64 // ns since base when the last Release started; 0 before the first
	releasedBy  atomic.Int64 // id of the goroutine that called it
	tickets     atomic.Int64 // acquisitions left to make
	acquisition atomic.Int64 // acquisitions made
}

// sample is one hand-off: its latency and whether the releaser re-acquired.
type sample struct {
	d    time.Duration
	self bool
}

func benchHandOff(b *testing.B, waiters int) {
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
		le := mustAcquire(b, ctx, l, key)
		mustRelease(b, le)
	}

	before := pingRTT(b, clients[0], pingSamples)
	cmdsBefore := clientCommands(b, counter)
	st := &handOff{base: time.Now()}
	st.tickets.Store(int64(b.N))
	perWaiter := make([][]sample, waiters)
	var wg sync.WaitGroup
	b.ResetTimer()
	for id := range waiters {
		l := lockers[id%len(lockers)]
		wg.Go(func() { perWaiter[id] = st.loop(b, ctx, l, key, int64(id+1)) })
	}
	wg.Wait()
	b.StopTimer()
	cmds := clientCommands(b, counter) - cmdsBefore
	ping := before.avg(pingRTT(b, clients[0], pingSamples))

	if got := st.acquisition.Load(); got != int64(b.N) {
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
	p50 := percentile(all, 0.50)
	b.ReportMetric(micros(ping.p50), "ping-µs")
	b.ReportMetric(micros(p50), "p50-µs")
	b.ReportMetric(micros(percentile(all, 0.99)), "p99-µs")
	b.ReportMetric(ratio(p50, 1, ping.p50), "p50xping")
	b.ReportMetric(float64(cmds)/float64(b.N), "cmds/acq")
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
		le, err := l.Acquire(ctx, key)
		if err != nil {
			b.Errorf("waiter %d: Acquire: %v", id, err)
			return samples
		}
		now := int64(time.Since(st.base))
		st.acquisition.Add(1)
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
// sends while it is on, with their commands and the time they took.
type pipelineCounter struct {
	on        atomic.Bool
	mu        sync.Mutex
	pipelines int
	cmds      int
	busy      time.Duration // sum of pipeline round trips
	longest   time.Duration
}

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (pc *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		if pc.on.Load() {
			d := time.Since(start)
			pc.mu.Lock()
			pc.pipelines++
			pc.cmds += len(cmds)
			pc.busy += d
			pc.longest = max(pc.longest, d)
			pc.mu.Unlock()
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

// BenchmarkRenew10k holds 10 000 leases on one Locker (TTL 3s, so renewals
// every 1s) for two renewal intervals and reports what keeping them alive
// costs: goroutines the Locker runs, renewal scripts per lease per interval,
// renewal pipelines per interval, the time one renewal round of all 10 000
// takes (in ms and in PINGs), and leases lost (must be 0). Run it with
// -benchtime 1x; each iteration repeats the whole scenario.
func BenchmarkRenew10k(b *testing.B) {
	for range b.N {
		benchRenew10k(b)
	}
}

func benchRenew10k(b *testing.B) {
	const (
		leases   = 10_000
		ttl      = 3 * time.Second
		interval = ttl / 3 // the default renew interval
		window   = 2 * interval
		workers  = 16 // parallel acquisitions and releases
	)
	b.StopTimer()
	srv := redistest.Start(b)
	stats := srv.Client(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: workers + 4})
	counter := &pipelineCounter{}
	client.AddHook(counter)
	defer func() { _ = client.Close() }() // after the Locker's Close, deferred below
	if err := client.Ping(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	goroutinesBefore := runtime.NumGoroutine()
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
		for _, le := range held {
			if le != nil {
				_ = le.Release(context.Background())
			}
		}
		b.FailNow()
	}

	// Hold for two intervals, counting renewals and goroutines.
	evalBefore := evalshaCalls(b, stats)
	counter.on.Store(true)
	holdStart := time.Now()
	maxGoroutines := 0
	for time.Since(holdStart) < window {
		maxGoroutines = max(maxGoroutines, runtime.NumGoroutine()-goroutinesBefore)
		time.Sleep(10 * time.Millisecond)
	}
	counter.on.Store(false)
	held0 := time.Since(holdStart)
	renewals := evalshaCalls(b, stats) - evalBefore
	lost := 0
	for _, le := range held {
		if le.Context().Err() != nil {
			lost++
		}
	}
	b.StopTimer()

	ping := pingRTT(b, client, pingSamples)
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

	intervals := float64(held0) / float64(interval)
	counter.mu.Lock()
	pipelines, cmds, busy, longest := counter.pipelines, counter.cmds, counter.busy, counter.longest
	counter.mu.Unlock()
	round := time.Duration(float64(busy) / intervals) // pipeline time per interval
	b.ReportMetric(float64(maxGoroutines), "goroutines")
	b.ReportMetric(float64(renewals)/leases/intervals, "evalsha/lease/interval")
	b.ReportMetric(float64(pipelines)/intervals, "rtt_per_interval")
	b.ReportMetric(float64(cmds)/math.Max(float64(pipelines), 1), "cmds/pipeline")
	b.ReportMetric(float64(round)/float64(time.Millisecond), "round-ms")
	b.ReportMetric(ratio(round, 1, ping.mean), "roundxping")
	b.ReportMetric(float64(longest)/float64(time.Millisecond), "longest-pipeline-ms")
	b.ReportMetric(float64(acquireTime)/float64(time.Millisecond), "acquire10k-ms")
	b.ReportMetric(micros(ping.mean), "ping-µs")
	b.ReportMetric(float64(lost), "lost")
}
