package soak

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
)

// The defaults keep go test ./... short; make chaos runs
//
//	go test -race -run '^TestSoak$' -timeout 10m ./internal/soak/ -soak.leases 10000 -soak.duration 60s -soak.out soak.md
var (
	leasesFlag   = flag.Int("soak.leases", 1000, "leases the soak holds at once")
	durationFlag = flag.Duration("soak.duration", cycle, "how long the soak applies faults; at least one fault cycle ("+cycle.String()+")")
	outFlag      = flag.String("soak.out", "", "file to write the soak's Markdown section to")
	maxLateFlag  = flag.Duration("soak.maxlate", time.Second, "how long a lease's context may stay alive after its hold is gone from Redis (a process starved of CPU runs the heartbeat late) before the soak fails")
)

// The lease schedule. Every fault below is sized against it.
const (
	ttl            = 4 * time.Second
	renewInterval  = time.Second
	requestTimeout = 800 * time.Millisecond // above the slowest round trip the latency phase makes (2 × 300ms)
	stopGrace      = 400 * time.Millisecond
	poolSize       = 32
)

// cycle is the length of one round of faults; a soak runs whole cycles.
const cycle = 12 * time.Second

// step is one scheduled change of the link.
type step struct {
	at    time.Duration
	what  string
	apply func(p *faultproxy.Proxy)
}

func latency(d time.Duration) func(*faultproxy.Proxy) {
	return func(p *faultproxy.Proxy) { p.SetLatency(d) }
}

func blackhole(on bool) func(*faultproxy.Proxy) {
	return func(p *faultproxy.Proxy) { p.Blackhole(on) }
}

func cutAll(p *faultproxy.Proxy) { p.CutAll() }

// schedule is the faults of a soak of d: whole cycles, each with a latency
// ramp, connection cuts, a partition longer than the renew interval but
// shorter than the TTL (leases should survive it), and one longer than the
// TTL (every lease is lost, and must be reported).
func schedule(d time.Duration) []step {
	short, long := 3*renewInterval/2, ttl+time.Second
	var steps []step
	for c := time.Duration(0); c+cycle <= d; c += cycle {
		at := func(s float64) time.Duration { return c + time.Duration(s*float64(time.Second)) }
		steps = append(steps,
			step{at(0.5), "latency 50ms each way", latency(50 * time.Millisecond)},
			step{at(1.0), "latency 150ms each way", latency(150 * time.Millisecond)},
			step{at(1.5), "latency 300ms each way", latency(300 * time.Millisecond)},
			step{at(2.5), "latency off", latency(0)},
			step{at(3.0), "CutAll: every connection reset", cutAll},
			step{at(3.5), fmt.Sprintf("blackhole on for %v (> renew interval %v, < TTL %v)", short, renewInterval, ttl), blackhole(true)},
			step{at(3.5) + short, "blackhole off", blackhole(false)},
			step{at(5.5), "CutAll: every connection reset", cutAll},
			step{at(6.0), fmt.Sprintf("blackhole on for %v (> TTL %v)", long, ttl), blackhole(true)},
			step{at(6.0) + long, "blackhole off", blackhole(false)},
		)
	}
	return steps
}

// slots are the leases the soak keeps: one per key, re-acquired when lost.
type slots struct {
	mu    sync.Mutex
	keys  []string
	lease []*guard.Lease // nil while the key waits to be re-acquired
	ended []int64        // fencing tokens of the leases whose context ended during the soak
	endAt sync.Map       // fencing token -> time.Time its lease's context ended
	gotAt sync.Map       // fencing token -> time.Time Acquire returned its lease
}

// watch records when le's context ends.
func (s *slots) watch(le *guard.Lease) {
	tok := le.Token()
	s.gotAt.Store(tok, time.Now())
	context.AfterFunc(le.Context(), func() { s.endAt.Store(tok, time.Now()) })
}

// endedAt returns when the context of the lease with token ended, if it has.
func (s *slots) endedAt(token int64) (time.Time, bool) {
	v, ok := s.endAt.Load(token)
	if !ok {
		return time.Time{}, false
	}
	return v.(time.Time), true
}

