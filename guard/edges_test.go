package guard_test

// Promises at the edges (shutdown, failover, release reporting, FenceTTL,
// MinHold, client types, outages): each test failed before its fix.

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Close must not free a key under a job that is still running: it cancels
// the job, keeps the lease while the job winds down, and releases after.
func TestCloseWaitsForRunningJob(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	a, err := guard.New(client, guard.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b := newLocker(t, srv.Addr(), guard.WithTTL(3*time.Second))

	started := make(chan struct{})
	var jobEnd atomic.Int64
	var cause error
	done := make(chan error, 1)
	go func() {
		done <- a.WithLock(context.Background(), "close-running", func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			time.Sleep(200 * time.Millisecond) // winding down
			jobEnd.Store(time.Now().UnixNano())
			return ctx.Err()
		})
	}()
	<-started
	got := make(chan time.Time, 1)
	go func() {
		le, err := b.Acquire(t.Context(), "close-running", guard.Wait(5*time.Second))
		if err != nil {
			t.Errorf("second Locker: %v", err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		mustRelease(t, le)
	}()
	time.Sleep(50 * time.Millisecond) // b is waiting
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed := time.Now().UnixNano()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("WithLock = %v, want the job's context.Canceled", err)
	}
	if !errors.Is(cause, guard.ErrClosed) || errors.Is(cause, guard.ErrLeaseLost) {
		t.Fatalf("job's cause = %v, want ErrClosed and not a lost lease", cause)
	}
	end := jobEnd.Load()
	if end == 0 || closed < end {
		t.Fatalf("Close returned before the job did")
	}
	at := <-got
	if at.IsZero() {
		return
	}
	if at.UnixNano() < end {
		t.Fatalf("another owner acquired the key %v before the job returned", time.Unix(0, end).Sub(at))
	}
}

// A job that does not return within the close timeout keeps its key until
// the lease expires in Redis: Close leaves it rather than deleting it.
func TestCloseLeavesUnfinishedJobToExpire(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	a, err := guard.New(client, guard.WithTTL(2*time.Second), guard.WithCloseTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	b := newLocker(t, srv.Addr())
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	var jobCtx context.Context
	go func() {
		done <- a.WithLock(context.Background(), "close-stuck", func(ctx context.Context) error {
			jobCtx = ctx
			close(started)
			<-finish // ignores its context
			return nil
		})
	}()
	<-started
	start := time.Now()
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close took %v, want about the close timeout", d)
	}
	if _, err := b.Acquire(t.Context(), "close-stuck", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("Acquire right after Close = %v, want ErrNotAcquired: the running job's key must stay held", err)
	}
	// The job, told to stop by Close, can still see that its lease is gone.
	if cause := context.Cause(jobCtx); !errors.Is(cause, guard.ErrLeaseLost) || !errors.Is(cause, guard.ErrClosed) {
		t.Fatalf("job's cause after Close gave up = %v, want ErrLeaseLost and ErrClosed", cause)
	}
	close(finish)
	if err := <-done; !errors.Is(err, guard.ErrLeaseLost) || !errors.Is(err, guard.ErrClosed) {
		t.Fatalf("WithLock = %v, want ErrLeaseLost and ErrClosed: the job outlived its lease's renewals", err)
	}
	le, err := b.Acquire(t.Context(), "close-stuck", guard.Wait(5*time.Second))
	if err != nil {
		t.Fatalf("key not freed by expiry: %v", err)
	}
	mustRelease(t, le)
}

// A failover to a replica that missed an acquisition must not hand out the
// same token again. The replica is promoted first, so the acquisition that
// the old master still takes (a client on the wrong side of the failover)
// never reaches it.
func TestTokensIncreaseAcrossLossyFailover(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	a := newLocker(t, master.Addr())
	mustRelease(t, mustAcquire(t, t.Context(), a, "failover"))
	if n, err := master.Client(t).Do(t.Context(), "WAIT", 1, 1000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d, %v", n, err)
	}
	if err := replica.Client(t).ReplicaOf(t.Context(), "NO", "ONE").Err(); err != nil {
		t.Fatalf("promote: %v", err)
	}
	lost := mustAcquire(t, t.Context(), a, "failover") // never reaches the promoted replica
	defer mustRelease(t, lost)
	b := newLocker(t, replica.Addr())
	le := mustAcquire(t, t.Context(), b, "failover")
	defer mustRelease(t, le)
	if le.Token() <= lost.Token() {
		t.Fatalf("token after failover %d, want above %d handed out before it", le.Token(), lost.Token())
	}
}

// A counter that FenceTTL let expire must not send later tokens back.
func TestFenceTTLNeverSendsTokensBack(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv.Addr())
	first := mustAcquire(t, t.Context(), l, "fencettl", guard.FenceTTL(300*time.Millisecond))
	mustRelease(t, first)
	second := mustAcquire(t, t.Context(), l, "fencettl")
	mustRelease(t, second)
	if ttl := srv.Client(t).PTTL(t.Context(), "guard:{fencettl}:fence").Val(); ttl >= 0 {
		t.Fatalf("counter PTTL %v after an acquisition without FenceTTL, want no expiry", ttl)
	}
	// Let a FenceTTL counter expire, then acquire again.
	mustRelease(t, mustAcquire(t, t.Context(), l, "fencettl2", guard.FenceTTL(100*time.Millisecond)))
	before := mustAcquire(t, t.Context(), l, "fencettl2", guard.FenceTTL(100*time.Millisecond))
	mustRelease(t, before)
	time.Sleep(300 * time.Millisecond)
	after := mustAcquire(t, t.Context(), l, "fencettl2")
	defer mustRelease(t, after)
	if second.Token() <= first.Token() || after.Token() <= before.Token() {
		t.Fatalf("tokens %d then %d, and %d then %d across an expired counter: want increasing",
			first.Token(), second.Token(), before.Token(), after.Token())
	}
}

