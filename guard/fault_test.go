package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/guard/observe"
	"github.com/jobguard/jobguard/internal/childproc"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// childHelpers run in a child process (see childproc), a holder that the
// test can SIGKILL or SIGSTOP like a real instance of the fleet.
var childHelpers = map[string]func(args []string) error{
	// hold ADDR KEY TTL MODE: acquire KEY ("write" or "read") and hold it,
	// printing "held TOKEN", then "lost CAUSE" if the lease is lost.
	"hold": func(args []string) error {
		if len(args) != 4 {
			return fmt.Errorf("hold: want ADDR KEY TTL MODE, got %q", args)
		}
		ttl, err := time.ParseDuration(args[2])
		if err != nil {
			return err
		}
		client := redis.NewClient(&redis.Options{Addr: args[0]})
		defer client.Close()
		l, err := guard.New(client, guard.WithTTL(ttl))
		if err != nil {
			return err
		}
		defer l.Close()
		acquire := l.Acquire
		if args[3] == "read" {
			acquire = l.AcquireRead
		}
		le, err := acquire(context.Background(), args[1])
		if err != nil {
			return err
		}
		fmt.Printf("held %d\n", le.Token())
		<-le.Context().Done()
		fmt.Printf("lost %v\n", context.Cause(le.Context()))
		select {} // stay until killed
	},
}

func startHolder(t *testing.T, srv *redistest.Server, key string, ttl time.Duration, mode string) (*childproc.Child, int64) {
	t.Helper()
	child := childproc.Start(t, "hold", srv.Addr(), key, ttl.String(), mode)
	token, err := strconv.ParseInt(child.WaitLine(t, "held ", 10*time.Second), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return child, token
}

func TestKilledHolderFreesKeyWithinTTL(t *testing.T) {
	const ttl = 2 * time.Second
	for _, tc := range []struct {
		name         string
		waitingFirst bool // the waiter is already asleep when the holder dies
	}{
		{"acquire after crash", false},
		{"waiter wakes on its fallback timer", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			l := newLocker(t, srv.Addr())
			child, token := startHolder(t, srv, "crash", ttl, "write")

			type result struct {
				le  *guard.Lease
				err error
				at  time.Time
			}
			got := make(chan result, 1)
			acquire := func() {
				le, err := l.Acquire(t.Context(), "crash", guard.Wait(10*time.Second))
				got <- result{le, err, time.Now()}
			}
			if tc.waitingFirst {
				go acquire()
				time.Sleep(200 * time.Millisecond)
			}
			child.Kill(t)
			killed := time.Now()
			if !tc.waitingFirst {
				go acquire()
			}
			r := <-got
			if r.err != nil {
				t.Fatalf("Acquire after the holder was killed: %v", r.err)
			}
			took := r.at.Sub(killed)
			t.Logf("key taken over %v after SIGKILL (TTL %v)", took, ttl)
			if took > ttl+1500*time.Millisecond {
				t.Fatalf("takeover took %v, want <= TTL + 1.5s", took)
			}
			if r.le.Token() <= token {
				t.Fatalf("new token %d not above the crashed holder's %d", r.le.Token(), token)
			}
			mustRelease(t, r.le)
		})
	}
}

func TestPausedHolderIsToldItLostTheLease(t *testing.T) {
	// A SIGSTOP stands in for a long GC pause: the holder wakes up after its
	// lease expired and someone else took over. Its lease context must end,
	// and the fencing token lets the resource tell the two apart.
	const ttl = time.Second
	srv := redistest.Start(t)
	l := newLocker(t, srv.Addr())
	child, oldToken := startHolder(t, srv, "paused", ttl, "write")
	child.Stop(t)
	le, err := l.Acquire(t.Context(), "paused", guard.Wait(5*time.Second))
	if err != nil {
		t.Fatalf("Acquire while the holder is paused: %v", err)
	}
	defer mustRelease(t, le)
	if le.Token() <= oldToken {
		t.Fatalf("token %d not above the paused holder's %d", le.Token(), oldToken)
	}
	child.Cont(t)
	cause := child.WaitLine(t, "lost ", 5*time.Second)
	t.Logf("paused holder, resumed: lost %s", cause)
}

