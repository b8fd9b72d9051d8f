package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The conformance suite: the lease behaviours every topology keeps, run
// by one table over each (as redsync's makeCases runs each test over every
// driver). A behaviour proven on standalone Redis is proven on Sentinel,
// Cluster and a Redlock quorum by the same code, not by a copy. What only
// one topology has (failovers, slot moves, split votes) is tested beside
// it, in files of its own.

// topology is one Redis deployment the behaviours run on.
type topology struct {
	name string
	// permits reports that Permits(n) bounds holders by n there (not on a
	// quorum, which refuses it).
	permits bool
	// lockers returns n Lockers on clients of their own, standing in for n
	// processes of a fleet; they are closed when t ends.
	lockers func(t *testing.T, n int, opts ...guard.Option) []*guard.Locker
}

// startTopologies starts one of each deployment for the test t.
func startTopologies(t *testing.T) []topology {
	t.Helper()
	srv := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, 1)
	cluster := redistest.StartCluster(t)
	_, quorum := startQuorum(t, 3)
	_, quorum5 := startQuorum(t, 5)
	each := func(open func(t *testing.T, opts []guard.Option) *guard.Locker) func(*testing.T, int, ...guard.Option) []*guard.Locker {
		return func(t *testing.T, n int, opts ...guard.Option) []*guard.Locker {
			t.Helper()
			ls := make([]*guard.Locker, n)
			for i := range ls {
				ls[i] = open(t, opts)
			}
			return ls
		}
	}
	onClient := func(t *testing.T, client redis.UniversalClient, opts []guard.Option) *guard.Locker {
		t.Helper()
		l, err := guard.New(client, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	return []topology{
		{"standalone", true, each(func(t *testing.T, opts []guard.Option) *guard.Locker { return newLocker(t, srv.Addr(), opts...) })},
		{"sentinel", true, each(func(t *testing.T, opts []guard.Option) *guard.Locker { return onClient(t, sentinel.Client(t), opts) })},
		{"cluster", true, each(func(t *testing.T, opts []guard.Option) *guard.Locker { return onClient(t, cluster.Client(t), opts) })},
		{"quorum", false, each(func(t *testing.T, opts []guard.Option) *guard.Locker { return newQuorumLocker(t, quorum, nil, opts...) })},
		{"quorum of 5", false, each(func(t *testing.T, opts []guard.Option) *guard.Locker {
			return newQuorumLocker(t, quorum5, nil, opts...)
		})},
	}
}

// behaviours are what every topology keeps.
var behaviours = []struct {
	name string
	run  func(t *testing.T, tp topology)
}{
	{"MutualExclusion", behaveMutualExclusion},
	{"FencingTokensIncreaseAcrossLockers", behaveFencingTokensIncreaseAcrossLockers},
	{"Reentrancy", behaveReentrancy},
	{"ReentryThroughLeaseContext", behaveReentryThroughLeaseContext},
	{"UpgradeFailsAtOnce", behaveUpgradeFailsAtOnce},
	{"ReleaseTwice", behaveReleaseTwice},
	{"Readers", behaveReaders},
	{"PanicReleasesAndRepanics", behavePanicReleasesAndRepanics},
	{"JobErrorReturned", behaveJobErrorReturned},
	{"ReadersAndWritersExclude", behaveReadersAndWritersExclude},
	{"DowngradeLetsOtherReadersIn", behaveDowngradeLetsOtherReadersIn},
	{"HeartbeatKeepsLeaseBeyondTTL", behaveHeartbeatKeepsLeaseBeyondTTL},
	{"MinHold", behaveMinHold},
	{"ClaimOnceAcrossLockers", behaveClaimOnceAcrossLockers},
	{"ClaimFenced", behaveClaimFenced},
	{"WithClaim", behaveWithClaim},
	{"HandOffWithoutPolling", behaveHandOffWithoutPolling},
	{"Permits", behavePermits},
	{"InspectHoldersAndWaiters", behaveInspectHoldersAndWaiters},
}

func TestConformance(t *testing.T) {
	for _, tp := range startTopologies(t) {
		t.Run(tp.name, func(t *testing.T) {
			for _, b := range behaviours {
				t.Run(b.name, func(t *testing.T) { b.run(t, tp) })
			}
		})
	}
}

func behaveMutualExclusion(t *testing.T, tp topology) {
	lockers := tp.lockers(t, 4)
	const perLocker, rounds = 4, 10
	var inside, violations, runs atomic.Int64
	var mu sync.Mutex
	var tokens []int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, l := range lockers {
		for range perLocker {
			wg.Go(func() {
				for range rounds {
					err := l.WithLock(ctx, "exclusive", func(ctx context.Context) error {
						if inside.Add(1) != 1 {
							violations.Add(1)
						}
						token, _ := guard.TokenFrom(ctx, "exclusive")
						mu.Lock()
						tokens = append(tokens, token) // in the order the holders got in
						mu.Unlock()
						runs.Add(1)
						time.Sleep(100 * time.Microsecond)
						inside.Add(-1)
						return nil
					})
					if err != nil {
						t.Errorf("WithLock: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d runs overlapped another", v)
	}
	if want := int64(len(lockers) * perLocker * rounds); runs.Load() != want {
		t.Fatalf("runs = %d, want %d", runs.Load(), want)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("run %d got token %d after %d: not strictly increasing", i, tokens[i], tokens[i-1])
		}
	}
}

func behaveFencingTokensIncreaseAcrossLockers(t *testing.T, tp topology) {
	lockers := tp.lockers(t, 3)
	var last int64
	for i := range 30 {
		l := lockers[i%len(lockers)]
		le := mustAcquire(t, t.Context(), l, "fenced")
		if le.Token() <= last {
			t.Fatalf("token %d after %d: not strictly increasing", le.Token(), last)
		}
		last = le.Token()
		mustRelease(t, le)
	}
}

func behaveReentrancy(t *testing.T, tp topology) {
	ls := tp.lockers(t, 2)
	l, other := ls[0], ls[1]
	err := l.WithLock(t.Context(), "re", func(ctx context.Context) error {
		outer, _ := guard.TokenFrom(ctx, "re")
		err := l.WithLock(ctx, "re", func(ctx context.Context) error {
			inner, ok := guard.TokenFrom(ctx, "re")
			if !ok || inner != outer {
				t.Errorf("inner token = %d, %v; want the outer %d", inner, ok, outer)
			}
			return nil
		}, guard.Wait(0))
		if err != nil {
			t.Fatalf("re-entry: %v", err)
		}
		// The inner release must not free the key.
		if _, err := other.Acquire(t.Context(), "re", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
			t.Fatalf("other Locker after inner release: err = %v, want ErrNotAcquired", err)
		}
		// Read under write: a downgrade, allowed at once.
		return l.WithReadLock(ctx, "re", func(ctx context.Context) error { return nil }, guard.Wait(0))
	})
	if err != nil {
		t.Fatal(err)
	}
	le := mustAcquire(t, t.Context(), other, "re", guard.Wait(0))
	mustRelease(t, le)
}

func behaveReentryThroughLeaseContext(t *testing.T, tp topology) {
	ls := tp.lockers(t, 1)
	l := ls[0]
	outer := mustAcquire(t, t.Context(), l, "lease-ctx")
	inner := mustAcquire(t, outer.Context(), l, "lease-ctx", guard.Wait(0))
	if inner.Token() != outer.Token() {
		t.Fatalf("re-entry minted token %d, want %d", inner.Token(), outer.Token())
	}
	mustRelease(t, inner)
	if inner.Context().Err() == nil || !errors.Is(context.Cause(inner.Context()), guard.ErrReleased) {
		t.Fatalf("inner lease context cause = %v, want ErrReleased", context.Cause(inner.Context()))
	}
	if outer.Context().Err() != nil {
		t.Fatal("outer lease context ended with the inner lease")
	}
	mustRelease(t, outer)
}

func behaveUpgradeFailsAtOnce(t *testing.T, tp topology) {
	ls := tp.lockers(t, 1)
	l := ls[0]
	err := l.WithReadLock(t.Context(), "up", func(ctx context.Context) error {
		start := time.Now()
		_, err := l.Acquire(ctx, "up")
		if !errors.Is(err, guard.ErrUpgrade) {
			t.Errorf("write under read: err = %v, want ErrUpgrade", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("ErrUpgrade took %v", d)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func behaveReleaseTwice(t *testing.T, tp topology) {
	ls := tp.lockers(t, 1)
	le := mustAcquire(t, t.Context(), ls[0], "twice")
	mustRelease(t, le)
	if err := le.Release(t.Context()); !errors.Is(err, guard.ErrNotHeld) {
		t.Fatalf("second Release: err = %v, want ErrNotHeld", err)
	}
}

func behaveReaders(t *testing.T, tp topology) {
	ls := tp.lockers(t, 3)
	r1, err := ls[0].AcquireRead(t.Context(), "rw", guard.Wait(0))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := ls[1].AcquireRead(t.Context(), "rw", guard.Wait(0))
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	if _, err := ls[2].Acquire(t.Context(), "rw", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("writer while read-held: err = %v, want ErrNotAcquired", err)
	}
	mustRelease(t, r1)
	if _, err := ls[2].Acquire(t.Context(), "rw", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("writer while one reader remains: err = %v, want ErrNotAcquired", err)
	}
	done := make(chan *guard.Lease)
	go func() {
		le, err := ls[2].Acquire(t.Context(), "rw", guard.Wait(5*time.Second))
		if err != nil {
			t.Errorf("waiting writer: %v", err)
		}
		done <- le
	}()
	time.Sleep(50 * time.Millisecond)
	mustRelease(t, r2)
	w := <-done
	if w == nil {
		t.FailNow()
	}
	if _, err := ls[0].AcquireRead(t.Context(), "rw", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("reader while write-held: err = %v, want ErrNotAcquired", err)
	}
	mustRelease(t, w)
}

func behavePanicReleasesAndRepanics(t *testing.T, tp topology) {
	ls := tp.lockers(t, 2)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want boom", r)
			}
		}()
		_ = ls[0].WithLock(t.Context(), "panic", func(context.Context) error { panic("boom") })
	}()
	le := mustAcquire(t, t.Context(), ls[1], "panic", guard.Wait(0))
	mustRelease(t, le)
}

func behaveJobErrorReturned(t *testing.T, tp topology) {
	ls := tp.lockers(t, 1)
	want := errors.New("job failed")
	err := ls[0].WithLock(t.Context(), "err", func(context.Context) error { return want })
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
	le := mustAcquire(t, t.Context(), ls[0], "err", guard.Wait(0))
	mustRelease(t, le)
}

var _ = fmt.Sprint

func behaveReadersAndWritersExclude(t *testing.T, tp topology) {
	lockers := tp.lockers(t, 4)
	var readers, writers, violations, reads, writes atomic.Int64
	check := func() {
		if w, r := writers.Load(), readers.Load(); w > 1 || (w == 1 && r > 0) {
			violations.Add(1)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i, l := range lockers {
		for g := range 4 {
			wg.Go(func() {
				for round := range 10 {
					var err error
					if (i+g+round)%3 == 0 {
						err = l.WithLock(ctx, "rw-stress", func(context.Context) error {
							writers.Add(1)
							check()
							time.Sleep(200 * time.Microsecond)
							check()
							writers.Add(-1)
							writes.Add(1)
							return nil
						})
					} else {
						err = l.WithReadLock(ctx, "rw-stress", func(context.Context) error {
							readers.Add(1)
							check()
							time.Sleep(200 * time.Microsecond)
							check()
							readers.Add(-1)
							reads.Add(1)
							return nil
						})
					}
					if err != nil {
						t.Errorf("round %d: %v", round, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d reads, %d writes", reads.Load(), writes.Load())
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d times a writer overlapped another holder", v)
	}
}

func behaveDowngradeLetsOtherReadersIn(t *testing.T, tp topology) {
	ls := tp.lockers(t, 3)
	write := mustAcquire(t, t.Context(), ls[0], "downgrade")
	read, err := ls[0].AcquireRead(write.Context(), "downgrade", guard.Wait(0))
	if err != nil {
		t.Fatalf("read under write: %v", err)
	}
	if _, err := ls[1].AcquireRead(t.Context(), "downgrade", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("other reader while write-held: err = %v, want ErrNotAcquired", err)
	}
	mustRelease(t, write) // now read-held by ls[0] only
	other, err := ls[1].AcquireRead(t.Context(), "downgrade", guard.Wait(time.Second))
	if err != nil {
		t.Fatalf("other reader after the downgrade: %v", err)
	}
	if _, err := ls[2].Acquire(t.Context(), "downgrade", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("writer while read-held: err = %v, want ErrNotAcquired", err)
	}
	if read.Token() != write.Token() {
		t.Fatalf("downgrade minted token %d, want %d", read.Token(), write.Token())
	}
	mustRelease(t, read)
	mustRelease(t, other)
	mustRelease(t, mustAcquire(t, t.Context(), ls[2], "downgrade", guard.Wait(0)))
}

func behaveHeartbeatKeepsLeaseBeyondTTL(t *testing.T, tp topology) {
	const ttl = 600 * time.Millisecond
	ls := tp.lockers(t, 2, guard.WithTTL(ttl))
	le := mustAcquire(t, t.Context(), ls[0], "long")
	time.Sleep(3 * ttl)
	if err := le.Context().Err(); err != nil {
		t.Fatalf("lease ended: %v", context.Cause(le.Context()))
	}
	if _, err := ls[1].Acquire(t.Context(), "long", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("after 3 TTLs: err = %v, want ErrNotAcquired", err)
	}
	mustRelease(t, le)
}

func behaveMinHold(t *testing.T, tp topology) {
	ls := tp.lockers(t, 2)
	const minHold = 700 * time.Millisecond
	start := time.Now()
	err := ls[0].WithLock(t.Context(), "min", func(context.Context) error { return nil }, guard.MinHold(minHold))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ls[1].Acquire(t.Context(), "min", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("right after a short job with MinHold: err = %v, want ErrNotAcquired", err)
	}
	le := mustAcquire(t, t.Context(), ls[1], "min", guard.Wait(3*time.Second))
	if held := time.Since(start); held < minHold-50*time.Millisecond {
		t.Fatalf("key free after %v, want >= MinHold %v", held, minHold)
	}
	mustRelease(t, le)
}

func behaveClaimOnceAcrossLockers(t *testing.T, tp topology) {
	ls := tp.lockers(t, 4)
	var winners atomic.Int32
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Go(func() {
			ok, err := l.Claim(t.Context(), "tick-42", []byte{byte('a' + i)}, time.Minute)
			if err != nil {
				t.Errorf("Claim: %v", err)
			}
			if ok {
				winners.Add(1)
			}
		})
	}
	wg.Wait()
	if winners.Load() != 1 {
		t.Fatalf("%d Lockers claimed the same key, want 1", winners.Load())
	}
	v, ok, err := ls[0].Claimed(t.Context(), "tick-42")
	if err != nil || !ok || len(v) != 1 {
		t.Fatalf("Claimed = %q, %v, %v; want the winner's value", v, ok, err)
	}
	if _, ok, err := ls[0].Claimed(t.Context(), "never"); err != nil || ok {
		t.Fatalf("Claimed(never) = %v, %v; want false", ok, err)
	}
	// A claim never blocks the lock of the same key.
	mustRelease(t, mustAcquire(t, t.Context(), ls[1], "tick-42", guard.Wait(0)))
}

func behaveClaimFenced(t *testing.T, tp topology) {
	ls := tp.lockers(t, 2)
	old := mustAcquire(t, t.Context(), ls[0], "fenced-claim", guard.Wait(0))
	mustRelease(t, old)
	le := mustAcquire(t, t.Context(), ls[1], "fenced-claim", guard.Wait(0))
	defer mustRelease(t, le)
	if err := ls[0].ClaimFenced(t.Context(), "fenced-claim", old.Token(), []byte("stale"), time.Minute); !errors.Is(err, guard.ErrSuperseded) {
		t.Fatalf("ClaimFenced with an older token: %v, want ErrSuperseded", err)
	}
	if err := ls[1].ClaimFenced(t.Context(), "fenced-claim", le.Token(), []byte("newest"), time.Minute); err != nil {
		t.Fatalf("ClaimFenced with the newest token: %v", err)
	}
	if v, ok, err := ls[0].Claimed(t.Context(), "fenced-claim"); string(v) != "newest" || !ok || err != nil {
		t.Fatalf("Claimed = %q, %v, %v; want newest", v, ok, err)
	}
}

// A waiter gets the key soon after its release, long before its own
// timer (the holder's TTL) would wake it: woken by the release, not by
// polling.
func behaveHandOffWithoutPolling(t *testing.T, tp topology) {
	ls := tp.lockers(t, 2) // TTL 30s
	holder := mustAcquire(t, t.Context(), ls[0], "handoff", guard.Wait(0))
	got := make(chan time.Time, 1)
	go func() {
		le, err := ls[1].Acquire(t.Context(), "handoff", guard.Wait(10*time.Second))
		if err != nil {
			t.Errorf("waiter: %v", err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		mustRelease(t, le)
	}()
	time.Sleep(300 * time.Millisecond) // the waiter is asleep
	released := time.Now()
	mustRelease(t, holder)
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	if d := at.Sub(released); d > 2*time.Second {
		t.Fatalf("waiter got the key %v after the release, want at once", d)
	}
}

// Permits(n) lets n holders in at once and no more; a topology that
// cannot bound them refuses it.
func behavePermits(t *testing.T, tp topology) {
	ls := tp.lockers(t, 3)
	if !tp.permits {
		if _, err := ls[0].Acquire(t.Context(), "limited", guard.Permits(2)); !errors.Is(err, guard.ErrInvalid) {
			t.Fatalf("Permits(2) on %s: err = %v, want ErrInvalid", tp.name, err)
		}
		return
	}
	a := mustAcquire(t, t.Context(), ls[0], "limited", guard.Permits(2), guard.Wait(0))
	b := mustAcquire(t, t.Context(), ls[1], "limited", guard.Permits(2), guard.Wait(0))
	if _, err := ls[2].Acquire(t.Context(), "limited", guard.Permits(2), guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("a third holder of 2 permits: err = %v, want ErrNotAcquired", err)
	}
	if a.Token() == b.Token() {
		t.Fatalf("two permits share token %d", a.Token())
	}
	mustRelease(t, a)
	c := mustAcquire(t, t.Context(), ls[2], "limited", guard.Permits(2), guard.Wait(2*time.Second))
	mustRelease(t, b)
	mustRelease(t, c)
}

// Inspect shows who holds a lock, with its identity and token, and who
// waits for it.
func behaveInspectHoldersAndWaiters(t *testing.T, tp topology) {
	holder := tp.lockers(t, 1, guard.WithIdentity("holder"))[0]
	waiter := tp.lockers(t, 1, guard.WithIdentity("waiter"))[0]
	le := mustAcquire(t, t.Context(), holder, "inspected", guard.Wait(0))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if w, err := waiter.Acquire(ctx, "inspected"); err == nil {
			_ = w.Release(context.Background())
		}
	}()
	// On a quorum, a master that granted the hold late holds its own,
	// larger token until the token's write-back reaches it; Inspect shows
	// the lease's token once it has.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := holder.Inspect(t.Context(), "inspected")
		if err != nil {
			t.Fatal(err)
		}
		holdersOK := len(st.Holders) == 1 && st.Holders[0].Identity == "holder" && st.Holders[0].Token == le.Token() && st.Holders[0].Write
		waitersOK := len(st.Waiters) == 1 && st.Waiters[0].Identity == "waiter" && st.Waiters[0].Write
		if holdersOK && waitersOK {
			if st.Fence < le.Token() {
				t.Errorf("fencing counter %d below the holder's token %d", st.Fence, le.Token())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: holders %+v, waiters %+v; want the holder's write hold with token %d and the waiter's write registration", st.Holders, st.Waiters, le.Token())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	mustRelease(t, le)
}
