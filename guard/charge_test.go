package guard_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
)

// Concurrent charges of several Lockers never spend past the limit: the
// check and the spend are one script.
func TestChargeNeverOverspends(t *testing.T) {
	_, ls := newLockers(t, 4)
	const limit, amount = 1000, 30
	var spent atomic.Int64
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() {
			for range 20 {
				ok, left, err := l.Charge(t.Context(), "tenant-a", amount, limit, time.Minute)
				if err != nil {
					t.Errorf("Charge: %v", err)
					return
				}
				if ok {
					spent.Add(amount)
				}
				if left <= 0 || left > time.Minute {
					t.Errorf("window left %v, want within (0, 1m]", left)
				}
			}
		})
	}
	wg.Wait()
	if got := spent.Load(); got != limit/amount*amount {
		t.Fatalf("spent %d in all, want %d: as much as fits under %d, no more", got, limit/amount*amount, limit)
	}
	// Another budget is not touched, and the lock of the same key is free.
	if ok, _, err := ls[0].Charge(t.Context(), "tenant-b", limit, limit, time.Minute); !ok || err != nil {
		t.Fatalf("another budget: %v, %v", ok, err)
	}
	mustRelease(t, mustAcquire(t, t.Context(), ls[0], "tenant-a", guard.Wait(0)))
}

// A spent budget refuses, says how long until its window ends, and is
// whole again after it.
func TestChargeRefillsAfterItsWindow(t *testing.T) {
	_, ls := newLockers(t, 1)
	l := ls[0]
	const window = 300 * time.Millisecond
	if ok, _, err := l.Charge(t.Context(), "k", 10, 10, window); !ok || err != nil {
		t.Fatalf("first charge: %v, %v", ok, err)
	}
	ok, left, err := l.Charge(t.Context(), "k", 1, 10, window)
	if ok || err != nil || left <= 0 || left > window {
		t.Fatalf("charge past the limit = %v, %v, %v; want refused with up to %v left", ok, left, err, window)
	}
	time.Sleep(left + 50*time.Millisecond)
	if ok, _, err := l.Charge(t.Context(), "k", 10, 10, window); !ok || err != nil {
		t.Fatalf("charge after the window: %v, %v; want spent", ok, err)
	}
}

func TestChargeRejectsBadInput(t *testing.T) {
	srv, ls := newLockers(t, 1)
	l := ls[0]
	for _, tc := range []struct {
		name           string
		key            string
		amount, limit  int64
		window         time.Duration
		wantInvalid    bool
		wantWrongType  bool
		setupWrongType bool
	}{
		{name: "empty key", key: "", amount: 1, limit: 1, window: time.Second, wantInvalid: true},
		{name: "negative amount", key: "k", amount: -1, limit: 1, window: time.Second, wantInvalid: true},
		{name: "zero limit", key: "k", amount: 1, limit: 0, window: time.Second, wantInvalid: true},
		{name: "sub-ms window", key: "k", amount: 1, limit: 1, window: time.Microsecond, wantInvalid: true},
		{name: "budget of another type", key: "typed", amount: 1, limit: 1, window: time.Second, wantWrongType: true, setupWrongType: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setupWrongType {
				if err := srv.Client(t).HSet(t.Context(), "guard:{typed}:budget", "a", "b").Err(); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := l.Charge(t.Context(), tc.key, tc.amount, tc.limit, tc.window)
			if tc.wantInvalid != errors.Is(err, guard.ErrInvalid) || tc.wantWrongType != errors.Is(err, guard.ErrWrongType) {
				t.Fatalf("err = %v; want ErrInvalid %v, ErrWrongType %v", err, tc.wantInvalid, tc.wantWrongType)
			}
		})
	}
}

// On a quorum a charge counts when a majority spent it, also with a master
// down.
func TestQuorumCharge(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	l := newQuorumLocker(t, addrs, nil)
	servers[2].Kill(t)
	if ok, _, err := l.Charge(t.Context(), "q", 5, 10, time.Minute); !ok || err != nil {
		t.Fatalf("charge with a master down: %v, %v", ok, err)
	}
	if ok, _, err := l.Charge(t.Context(), "q", 6, 10, time.Minute); ok || err != nil {
		t.Fatalf("charge past the limit: %v, %v; want refused", ok, err)
	}
	servers[1].Kill(t)
	if _, _, err := l.Charge(t.Context(), "q", 1, 10, time.Minute); err == nil || errors.Is(err, guard.ErrInvalid) {
		t.Fatalf("charge with a majority down: %v, want a no-quorum error", err)
	}
}