func TestPartitionStopsJobBeforeAnotherCanAcquire(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	partitioned := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: time.Second, MaxRetries: -1})
	defer partitioned.Close()
	a, err := guard.New(partitioned, guard.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newLocker(t, srv.Addr())

	le := mustAcquire(t, t.Context(), a, "partition")
	time.Sleep(ttl / 2) // some renewals go through
	proxy.Blackhole(true)
	cut := time.Now()

	acquired := make(chan time.Time, 1)
	go func() {
		other, err := b.Acquire(t.Context(), "partition", guard.Wait(10*time.Second))
		if err != nil {
			t.Errorf("other Locker: %v", err)
			acquired <- time.Time{}
			return
		}
		acquired <- time.Now()
		mustRelease(t, other)
	}()

	<-le.Context().Done()
	lost := time.Now()
	if cause := context.Cause(le.Context()); !errors.Is(cause, guard.ErrLeaseLost) {
		t.Fatalf("lease context cause = %v, want ErrLeaseLost", cause)
	}
	other := <-acquired
	if other.IsZero() {
		t.FailNow()
	}
	t.Logf("after the cut: holder told to stop at %v, other Locker acquired at %v (margin %v)",
		lost.Sub(cut).Round(time.Millisecond), other.Sub(cut).Round(time.Millisecond), other.Sub(lost).Round(time.Millisecond))
	if !lost.Before(other) {
		t.Fatalf("holder told to stop %v after the cut, but another Locker acquired at %v", lost.Sub(cut), other.Sub(cut))
	}
	if err := le.Release(t.Context()); !errors.Is(err, guard.ErrNotHeld) {
		t.Fatalf("Release of the lost lease: err = %v, want ErrNotHeld", err)
	}
	proxy.Blackhole(false)
}

func TestCrashedReaderFreesWithinItsOwnTTL(t *testing.T) {
	const crashedTTL = time.Second
	srv := redistest.Start(t)
	ls := []*guard.Locker{newLocker(t, srv.Addr()), newLocker(t, srv.Addr())}
	child, _ := startHolder(t, srv, "readers", crashedTTL, "read")
	// A live reader with the default 30s TTL.
	reader, err := ls[0].AcquireRead(t.Context(), "readers", guard.Wait(0))
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		le, err := ls[1].Acquire(t.Context(), "readers", guard.Wait(10*time.Second))
		if err == nil {
			mustRelease(t, le)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	child.Kill(t)
	killed := time.Now()
	mustRelease(t, reader)
	if err := <-got; err != nil {
		t.Fatalf("writer: %v", err)
	}
	took := time.Since(killed)
	t.Logf("writer in %v after the reader with TTL %v crashed", took, crashedTTL)
	if took > crashedTTL+1500*time.Millisecond {
		t.Fatalf("writer waited %v, want within the crashed reader's TTL + 1.5s", took)
	}
}

func TestReplicaAck(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	l := newLocker(t, master.Addr(), guard.WithReplicaAck(1, 300*time.Millisecond))
	le := mustAcquire(t, t.Context(), l, "acked", guard.Wait(0))
	mustRelease(t, le)

	replica.Pause(t)
	defer replica.Resume(t)
	_, err := l.Acquire(t.Context(), "acked", guard.Wait(0))
	if !errors.Is(err, guard.ErrNotReplicated) || errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("Acquire with the replica paused: err = %v, want ErrNotReplicated (not contention)", err)
	}
	// The unacknowledged hold was released, not left behind.
	other := newLocker(t, master.Addr())
	le = mustAcquire(t, t.Context(), other, "acked", guard.Wait(0))
	mustRelease(t, le)
}

func TestRenewalRecoversFromShortPartition(t *testing.T) {
	// TTL 1.5s: renew every 500ms, retry every ~170ms after a failure, stop
	// the job 150ms before the safe end. A 600ms cut costs renewals, not the lease.
	const ttl = 1500 * time.Millisecond
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer client.Close()
	rec := newRecorder()
	l, err := guard.New(client, guard.WithTTL(ttl), guard.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	other := newLocker(t, srv.Addr())

	le := mustAcquire(t, t.Context(), l, "blip")
	time.Sleep(100 * time.Millisecond)
	proxy.Blackhole(true)
	time.Sleep(600 * time.Millisecond)
	proxy.Blackhole(false)
	time.Sleep(2 * ttl)
	if err := le.Context().Err(); err != nil {
		t.Fatalf("lease lost after a 600ms cut: %v", context.Cause(le.Context()))
	}
	if _, err := other.Acquire(t.Context(), "blip", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("other Locker: err = %v, want ErrNotAcquired", err)
	}
	rec.mu.Lock()
	failed := len(rec.events[observe.RenewFailed])
	rec.mu.Unlock()
	if failed == 0 {
		t.Fatal("no renewal failed during the cut: the test did not test anything")
	}
	t.Logf("%d renewals failed during the cut; the lease survived", failed)
	mustRelease(t, le)
}