// A hold that was never handed to the caller is dropped at once, MinHold
// or not.
func TestFailedAcquisitionIgnoresMinHold(t *testing.T) {
	srv := redistest.Start(t) // no replica: no acquisition is acknowledged
	acked := newLocker(t, srv.Addr(), guard.WithReplicaAck(1, 50*time.Millisecond))
	other := newLocker(t, srv.Addr())
	_, err := acked.Acquire(t.Context(), "minhold-failed", guard.MinHold(5*time.Second))
	if !errors.Is(err, guard.ErrNotReplicated) {
		t.Fatalf("Acquire = %v, want ErrNotReplicated", err)
	}
	le, err := other.Acquire(t.Context(), "minhold-failed", guard.Wait(0))
	if err != nil {
		t.Fatalf("the failed acquisition kept the key: %v", err)
	}
	mustRelease(t, le)
}

// Release must report a key that another owner took after it was deleted
// under the holder (a restart, FLUSHALL, a failover), however early.
func TestReleaseReportsTakenKey(t *testing.T) {
	srv := redistest.Start(t)
	_, ls := srv, []*guard.Locker{newLocker(t, srv.Addr()), newLocker(t, srv.Addr())}
	admin := srv.Client(t)

	le := mustAcquire(t, t.Context(), ls[0], "taken")
	admin.Del(t.Context(), "guard:{taken}")
	other := mustAcquire(t, t.Context(), ls[1], "taken", guard.Wait(0))
	if err := le.Release(t.Context()); !errors.Is(err, guard.ErrNotHeld) {
		t.Fatalf("Release = %v, want ErrNotHeld: another owner holds the key", err)
	}
	mustRelease(t, other)

	err := ls[0].WithLock(t.Context(), "taken", func(ctx context.Context) error {
		admin.Del(t.Context(), "guard:{taken}")
		mustRelease(t, mustAcquire(t, t.Context(), ls[1], "taken", guard.Wait(0)))
		return nil
	})
	if err == nil {
		t.Fatal("WithLock reported a clean run for a job that overlapped another owner")
	}
}

// New rejects a client it cannot serve instead of panicking later.
func TestNewRejectsRing(t *testing.T) {
	srv := redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	defer ring.Close()
	l, err := guard.New(ring)
	if err == nil {
		defer l.Close()
		le, err := l.Acquire(t.Context(), "ring", guard.Wait(time.Second))
		if err == nil {
			_ = le.Release(t.Context())
		}
		t.Fatalf("New(*redis.Ring) succeeded")
	}
	if !errors.Is(err, guard.ErrInvalid) {
		t.Fatalf("New(*redis.Ring) = %v, want ErrInvalid", err)
	}
}

// An outage is not contention: ErrNotAcquired means Redis answered that
// someone else holds the key.
func TestOutageIsNotContention(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		name string
		addr string
		wait time.Duration
	}{
		{"silent server", ln.Addr().String(), 200 * time.Millisecond},
		{"nothing listening", closedAddr(t), 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: tc.addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
			defer client.Close()
			l, err := guard.New(client)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx, cancel := context.WithTimeout(t.Context(), tc.wait)
			defer cancel()
			err = l.WithLock(ctx, "outage", func(context.Context) error { return nil })
			if err == nil || errors.Is(err, guard.ErrNotAcquired) {
				t.Fatalf("WithLock with Redis down = %v, want a transport error, not ErrNotAcquired", err)
			}
			if _, ok := guard.HeldFor(err); ok {
				t.Fatalf("HeldFor(%v) reports an answer Redis never gave", err)
			}
		})
	}
}

