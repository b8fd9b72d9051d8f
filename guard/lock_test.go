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
)

func TestMutualExclusion(t *testing.T) {
	_, lockers := newLockers(t, 4)
	const perLocker, rounds = 8, 25
	var inside, violations, runs atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, l := range lockers {
		for range perLocker {
			wg.Go(func() {
				for range rounds {
					err := l.WithLock(ctx, "exclusive", func(context.Context) error {
						if inside.Add(1) != 1 {
							violations.Add(1)
						}
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
}

func TestFencingTokensIncreaseAcrossLockers(t *testing.T) {
	_, lockers := newLockers(t, 3)
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

func TestReentrancy(t *testing.T) {
	_, ls := newLockers(t, 2)
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

func TestReentryThroughLeaseContext(t *testing.T) {
	_, ls := newLockers(t, 1)
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

func TestUpgradeFailsAtOnce(t *testing.T) {
	_, ls := newLockers(t, 1)
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

func TestReleaseTwice(t *testing.T) {
	_, ls := newLockers(t, 1)
	le := mustAcquire(t, t.Context(), ls[0], "twice")
	mustRelease(t, le)
	if err := le.Release(t.Context()); !errors.Is(err, guard.ErrNotHeld) {
		t.Fatalf("second Release: err = %v, want ErrNotHeld", err)
	}
}

func TestReaders(t *testing.T) {
	_, ls := newLockers(t, 3)
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

func TestPanicReleasesAndRepanics(t *testing.T) {
	_, ls := newLockers(t, 2)
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

func TestJobErrorReturned(t *testing.T) {
	_, ls := newLockers(t, 1)
	want := errors.New("job failed")
	err := ls[0].WithLock(t.Context(), "err", func(context.Context) error { return want })
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
	le := mustAcquire(t, t.Context(), ls[0], "err", guard.Wait(0))
	mustRelease(t, le)
}

var _ = fmt.Sprint

func TestReadersAndWritersExclude(t *testing.T) {
	_, lockers := newLockers(t, 4)
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
				for round := range 20 {
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

func TestDowngradeLetsOtherReadersIn(t *testing.T) {
	_, ls := newLockers(t, 3)
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
