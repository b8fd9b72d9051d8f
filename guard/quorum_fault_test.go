package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/redis/go-redis/v9"
)

// contend runs WithLock on key from every Locker, goroutines each, until
// stop is closed, and returns how many runs overlapped another, how many
// completed, and how many calls failed otherwise than by contention: with
// masters down or paused, an attempt or a release can lack a quorum, and
// the caller decides how many of those it accepts.
func contend(t *testing.T, lockers []*guard.Locker, goroutines int, key string, stop <-chan struct{}) (violations, runs, failures int64) {
	t.Helper()
	var inside, v, n, f atomic.Int64
	var wg sync.WaitGroup
	for _, l := range lockers {
		for range goroutines {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
					err := l.WithLock(ctx, key, func(context.Context) error {
						if inside.Add(1) != 1 {
							v.Add(1)
						}
						time.Sleep(time.Millisecond)
						inside.Add(-1)
						n.Add(1)
						return nil
					}, guard.Wait(3*time.Second))
					cancel()
					if err != nil && !errors.Is(err, guard.ErrNotAcquired) {
						if f.Add(1) <= 3 {
							t.Logf("WithLock: %v", err)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	return v.Load(), n.Load(), f.Load()
}

func TestQuorumMinorityDown(t *testing.T) {
	for _, tc := range []struct{ masters, down int }{{3, 1}, {5, 2}} {
		t.Run(fmt.Sprintf("%d of %d down", tc.down, tc.masters), func(t *testing.T) {
			servers, addrs := startQuorum(t, tc.masters)
			const ttl = time.Second
			fast := []func(*redis.Options){failFast}
			holder := newQuorumLocker(t, addrs, fast, guard.WithTTL(ttl))
			others := []*guard.Locker{newQuorumLocker(t, addrs, fast, guard.WithTTL(ttl)), newQuorumLocker(t, addrs, fast, guard.WithTTL(ttl))}
			le := mustAcquire(t, t.Context(), holder, "minority")
			waitHeld(t, servers, "minority") // not on just a majority that loses a master
			for _, s := range servers[:tc.down] {
				s.Kill(t)
			}
			time.Sleep(3 * ttl) // renewed on the majority that is left
			if err := le.Context().Err(); err != nil {
				t.Fatalf("lease ended with a minority down: %v", context.Cause(le.Context()))
			}
			if _, err := others[0].Acquire(t.Context(), "minority", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
				t.Fatalf("other Locker while held: err = %v, want ErrNotAcquired", err)
			}
			mustRelease(t, le)
			next := mustAcquire(t, t.Context(), others[0], "minority", guard.Wait(time.Second))
			if next.Token() <= le.Token() {
				t.Fatalf("token %d after %d", next.Token(), le.Token())
			}
			mustRelease(t, next)

			stop := make(chan struct{})
			time.AfterFunc(1500*time.Millisecond, func() { close(stop) })
			violations, runs, failures := contend(t, append(others, holder), 2, "minority-contended", stop)
			t.Logf("%d runs in 1.5s under contention with %d of %d masters down, %d failures", runs, tc.down, tc.masters, failures)
			if violations != 0 {
				t.Fatalf("%d runs overlapped another", violations)
			}
			if runs < 10 {
				t.Fatalf("only %d runs completed in 1.5s", runs)
			}
		})
	}
}

func TestQuorumMajorityDown(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	const ttl, grace = 2 * time.Second, 500 * time.Millisecond
	fast := []func(*redis.Options){failFast}
	holder := newQuorumLocker(t, addrs, fast, guard.WithTTL(ttl), guard.WithStopGrace(grace))
	other := newQuorumLocker(t, addrs, fast, guard.WithTTL(ttl))
	le := mustAcquire(t, t.Context(), holder, "majority")
	waitHeld(t, servers, "majority")
	survivor := servers[2].Client(t, failFast)

	servers[0].Kill(t)
	servers[1].Kill(t)
	killed := time.Now()
	select {
	case <-le.Context().Done():
	case <-time.After(2 * ttl):
		t.Fatal("lease context not canceled within 2 TTLs of losing the majority")
	}
	lost := time.Now()
	// Told before the lease could end: the hold it last renewed is still
	// alive on the master that is left.
	pttl, err := survivor.PTTL(t.Context(), lockKey("majority")).Result()
	if err != nil {
		t.Fatal(err)
	}
	cause := context.Cause(le.Context())
	t.Logf("lease lost %v after the kill; %v left on the surviving master; cause: %v", lost.Sub(killed), pttl, cause)
	if !errors.Is(cause, guard.ErrLeaseLost) {
		t.Fatalf("cause = %v, want ErrLeaseLost", cause)
	}
	if pttl <= 0 {
		t.Fatalf("the hold had expired (PTTL %v) before the holder was told", pttl)
	}
	if err := le.Release(t.Context()); !errors.Is(err, guard.ErrNotHeld) {
		t.Fatalf("Release of a lost lease: err = %v, want ErrNotHeld", err)
	}

	// Acquire fails within its context, and not as contention.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	_, err = other.Acquire(ctx, "majority-free")
	if err == nil || errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("Acquire with a majority down: err = %v, want a failure that is not ErrNotAcquired", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Acquire took %v with a 1s context", took)
	}
	t.Logf("Acquire with a majority down: %v", err)
}

func TestQuorumPausedMajorityFailsWithinContext(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	l := newQuorumLocker(t, addrs, []func(*redis.Options){failFast}, guard.WithTTL(2*time.Second))
	servers[0].Pause(t)
	servers[1].Pause(t)
	defer servers[1].Resume(t)
	defer servers[0].Resume(t)
	for _, wait := range []guard.LockOption{guard.Wait(0), guard.Wait(5 * time.Second)} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		start := time.Now()
		_, err := l.Acquire(ctx, "paused", wait)
		cancel()
		if err == nil || errors.Is(err, guard.ErrNotAcquired) {
			t.Fatalf("Acquire with a majority paused: err = %v, want a failure that is not ErrNotAcquired", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("Acquire took %v with a 1s context", took)
		}
	}
}

func TestQuorumRestartedMasterKeepsTokensIncreasing(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	// go-redis's default retries replace the connections a restart broke.
	l := newQuorumLocker(t, addrs, nil)
	// Counters far above every server's clock in µs, and apart: after a
	// restart, only the other masters' counters can keep tokens above
	// them, not the restarted master's clock.
	const high = int64(5_000_000_000_000_000)
	for i, s := range servers {
		c := s.Client(t)
		if err := c.Set(t.Context(), lockKey("restart")+":fence", strconv.FormatInt(high-int64(i)*1000, 10), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	last := int64(0)
	for round := range 2 * len(servers) {
		le := mustAcquire(t, t.Context(), l, "restart", guard.Wait(5*time.Second))
		if le.Token() <= last || le.Token() < high-2000 {
			t.Fatalf("round %d: token %d after %d", round, le.Token(), last)
		}
		last = le.Token()
		mustRelease(t, le)
		// The token is written back to every master that is up: wait for the
		// one the answer did not wait for, then lose one master's data.
		waitFence(t, servers, "restart", last)
		s := servers[round%len(servers)]
		s.Kill(t)
		s.Restart(t)
		if got := fenceOn(t, s, "restart"); got != 0 {
			t.Fatalf("restarted master still has counter %d", got)
		}
	}
}

func TestQuorumSlowMasterDoesNotBlock(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	const ttl, latency = time.Second, 400 * time.Millisecond // a round trip to the slow master: 800ms, its timeout 100ms
	slow := faultproxy.New(t, servers[0].Addr())
	slow.SetLatency(latency)
	addrs[0] = slow.Addr()
	fast := []func(*redis.Options){func(o *redis.Options) { o.ReadTimeout = 2 * time.Second }}
	l := newQuorumLocker(t, addrs, fast, guard.WithTTL(ttl))
	other := newQuorumLocker(t, addrs, fast, guard.WithTTL(ttl))
	var worst time.Duration
	for range 5 {
		start := time.Now()
		mustRelease(t, mustAcquire(t, t.Context(), l, "slow", guard.Wait(0)))
		worst = max(worst, time.Since(start))
	}
	t.Logf("acquire+release with one master %v away: worst %v", 2*latency, worst)
	if worst >= 2*latency {
		t.Fatalf("acquire+release took %v: it waited for the slow master (round trip %v)", worst, 2*latency)
	}
	le := mustAcquire(t, t.Context(), l, "slow")
	time.Sleep(3 * ttl)
	if err := le.Context().Err(); err != nil {
		t.Fatalf("lease ended with one slow master: %v", context.Cause(le.Context()))
	}
	if _, err := other.Acquire(t.Context(), "slow", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("other Locker while held: err = %v, want ErrNotAcquired", err)
	}
	mustRelease(t, le)
}

func TestQuorumPausedMasterComesBack(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	fast := []func(*redis.Options){failFast}
	var lockers []*guard.Locker
	for range 3 {
		lockers = append(lockers, newQuorumLocker(t, addrs, fast, guard.WithTTL(2*time.Second)))
	}
	stop := make(chan struct{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		servers[0].Pause(t)
		time.Sleep(1500 * time.Millisecond)
		servers[0].Resume(t)
		time.Sleep(time.Second)
		close(stop)
	}()
	violations, runs, failures := contend(t, lockers, 2, "paused", stop)
	t.Logf("%d runs while one master was paused for 1.5s, %d failures", runs, failures)
	if violations != 0 {
		t.Fatalf("%d runs overlapped another", violations)
	}
}

func TestQuorumPartitionStopsHolderBeforeAnotherAcquires(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	const ttl, grace = 2 * time.Second, 400 * time.Millisecond
	proxies := make([]*faultproxy.Proxy, len(servers))
	via := make([]string, len(servers))
	for i, s := range servers {
		proxies[i] = faultproxy.New(t, s.Addr())
		via[i] = proxies[i].Addr()
	}
	holder := newQuorumLocker(t, via, []func(*redis.Options){failFast}, guard.WithTTL(ttl), guard.WithStopGrace(grace))
	other := newQuorumLocker(t, addrs, nil, guard.WithTTL(ttl))

	held := make(chan struct{})
	var stopped time.Time
	var holderToken int64
	done := make(chan error, 1)
	go func() {
		done <- holder.WithLock(t.Context(), "partition", func(ctx context.Context) error {
			holderToken, _ = guard.TokenFrom(ctx, "partition")
			close(held)
			<-ctx.Done()
			stopped = time.Now()
			return nil
		})
	}()
	<-held
	proxies[0].Blackhole(true)
	proxies[1].Blackhole(true)
	cut := time.Now()
	le, err := other.Acquire(t.Context(), "partition", guard.Wait(4*ttl))
	if err != nil {
		t.Fatalf("other Locker: %v", err)
	}
	acquired := time.Now()
	defer mustRelease(t, le)
	proxies[0].Blackhole(false)
	proxies[1].Blackhole(false)
	if err := <-done; !errors.Is(err, guard.ErrLeaseLost) {
		t.Fatalf("holder's WithLock = %v, want ErrLeaseLost", err)
	}
	t.Logf("cut at 0; holder told to stop at %v; other acquired at %v", stopped.Sub(cut), acquired.Sub(cut))
	if !stopped.Before(acquired) {
		t.Fatalf("holder stopped at %v, after the other acquired at %v", stopped.Sub(cut), acquired.Sub(cut))
	}
	if le.Token() <= holderToken {
		t.Fatalf("token %d after the partitioned holder's %d", le.Token(), holderToken)
	}
}
