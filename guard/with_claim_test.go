package guard_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

// claimRun is a WithClaim job that counts its runs and returns result,
// kept for a minute (nil: nothing to store).
func claimRun(runs *atomic.Int32, result []byte, during func(ctx context.Context)) func(context.Context) ([]byte, time.Duration, error) {
	return func(ctx context.Context) ([]byte, time.Duration, error) {
		runs.Add(1)
		if during != nil {
			during(ctx)
		}
		return result, time.Minute, nil
	}
}

// WithClaim runs once per bind: a run for the same bind while the first
// holds the key is busy, one for another bind is given the binding, a run
// after a result was stored is given the result, without taking the key,
// and a run that stored nothing leaves the key bound to its bind.
func behaveWithClaim(t *testing.T, tp topology) {
	ls := tp.lockers(t, 2)
	ctx := t.Context()
	var runs atomic.Int32
	claim, err := ls[0].WithClaim(ctx, "order-1", []byte("payload A"), time.Minute, claimRun(&runs, []byte("receipt A"), func(ctx context.Context) {
		if _, ok := guard.TokenFrom(ctx, "order-1"); !ok {
			t.Error("the job's context carries no hold on order-1")
		}
		_, err := ls[1].WithClaim(ctx, "order-1", []byte("payload A"), time.Minute, claimRun(&runs, nil, nil))
		if _, held := guard.HeldFor(err); !errors.Is(err, guard.ErrNotAcquired) || !held {
			t.Errorf("the same bind in flight: %v, want ErrNotAcquired with HeldFor", err)
		}
		other, err := ls[1].WithClaim(ctx, "order-1", []byte("payload B"), time.Minute, claimRun(&runs, nil, nil))
		if string(other) != "payload A" || err != nil {
			t.Errorf("another bind in flight: %q, %v; want the binding", other, err)
		}
	}))
	if string(claim) != "receipt A" || err != nil {
		t.Fatalf("first run: %q, %v; want its result stored", claim, err)
	}
	for _, bind := range []string{"payload A", "payload B"} {
		claim, err := ls[1].WithClaim(ctx, "order-1", []byte(bind), time.Minute, claimRun(&runs, nil, nil))
		if string(claim) != "receipt A" || err != nil {
			t.Fatalf("a retry with %s: %q, %v; want the stored result", bind, claim, err)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the jobs ran %d times, want 1", n)
	}
	mustRelease(t, mustAcquire(t, ctx, ls[1], "order-1", guard.Wait(0))) // released

	// Nothing stored: the key stays bound, and the same bind runs again.
	for i := range 2 {
		claim, err := ls[i].WithClaim(ctx, "order-2", []byte("payload A"), time.Minute, claimRun(&runs, nil, nil))
		if claim != nil || err != nil {
			t.Fatalf("run %d storing nothing: %q, %v", i+1, claim, err)
		}
	}
	if claim, err := ls[0].WithClaim(ctx, "order-2", []byte("payload B"), time.Minute, claimRun(&runs, nil, nil)); string(claim) != "payload A" || err != nil {
		t.Fatalf("another bind: %q, %v; want the binding", claim, err)
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("the jobs ran %d times, want 3", n)
	}
}

// during returns how many requests f sent.
func (r *roundTrips) during(f func()) int64 {
	before := r.n.Load()
	f()
	return r.n.Load() - before
}

// On one deployment a run costs two requests (the claim's check with the
// acquisition and the binding; the store with the release), and a run
// answered from the claim, or refused as busy, one.
func TestWithClaimRoundTrips(t *testing.T) {
	srv, ls := newLockers(t, 1)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	var trips roundTrips
	client.AddHook(&trips)
	l, err := guard.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := t.Context()
	var runs atomic.Int32
	// The first request of a Locker loads the library.
	if _, err := l.WithClaim(ctx, "warm-up", []byte("x"), time.Minute, claimRun(&runs, []byte("r"), nil)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want int64
		run  func() error
	}{
		{"fresh, storing", 2, func() error {
			_, err := l.WithClaim(ctx, "k1", []byte("x"), time.Minute, claimRun(&runs, []byte("r"), nil))
			return err
		}},
		{"fresh, storing nothing", 2, func() error {
			_, err := l.WithClaim(ctx, "k2", []byte("x"), time.Minute, claimRun(&runs, nil, nil))
			return err
		}},
		{"stored result", 1, func() error {
			_, err := l.WithClaim(ctx, "k1", []byte("x"), time.Minute, claimRun(&runs, nil, nil))
			return err
		}},
		{"busy", 1, func() error {
			le := mustAcquire(t, ctx, ls[0], "k3")
			defer mustRelease(t, le)
			_, err := l.WithClaim(ctx, "k3", []byte("x"), time.Minute, claimRun(&runs, nil, nil))
			if !errors.Is(err, guard.ErrNotAcquired) {
				return err
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if n := trips.during(func() { err = tc.run() }); n != tc.want || err != nil {
				t.Fatalf("%d round trips, err %v; want %d", n, err, tc.want)
			}
		})
	}
}

// A run whose lease was lost unnoticed (its key deleted behind its back)
// while a newer run took the key stores nothing over the newer run's
// result, and says why.
func TestWithClaimStaleRunStoresNothing(t *testing.T) {
	srv, ls := newLockers(t, 2)
	admin := srv.Client(t)
	ctx := t.Context()
	var runs atomic.Int32
	claim, err := ls[0].WithClaim(ctx, "order", []byte("A"), time.Minute, claimRun(&runs, []byte("stale"), func(context.Context) {
		if err := admin.Del(ctx, lockKey("order")).Err(); err != nil {
			t.Error(err)
		}
		newer, err := ls[1].WithClaim(ctx, "order", []byte("A"), time.Minute, claimRun(&runs, []byte("newer"), nil))
		if string(newer) != "newer" || err != nil {
			t.Errorf("newer run: %q, %v", newer, err)
		}
	}))
	if claim != nil || !errors.Is(err, guard.ErrSuperseded) {
		t.Fatalf("stale run: %q, %v; want nothing stored, ErrSuperseded", claim, err)
	}
	wantClaim(t, ls[0], "order", "newer")
}

// A lease lost while the job runs cancels its context, and its result is
// not stored.
func TestWithClaimLeaseLost(t *testing.T) {
	srv, ls := newLockers(t, 1, guard.WithTTL(time.Second))
	admin := srv.Client(t)
	ctx := t.Context()
	var runs atomic.Int32
	claim, err := ls[0].WithClaim(ctx, "order", []byte("A"), time.Minute, claimRun(&runs, []byte("late"), func(ctx context.Context) {
		if err := admin.Del(ctx, lockKey("order")).Err(); err != nil {
			t.Error(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Error("the job's context was not canceled")
		}
		if cause := context.Cause(ctx); !errors.Is(cause, guard.ErrLeaseLost) {
			t.Errorf("cause %v, want ErrLeaseLost", cause)
		}
	}))
	if claim != nil || !errors.Is(err, guard.ErrLeaseLost) {
		t.Fatalf("WithClaim = %q, %v; want nothing stored, ErrLeaseLost", claim, err)
	}
	wantClaim(t, ls[0], "order", "A")
}

// The release that stores the result grants the key to a waiting
// acquisition after the store, so the result is kept.
func TestWithClaimReleaseGrantsAfterStoring(t *testing.T) {
	_, ls := newLockers(t, 2)
	ctx := t.Context()
	var runs atomic.Int32
	got := make(chan *guard.Lease, 1)
	claim, err := ls[0].WithClaim(ctx, "order", []byte("A"), time.Minute, claimRun(&runs, []byte("done"), func(context.Context) {
		go func() {
			le, err := ls[1].Acquire(ctx, "order", guard.Wait(10*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- le
		}()
		time.Sleep(300 * time.Millisecond) // the waiter is queued
	}))
	if string(claim) != "done" || err != nil {
		t.Fatalf("WithClaim = %q, %v", claim, err)
	}
	if le := <-got; le != nil {
		mustRelease(t, le)
	}
	wantClaim(t, ls[0], "order", "done")
}

// A panic in the job releases the key, stores nothing and goes on.
func TestWithClaimPanic(t *testing.T) {
	_, ls := newLockers(t, 1)
	ctx := t.Context()
	func() {
		defer func() {
			if recover() != "boom" {
				t.Error("the panic did not go on")
			}
		}()
		_, _ = ls[0].WithClaim(ctx, "order", []byte("A"), time.Minute, func(context.Context) ([]byte, time.Duration, error) {
			panic("boom")
		})
	}()
	mustRelease(t, mustAcquire(t, ctx, ls[0], "order", guard.Wait(0)))
	wantClaim(t, ls[0], "order", "A")
}

// Inside a hold of the key, WithClaim re-enters it.
func TestWithClaimReentrant(t *testing.T) {
	_, ls := newLockers(t, 1)
	var runs atomic.Int32
	err := ls[0].WithLock(t.Context(), "order", func(ctx context.Context) error {
		claim, err := ls[0].WithClaim(ctx, "order", []byte("A"), time.Minute, claimRun(&runs, []byte("inner"), nil))
		if string(claim) != "inner" {
			t.Errorf("re-entered WithClaim stored %q", claim)
		}
		return err
	})
	if err != nil || runs.Load() != 1 {
		t.Fatalf("WithLock = %v, runs %d", err, runs.Load())
	}
	wantClaim(t, ls[0], "order", "inner")
}

// A claim or lock of another type is an error that names its key.
func TestWithClaimWrongType(t *testing.T) {
	srv, ls := newLockers(t, 1)
	admin := srv.Client(t)
	ctx := t.Context()
	var runs atomic.Int32
	for _, tc := range []struct{ name, key string }{
		{"claim", claimKey("c")},
		{"lock", lockKey("c")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := admin.RPush(ctx, tc.key, "x").Err(); err != nil {
				t.Fatal(err)
			}
			defer admin.Del(ctx, tc.key)
			_, err := ls[0].WithClaim(ctx, "c", []byte("A"), time.Minute, claimRun(&runs, nil, nil))
			if !errors.Is(err, guard.ErrWrongType) || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("WithClaim = %v, want ErrWrongType naming %s", err, tc.key)
			}
		})
	}
	t.Run("claim at release", func(t *testing.T) {
		claim, err := ls[0].WithClaim(ctx, "d", []byte("A"), time.Minute, claimRun(&runs, []byte("r"), func(context.Context) {
			admin.Del(ctx, claimKey("d"))
			admin.RPush(ctx, claimKey("d"), "x")
		}))
		if claim != nil || !errors.Is(err, guard.ErrWrongType) || !strings.Contains(err.Error(), claimKey("d")) {
			t.Fatalf("WithClaim = %q, %v; want ErrWrongType naming %s", claim, err, claimKey("d"))
		}
		mustRelease(t, mustAcquire(t, ctx, ls[0], "d", guard.Wait(0))) // released all the same
	})
	if n := runs.Load(); n != 1 {
		t.Fatalf("the job ran %d times, want 1", n)
	}
}

// The binding is made with the acquisition: a run refused as busy, or
// failing on a lock or a fencing counter of another type, leaves a claim
// that held nothing holding nothing, so another bind is not refused later
// for it; a busy run leaves a claim bound to its own bind as it was; a run
// that takes the key binds it for the binding's TTL.
func TestWithClaimBindsOnlyWhatItAcquires(t *testing.T) {
	srv, ls := newLockers(t, 2)
	admin := srv.Client(t)
	ctx := t.Context()
	var runs atomic.Int32
	le := mustAcquire(t, ctx, ls[0], "held")
	_, err := ls[1].WithClaim(ctx, "held", []byte("A"), time.Minute, claimRun(&runs, nil, nil))
	if !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("WithClaim on a held key = %v, want ErrNotAcquired", err)
	}
	if n := admin.Exists(ctx, claimKey("held")).Val(); n != 0 {
		t.Fatalf("a busy run left the claim bound (%q)", admin.Get(ctx, claimKey("held")).Val())
	}
	mustRelease(t, le)

	if err := admin.RPush(ctx, lockKey("listed"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := ls[1].WithClaim(ctx, "listed", []byte("A"), time.Minute, claimRun(&runs, nil, nil)); !errors.Is(err, guard.ErrWrongType) {
		t.Fatalf("WithClaim on a list = %v, want ErrWrongType", err)
	}
	if n := admin.Exists(ctx, claimKey("listed")).Val(); n != 0 {
		t.Fatalf("a run refused for the lock's type left the claim bound (%q)", admin.Get(ctx, claimKey("listed")).Val())
	}

	// A held key whose fencing counter is of another type: the busy answer
	// reads the counter, which refuses it, naming it.
	held := mustAcquire(t, ctx, ls[0], "odd")
	if err := admin.Del(ctx, fenceKey("odd")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.HSet(ctx, fenceKey("odd"), "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = ls[1].WithClaim(ctx, "odd", []byte("A"), time.Minute, claimRun(&runs, nil, nil))
	if !errors.Is(err, guard.ErrWrongType) || !strings.Contains(err.Error(), fenceKey("odd")) {
		t.Fatalf("WithClaim on a held key with a hash for its counter = %v, want ErrWrongType naming %s", err, fenceKey("odd"))
	}
	if n := admin.Exists(ctx, claimKey("odd")).Val(); n != 0 {
		t.Fatalf("a run refused for the counter's type left the claim bound (%q)", admin.Get(ctx, claimKey("odd")).Val())
	}
	admin.Del(ctx, fenceKey("odd"))
	mustRelease(t, held)

	claim, err := ls[1].WithClaim(ctx, "held", []byte("B"), 30*time.Second, claimRun(&runs, nil, func(context.Context) {
		if v := admin.Get(ctx, claimKey("held")).Val(); v != "B" {
			t.Errorf("while the run holds the key the claim holds %q, want its bind", v)
		}
		if ttl := admin.PTTL(ctx, claimKey("held")).Val(); ttl <= 25*time.Second || ttl > 30*time.Second {
			t.Errorf("the binding's PTTL %v, want the binding's 30s", ttl)
		}
		// The same bind, busy: the binding stays as it is.
		_, err := ls[0].WithClaim(ctx, "held", []byte("B"), time.Hour, claimRun(&runs, nil, nil))
		if !errors.Is(err, guard.ErrNotAcquired) {
			t.Errorf("the same bind while the key is held = %v, want ErrNotAcquired", err)
		}
		if v := admin.Get(ctx, claimKey("held")).Val(); v != "B" {
			t.Errorf("after a busy run with the same bind the claim holds %q, want it kept", v)
		}
		if ttl := admin.PTTL(ctx, claimKey("held")).Val(); ttl <= 25*time.Second || ttl > 30*time.Second {
			t.Errorf("after a busy run with the same bind the binding's PTTL is %v, want the first run's 30s", ttl)
		}
	}))
	if claim != nil || err != nil {
		t.Fatalf("another bind after the busy run: %q, %v; want it run", claim, err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the jobs ran %d times, want 1", n)
	}
}

func TestWithClaimRejectsBadInput(t *testing.T) {
	_, ls := newLockers(t, 1)
	l := ls[0]
	ctx := t.Context()
	var runs atomic.Int32
	job := claimRun(&runs, nil, nil)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"nil function", func() error { _, err := l.WithClaim(ctx, "k", []byte("A"), time.Minute, nil); return err }},
		{"nil context", func() error {
			_, err := l.WithClaim(nil, "k", []byte("A"), time.Minute, job) //nolint:staticcheck // the point
			return err
		}},
		{"empty key", func() error { _, err := l.WithClaim(ctx, "", []byte("A"), time.Minute, job); return err }},
		{"empty bind", func() error { _, err := l.WithClaim(ctx, "k", nil, time.Minute, job); return err }},
		{"zero TTL", func() error { _, err := l.WithClaim(ctx, "k", []byte("A"), 0, job); return err }},
		{"Wait", func() error {
			_, err := l.WithClaim(ctx, "k", []byte("A"), time.Minute, job, guard.Wait(time.Second))
			return err
		}},
		{"Permits", func() error {
			_, err := l.WithClaim(ctx, "k", []byte("A"), time.Minute, job, guard.Permits(2))
			return err
		}},
		{"result without a TTL", func() error {
			_, err := l.WithClaim(ctx, "k", []byte("A"), time.Minute, func(context.Context) ([]byte, time.Duration, error) {
				return []byte("r"), 0, nil
			})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, guard.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the job ran %d times", n)
	}
	if _, err := l.WithClaim(ctx, "k", []byte("A"), time.Minute, job, guard.Wait(0)); err != nil {
		t.Fatalf("Wait(0): %v", err)
	}
}