// sweep moves the leases whose context is done to ended; a lease ends
// during the soak only by loss, so its cause must say so.
func (s *slots) sweep() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for i, le := range s.lease {
		if le != nil && le.Context().Err() != nil {
			if err := CheckEnded(le); err != nil {
				errs = append(errs, err)
			}
			s.ended = append(s.ended, le.Token())
			s.lease[i] = nil
		}
	}
	return errs
}

// empty returns the indexes of the keys without a lease.
func (s *slots) empty() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var idx []int
	for i, le := range s.lease {
		if le == nil {
			idx = append(idx, i)
		}
	}
	return idx
}

func (s *slots) set(i int, le *guard.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lease[i] = le
}

// current returns the current leases.
func (s *slots) current() []*guard.Lease {
	_, les := s.live()
	return les
}

// live returns the current leases with their indexes.
func (s *slots) live() (idx []int, les []*guard.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, le := range s.lease {
		if le != nil {
			idx, les = append(idx, i), append(les, le)
		}
	}
	return idx, les
}

// fill acquires the keys without a lease, with workers at once, each try
// bounded. A key still held (by a lost hold that has not expired in Redis)
// waits for the next round; a transport error ends the round, since the
// link is down. It returns how many it acquired and the errors that are
// not contention or the link.
func fill(ctx context.Context, l *guard.Locker, s *slots, workers int) (int, []error) {
	idx := s.empty()
	if len(idx) == 0 {
		return 0, nil
	}
	var (
		next     atomic.Int64
		acquired atomic.Int64
		down     atomic.Bool
		mu       sync.Mutex
		errs     []error
		wg       sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for !down.Load() && ctx.Err() == nil {
				n := int(next.Add(1)) - 1
				if n >= len(idx) {
					return
				}
				i := idx[n]
				actx, cancel := context.WithTimeout(ctx, time.Second)
				le, err := l.Acquire(actx, s.keys[i], guard.Wait(0))
				cancel()
				switch {
				case err == nil:
					s.watch(le)
					s.set(i, le)
					acquired.Add(1)
				case errors.Is(err, guard.ErrNotAcquired):
				case errors.Is(err, guard.ErrInvalid), errors.Is(err, guard.ErrWrongType), errors.Is(err, guard.ErrPermitsDiffer):
					mu.Lock()
					errs = append(errs, fmt.Errorf("acquire %q: %w", s.keys[i], err))
					mu.Unlock()
				default:
					down.Store(true) // the link: try again next round
				}
			}
		})
	}
	wg.Wait()
	return int(acquired.Load()), errs
}