func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A busy answer says how long the holder's lease has left, on both the
// try-once and the waited path.
func TestHeldFor(t *testing.T) {
	_, ls := newLockers(t, 2, guard.WithTTL(10*time.Second))
	le := mustAcquire(t, t.Context(), ls[0], "heldfor")
	defer mustRelease(t, le)
	for _, wait := range []time.Duration{0, 100 * time.Millisecond} {
		_, err := ls[1].Acquire(t.Context(), "heldfor", guard.Wait(wait))
		d, ok := guard.HeldFor(err)
		if !errors.Is(err, guard.ErrNotAcquired) || !ok || d < 9*time.Second || d > 10*time.Second {
			t.Fatalf("Wait(%v): err %v, HeldFor %v %v; want ErrNotAcquired held for about 10s", wait, err, d, ok)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := ls[1].Acquire(ctx, "heldfor")
	if d, ok := guard.HeldFor(err); !errors.Is(err, guard.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || !ok || d < 9*time.Second {
		t.Fatalf("wait ended by ctx: err %v, HeldFor %v %v", err, d, ok)
	}
}

func TestNilContext(t *testing.T) {
	_, ls := newLockers(t, 1)
	//lint:ignore SA1012 a nil context is what this test checks
	err := ls[0].WithLock(nil, "nil-ctx", func(context.Context) error { return nil }) //nolint:staticcheck
	if !errors.Is(err, guard.ErrInvalid) {
		t.Fatalf("WithLock(nil ctx) = %v, want ErrInvalid", err)
	}
	//lint:ignore SA1012 a nil context is what this test checks
	if _, err := ls[0].Acquire(nil, "nil-ctx"); !errors.Is(err, guard.ErrInvalid) { //nolint:staticcheck
		t.Fatalf("Acquire(nil ctx) = %v, want ErrInvalid", err)
	}
	//lint:ignore SA1012 a nil context is what this test checks
	if _, err := ls[0].Claim(nil, "nil-ctx", nil, time.Second); !errors.Is(err, guard.ErrInvalid) { //nolint:staticcheck
		t.Fatalf("Claim(nil ctx) = %v, want ErrInvalid", err)
	}
	//lint:ignore SA1012 a nil context is what this test checks
	if _, ok := guard.TokenFrom(nil, "nil-ctx"); ok { //nolint:staticcheck
		t.Fatal("TokenFrom(nil ctx) found a token")
	}
	le := mustAcquire(t, t.Context(), ls[0], "nil-ctx")
	//lint:ignore SA1012 a nil context is what this test checks
	if err := le.Release(nil); !errors.Is(err, guard.ErrInvalid) { //nolint:staticcheck
		t.Fatalf("Release(nil ctx) = %v, want ErrInvalid", err)
	}
	mustRelease(t, le) // the lease is still releasable
}

// A fencing counter that this package did not write is refused rather than
// turned into a wrong token, whether the acquisition keeps the counter for
// good or for a FenceTTL (which first tries to create it).
func TestOddFencingCounterRefused(t *testing.T) {
	srv, ls := newLockers(t, 1)
	admin := srv.Client(t)
	for name, opts := range map[string][]guard.LockOption{
		"permanent": {guard.Wait(0)},
		"FenceTTL":  {guard.Wait(0), guard.FenceTTL(time.Minute)},
	} {
		for _, v := range []string{"inf", "nan", "1e300", "0x10", " 12", "9007199254740993"} {
			admin.Set(t.Context(), "guard:{odd}:fence", v, time.Hour)
			le, err := ls[0].Acquire(t.Context(), "odd", opts...)
			if err == nil {
				mustRelease(t, le)
				t.Errorf("%s, counter %q: token %d, want ErrWrongType", name, v, le.Token())
			} else if !errors.Is(err, guard.ErrWrongType) {
				t.Errorf("%s, counter %q: %v, want ErrWrongType", name, v, err)
			}
			// The refused counter is left as it was, not replaced by a token,
			// and keeps its TTL: it is refused until it expires, not for good.
			if got, err := admin.Get(t.Context(), "guard:{odd}:fence").Result(); err != nil || got != v {
				t.Errorf("%s, counter %q after the refusal: %q, %v", name, v, got, err)
			}
			if ttl, err := admin.PTTL(t.Context(), "guard:{odd}:fence").Result(); err != nil || ttl <= 59*time.Minute {
				t.Errorf("%s, counter %q after the refusal: PTTL %v, %v; want the hour it had", name, v, ttl, err)
			}
		}
		admin.Del(t.Context(), "guard:{odd}:fence")
		admin.RPush(t.Context(), "guard:{odd}:fence", "x")
		if _, err := ls[0].Acquire(t.Context(), "odd", opts...); !errors.Is(err, guard.ErrWrongType) {
			t.Errorf("%s, counter of type list: %v, want ErrWrongType", name, err)
		}
		if n, err := admin.LLen(t.Context(), "guard:{odd}:fence").Result(); err != nil || n != 1 {
			t.Errorf("%s, list counter after the refusal: %d elements, %v", name, n, err)
		}
		admin.Del(t.Context(), "guard:{odd}:fence")
	}
}