// check reads every live lease's key in Redis over a direct connection, then
// looks at the lease's context: a context still alive after the read means
// the lease was valid at the read, so Redis must show the hold with the
// lease's token. A lease found gone while its context was alive was told
// late, or never: check then watches its context for up to a TTL and sorts
// it into late (ended with an ErrLeaseLost cause, lateness measured from
// the read) or unreported.
func check(ctx context.Context, inspector *guard.Locker, s *slots, workers int) (result checkResult, errs []error) {
	_, les := s.live()
	type goneLease struct {
		le   *guard.Lease
		read time.Time
	}
	var (
		next atomic.Int64
		mu   sync.Mutex
		gone []goneLease
		wg   sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) < 20 {
			errs = append(errs, err)
		}
	}
	for range workers {
		wg.Go(func() {
			for {
				n := int(next.Add(1)) - 1
				if n >= len(les) || ctx.Err() != nil {
					return
				}
				le := les[n]
				st, err := inspector.Inspect(ctx, le.Key())
				read := time.Now()
				if err != nil && ctx.Err() != nil {
					return // the soak ended during the check
				}
				if err != nil {
					fail(fmt.Errorf("inspect %q: %w", le.Key(), err))
					continue
				}
				if le.Context().Err() != nil {
					continue // ended: the sweep checks how
				}
				held := false
				for _, h := range st.Holders {
					held = held || (h.Token == le.Token() && h.Left > 0 && h.Writes == 1)
				}
				if !held {
					mu.Lock()
					gone = append(gone, goneLease{le, read})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	result.done = ctx.Err() == nil
	if len(gone) == 0 {
		return result, errs
	}
	// Watch the contexts of the leases gone while alive.
	ended := make([]time.Duration, len(gone))
	deadline := time.Now().Add(ttl)
	for left := len(gone); left > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		for i, g := range gone {
			if at, ok := s.endedAt(g.le.Token()); ok && ended[i] == 0 {
				ended[i] = max(at.Sub(g.read), time.Nanosecond)
				left--
			}
		}
	}
	for i, g := range gone {
		switch cause := context.Cause(g.le.Context()); {
		case ended[i] == 0:
			result.unreported++
			errs = append(errs, fmt.Errorf("lease %q token %d: gone in Redis at %s, context still alive a TTL later",
				g.le.Key(), g.le.Token(), g.read.Format("15:04:05.000")))
		case !errors.Is(cause, guard.ErrLeaseLost):
			result.unreported++
			errs = append(errs, fmt.Errorf("lease %q token %d: gone in Redis, context ended with %v", g.le.Key(), g.le.Token(), cause))
		default:
			result.late++
			result.worstLate = max(result.worstLate, ended[i])
		}
	}
	if result.late > 0 {
		got, _ := s.gotAt.Load(gone[0].le.Token())
		result.first = fmt.Sprintf("%q token %d acquired at %s, gone in Redis at %s, then %v", gone[0].le.Key(), gone[0].le.Token(),
			got.(time.Time).Format("15:04:05.000"), gone[0].read.Format("15:04:05.000"), context.Cause(gone[0].le.Context()))
	}
	return result, errs
}

// checkResult is what one check found.
type checkResult struct {
	done       bool          // every live lease was read
	late       int           // leases gone in Redis while alive, whose context then ended as lost
	worstLate  time.Duration // the longest such context stayed alive after the read
	unreported int           // leases gone in Redis whose context did not end as lost within a TTL
	first      string        // the first late lease, for the log
}

// canary measures how late this process runs a goroutine whose timer is
// due: the heartbeat's stop deadlines cannot be kept more precisely than
// that.
func canary(ctx context.Context, worst *atomic.Int64) {
	const period = 20 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		time.Sleep(period)
		if late := int64(time.Since(start) - period); late > worst.Load() {
			worst.Store(late)
		}
	}
}

func TestSoak(t *testing.T) {
	leases, d := *leasesFlag, *durationFlag
	if leases < 1 || d < cycle {
		t.Fatalf("-soak.leases %d -soak.duration %v: need at least 1 lease and one fault cycle (%v)", leases, d, cycle)
	}
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: poolSize, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = client.Close() })
	direct := srv.Client(t)
	rec := NewRecorder()
	l, err := guard.New(client, guard.WithTTL(ttl), guard.WithRenewInterval(renewInterval),
		guard.WithRequestTimeout(requestTimeout), guard.WithStopGrace(stopGrace), guard.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = l.Close()
		}
	})
	inspector, err := guard.New(direct)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inspector.Close() })

	rep := &Report{
		Leases: leases, Duration: d,
		MaxLate:        *maxLateFlag,
		Config:         fmt.Sprintf("TTL %v, renew interval %v, request timeout %v, stop grace %v; client pool %d, read timeout 1s", ttl, renewInterval, requestTimeout, stopGrace, poolSize),
		GoroutineBound: 10,
		HeapBound:      8 << 20,
	}
	failf := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		rep.Failures = append(rep.Failures, msg)
		t.Error(msg)
	}
	defer func() {
		if *outFlag == "" {
			return
		}
		f, err := os.Create(*outFlag)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		if err := rep.Markdown(f); err != nil {
			t.Error(err)
		}
	}()

	start := time.Now() // reset when the soak's faults begin
	rep.Start = TakeSample(0)
	peak := rep.Start
	sample := func(at time.Duration, held int) {
		s := TakeSample(at)
		s.Held = held
		peak.Goroutines, peak.Own = max(peak.Goroutines, s.Goroutines), max(peak.Own, s.Own)
		peak.HeapBytes = max(peak.HeapBytes, s.HeapBytes)
		rep.Samples = append(rep.Samples, s)
	}

	// record takes in one check's result.
	record := func(r checkResult, errs []error) {
		at := time.Since(start).Round(time.Millisecond)
		if r.done {
			rep.Checks++
		}
		rep.LostUnreported += r.unreported
		rep.LateStops += r.late
		rep.WorstLate = max(rep.WorstLate, r.worstLate)
		for _, err := range errs {
			failf("check at %v: %v", at, err)
		}
		if r.late > 0 {
			t.Logf("check at %v: %d leases gone in Redis while their context was alive; each context ended as lost, at most %v after the read; first: %s",
				at, r.late, r.worstLate.Round(time.Millisecond), r.first)
		}
	}

	ctx := t.Context()
	s := &slots{keys: make([]string, leases), lease: make([]*guard.Lease, leases)}
	for i := range s.keys {
		s.keys[i] = "soak:" + strconv.Itoa(i)
	}
	begin := time.Now()
	if n, errs := fill(ctx, l, s, 32); n != leases || len(errs) > 0 {
		t.Fatalf("initial acquisition: %d of %d leases, errors %v", n, leases, errs)
	}
	rep.Acquisitions = int64(leases)
	t.Logf("%d leases acquired in %v", leases, time.Since(begin).Round(time.Millisecond))

	// The faults and the refills run beside the checks, until d has passed.
	start = time.Now()
	t.Logf("soak starts at %s", start.Format("15:04:05.000"))
	soakCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	var wg sync.WaitGroup
	var faultsMu sync.Mutex
	wg.Go(func() {
		timer := time.NewTimer(0)
		defer timer.Stop()
		for _, st := range schedule(d) {
			timer.Reset(time.Until(start.Add(st.at)))
			select {
			case <-timer.C:
			case <-soakCtx.Done():
				return
			}
			st.apply(proxy)
			faultsMu.Lock()
			rep.Faults = append(rep.Faults, Fault{At: time.Since(start), What: st.what})
			faultsMu.Unlock()
		}
	})
	var worstTimer atomic.Int64
	wg.Go(func() { canary(soakCtx, &worstTimer) })
	var refillErrs []error
	var refilled atomic.Int64
	wg.Go(func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
			case <-soakCtx.Done():
				return
			}
			refillErrs = append(refillErrs, s.sweep()...)
			n, errs := fill(soakCtx, l, s, 8)
			refilled.Add(int64(n))
			refillErrs = append(refillErrs, errs...)
		}
	})
	tick := time.NewTicker(3 * time.Second)
	for done := false; !done; {
		select {
		case <-tick.C:
		case <-soakCtx.Done():
			done = true
			continue
		}
		record(check(soakCtx, inspector, s, 4))
		held := 0
		for _, le := range s.current() {
			if le.Context().Err() == nil {
				held++
			}
		}
		sample(time.Since(start), held)
	}
	tick.Stop()
	wg.Wait()
	proxy.Blackhole(false)
	proxy.SetLatency(0)
	rep.Faults = append(rep.Faults, Fault{At: time.Since(start), What: "end of soak: link healthy"})
	rep.Acquisitions += refilled.Load()
	rep.WorstTimer = time.Duration(worstTimer.Load())
	for _, err := range refillErrs {
		failf("during the soak: %v", err)
	}

	// The end: every ended lease reported, every live one held.
	for _, err := range s.sweep() {
		failf("at the end: %v", err)
	}
	record(check(ctx, inspector, s, 4))
	reportedAll := func() (missing int, lost map[int64]bool, dup int) {
		lost, dup = rec.LostTokens()
		for _, tok := range s.ended {
			if !lost[tok] {
				missing++
			}
		}
		return missing, lost, dup
	}
	missing, lost, dup := reportedAll()
	for deadline := time.Now().Add(5 * time.Second); missing > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond) // the heartbeat reports losses off its goroutines
		missing, lost, dup = reportedAll()
	}
	if missing > 0 {
		failf("%d of %d leases that ended were not reported to the observer as lost", missing, len(s.ended))
	}
	if dup > 0 {
		failf("%d losses were reported twice", dup)
	}
	ended := make(map[int64]bool, len(s.ended))
	for _, tok := range s.ended {
		ended[tok] = true
	}
	_, les := s.live()
	for tok := range lost {
		if !ended[tok] {
			failf("the observer reported token %d lost, but no lease with it ended", tok)
		}
	}
	rep.LostReported = len(s.ended) - missing

	// Release what is held: each must still be held.
	for _, le := range les {
		alive := le.Context().Err() == nil
		err := le.Release(context.Background())
		switch {
		case err == nil:
			rep.HeldAtEnd++
		case alive && !errors.Is(context.Cause(le.Context()), guard.ErrLeaseLost):
			rep.LostUnreported++
			failf("release of live lease %q token %d: %v", le.Key(), le.Token(), err)
		default:
			failf("lease %q token %d lost at the very end: %v", le.Key(), le.Token(), err)
		}
	}
	rep.Elapsed = time.Since(begin)
	if rep.WorstLate > *maxLateFlag {
		failf("a lease context stayed alive %v after its hold was gone from Redis (bound -soak.maxlate %v; worst timer lateness of the process %v)",
			rep.WorstLate.Round(time.Millisecond), *maxLateFlag, rep.WorstTimer.Round(time.Millisecond))
	}
	if rep.LostUnreported > 0 {
		failf("%d leases were gone in Redis while their context said held", rep.LostUnreported)
	}
	// Every hold has ended: the Locker's heartbeat has nothing left.
	if held := rec.Acquired.Load() - rec.Released.Load() - int64(len(lost)); held != 0 {
		failf("observer: %d acquired - %d released - %d lost = %d, want 0", rec.Acquired.Load(), rec.Released.Load(), len(lost), held)
	}
	rep.RenewBatches, rep.RenewBatchesFailed, rep.RenewalsFailed = rec.RenewBatches.Load(), rec.RenewBatchesFailed.Load(), rec.RenewalsFailed.Load()

	// Nothing grew: drop what the test itself kept, let the link settle,
	// and compare with the start.
	s.lease, s.ended, les, lost, ended = nil, nil, nil, nil, nil
	s.endAt.Clear()
	s.gotAt.Clear()
	rec.Forget()
	time.Sleep(500 * time.Millisecond)
	rep.End = TakeSample(time.Since(start))
	// The goroutines a burst of requests started wait a second for the
	// next request before they end (guard's runner): what has not ended
	// 3s later stays.
	for settle := time.Now().Add(3 * time.Second); rep.End.Own > rep.Start.Own+rep.GoroutineBound && time.Now().Before(settle); {
		time.Sleep(100 * time.Millisecond)
		rep.End = TakeSample(time.Since(start))
	}
	peak.Goroutines, peak.Own = max(peak.Goroutines, rep.End.Goroutines), max(peak.Own, rep.End.Own)
	peak.HeapBytes = max(peak.HeapBytes, rep.End.HeapBytes)
	rep.Peak = peak
	if rep.End.Own > rep.Start.Own+rep.GoroutineBound {
		failf("goroutines outside the proxy grew from %d to %d (bound +%d)", rep.Start.Own, rep.End.Own, rep.GoroutineBound)
	}
	if rep.End.HeapBytes > rep.Start.HeapBytes+rep.HeapBound {
		failf("heap grew from %s to %s (bound +%s)", mib(rep.Start.HeapBytes), mib(rep.End.HeapBytes), mib(rep.HeapBound))
	}
	if rep.RenewBatches == 0 {
		failf("no renewal was sent")
	}
	if rep.LostReported == 0 {
		failf("no lease was lost: the partition longer than the TTL did not bite")
	}
	closed = true
	if err := l.Close(); err != nil {
		t.Error(err)
	}
	t.Logf("soak: %d leases, %v; acquisitions %d, renewal pipelines %d (failed %d), lease renewals failed %d, checks %d, lost reported %d, unreported %d, told late %d (worst %v; timer lateness %v); goroutines %d/%d/%d (own %d/%d/%d), heap %s/%s/%s",
		leases, d, rep.Acquisitions, rep.RenewBatches, rep.RenewBatchesFailed, rep.RenewalsFailed, rep.Checks, rep.LostReported, rep.LostUnreported, rep.LateStops, rep.WorstLate.Round(time.Millisecond), rep.WorstTimer.Round(time.Millisecond),
		rep.Start.Goroutines, rep.Peak.Goroutines, rep.End.Goroutines, rep.Start.Own, rep.Peak.Own, rep.End.Own,
		mib(rep.Start.HeapBytes), mib(rep.Peak.HeapBytes), mib(rep.End.HeapBytes))
}
