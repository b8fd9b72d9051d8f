package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// fenceKey and claimKey are the Redis names of lock name's fencing counter
// and claim under the default prefix.
func fenceKey(name string) string { return lockKey(name) + ":fence" }
func claimKey(name string) string { return lockKey(name) + ":claim" }

// tokenOf acquires key on l, releases it, and returns the hold's token.
func tokenOf(t *testing.T, l *guard.Locker, key string, opts ...guard.LockOption) int64 {
	t.Helper()
	le := mustAcquire(t, t.Context(), l, key, opts...)
	mustRelease(t, le)
	return le.Token()
}

// wantClaim checks that key's claim is want.
func wantClaim(t *testing.T, l *guard.Locker, key, want string) {
	t.Helper()
	v, ok, err := l.Claimed(t.Context(), key)
	if err != nil || !ok || string(v) != want {
		t.Fatalf("Claimed(%q) = %q, %v, %v; want %q", key, v, ok, err, want)
	}
}

// The newest token stores; an older one is refused with ErrSuperseded,
// before and after the newest has stored, and leaves the value alone.
func TestClaimFencedNewestWins(t *testing.T) {
	_, ls := newLockers(t, 2)
	a, b := ls[0], ls[1]
	ctx := t.Context()

	older := tokenOf(t, a, "report")
	if err := a.ClaimFenced(ctx, "report", older, []byte("a"), time.Minute); err != nil {
		t.Fatalf("ClaimFenced with the newest token: %v", err)
	}
	wantClaim(t, b, "report", "a")

	newer := mustAcquire(t, ctx, b, "report")
	defer mustRelease(t, newer)
	err := a.ClaimFenced(ctx, "report", older, []byte("stale"), time.Minute)
	if !errors.Is(err, guard.ErrSuperseded) || !strings.Contains(err.Error(), fmt.Sprint(newer.Token())) {
		t.Fatalf("older token after a newer acquisition: %v, want ErrSuperseded naming %d", err, newer.Token())
	}
	wantClaim(t, b, "report", "a") // refused before the newer hold stored anything
	if err := b.ClaimFenced(ctx, "report", newer.Token(), []byte("b"), time.Minute); err != nil {
		t.Fatalf("newer token: %v", err)
	}
	if err := a.ClaimFenced(ctx, "report", older, []byte("stale"), time.Minute); !errors.Is(err, guard.ErrSuperseded) {
		t.Fatalf("older token after the newer stored: %v, want ErrSuperseded", err)
	}
	wantClaim(t, a, "report", "b")
	// A token the counter never reached is not the newest either.
	if err := b.ClaimFenced(ctx, "report", newer.Token()+1, []byte("future"), time.Minute); !errors.Is(err, guard.ErrSuperseded) {
		t.Fatalf("token above the counter: %v, want ErrSuperseded", err)
	}
	wantClaim(t, a, "report", "b")
}

// Storing again with the same token replaces the value and restarts its
// TTL, counted on the server: a retry is harmless.
func TestClaimFencedRetry(t *testing.T) {
	srv, ls := newLockers(t, 1)
	l, admin := ls[0], srv.Client(t)
	le := mustAcquire(t, t.Context(), l, "retried")
	defer mustRelease(t, le)
	if err := l.ClaimFenced(t.Context(), "retried", le.Token(), []byte("v"), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.ClaimFenced(t.Context(), "retried", le.Token(), []byte("v"), time.Hour); err != nil {
		t.Fatalf("retry with the same token: %v", err)
	}
	wantClaim(t, l, "retried", "v")
	if ttl := admin.PTTL(t.Context(), claimKey("retried")).Val(); ttl <= time.Second || ttl > time.Hour {
		t.Fatalf("claim PTTL %v after the retry, want the retry's hour", ttl)
	}
}

// A re-entry keeps the outer hold's token, so it stores; a read hold is
// superseded as soon as another reader joins, since each acquisition mints
// a token.
func TestClaimFencedReentryAndReaders(t *testing.T) {
	_, ls := newLockers(t, 2)
	l := ls[0]
	err := l.WithLock(t.Context(), "job", func(ctx context.Context) error {
		return l.WithLock(ctx, "job", func(ctx context.Context) error {
			token, _ := guard.TokenFrom(ctx, "job")
			return l.ClaimFenced(ctx, "job", token, []byte("inner"), time.Minute)
		})
	})
	if err != nil {
		t.Fatalf("ClaimFenced from a re-entry: %v", err)
	}
	wantClaim(t, l, "job", "inner")

	r1 := mustAcquireRead(t, ls[0], "shared")
	defer mustRelease(t, r1)
	r2 := mustAcquireRead(t, ls[1], "shared")
	defer mustRelease(t, r2)
	if err := ls[0].ClaimFenced(t.Context(), "shared", r1.Token(), []byte("r1"), time.Minute); !errors.Is(err, guard.ErrSuperseded) {
		t.Fatalf("first reader after a second joined: %v, want ErrSuperseded", err)
	}
	if err := ls[1].ClaimFenced(t.Context(), "shared", r2.Token(), []byte("r2"), time.Minute); err != nil {
		t.Fatalf("newest reader: %v", err)
	}
	wantClaim(t, ls[0], "shared", "r2")
}

func mustAcquireRead(t *testing.T, l *guard.Locker, key string) *guard.Lease {
	t.Helper()
	le, err := l.AcquireRead(t.Context(), key, guard.Wait(0))
	if err != nil {
		t.Fatalf("AcquireRead(%q): %v", key, err)
	}
	return le
}

// A key whose fencing counter is gone refuses every token, the newest
// included: nothing can prove it the newest. The next acquisition starts
// the counter again, above every earlier token, and its token stores.
func TestClaimFencedMissingCounter(t *testing.T) {
	srv, ls := newLockers(t, 1)
	l, admin := ls[0], srv.Client(t)
	ctx := t.Context()

	t.Run("lost", func(t *testing.T) {
		older := tokenOf(t, l, "lost")
		newest := tokenOf(t, l, "lost")
		if err := l.ClaimFenced(ctx, "lost", newest, []byte("newest"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := admin.Del(ctx, fenceKey("lost")).Err(); err != nil { // as a failover that lost it would
			t.Fatal(err)
		}
		for _, token := range []int64{older, newest} {
			err := l.ClaimFenced(ctx, "lost", token, []byte("after the loss"), time.Minute)
			if !errors.Is(err, guard.ErrSuperseded) || !strings.Contains(err.Error(), "gone") {
				t.Fatalf("token %d without a counter: %v, want ErrSuperseded (counter gone)", token, err)
			}
		}
		wantClaim(t, l, "lost", "newest")
		if admin.Exists(ctx, fenceKey("lost")).Val() != 0 {
			t.Fatal("ClaimFenced made a counter")
		}
		next := tokenOf(t, l, "lost")
		if next <= newest {
			t.Fatalf("token %d after the counter was lost, want above %d", next, newest)
		}
		if err := l.ClaimFenced(ctx, "lost", next, []byte("next"), time.Minute); err != nil {
			t.Fatalf("next acquisition's token: %v", err)
		}
		wantClaim(t, l, "lost", "next")
	})

	t.Run("expired", func(t *testing.T) {
		// FenceTTL(1ms) lets the counter expire a lease TTL (300ms) after
		// the acquisition; the claim outlives it.
		token := tokenOf(t, l, "expired", guard.TTL(300*time.Millisecond), guard.FenceTTL(time.Millisecond))
		if err := l.ClaimFenced(ctx, "expired", token, []byte("v"), time.Minute); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for admin.Exists(ctx, fenceKey("expired")).Val() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("fencing counter still there; PTTL %v", admin.PTTL(ctx, fenceKey("expired")).Val())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := l.ClaimFenced(ctx, "expired", token, []byte("late"), time.Minute); !errors.Is(err, guard.ErrSuperseded) {
			t.Fatalf("after the counter expired: %v, want ErrSuperseded", err)
		}
		wantClaim(t, l, "expired", "v")
	})
}

// A counter or claim of another type is reported, not overwritten.
func TestClaimFencedWrongType(t *testing.T) {
	srv, ls := newLockers(t, 1)
	l, admin := ls[0], srv.Client(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		plant func(key string) error
	}{
		{"counter is a hash", func(key string) error { return admin.HSet(ctx, fenceKey(key), "f", "1").Err() }},
		{"counter is not a number", func(key string) error { return admin.Set(ctx, fenceKey(key), "1e300", 0).Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			if err := tc.plant(key); err != nil {
				t.Fatal(err)
			}
			if err := l.ClaimFenced(ctx, key, 1, []byte("v"), time.Minute); !errors.Is(err, guard.ErrWrongType) {
				t.Fatalf("ClaimFenced = %v, want ErrWrongType", err)
			}
			if admin.Exists(ctx, claimKey(key)).Val() != 0 {
				t.Fatal("a claim was stored")
			}
		})
	}
	t.Run("claim is a list", func(t *testing.T) {
		token := tokenOf(t, l, "listed")
		if err := admin.RPush(ctx, claimKey("listed"), "x").Err(); err != nil {
			t.Fatal(err)
		}
		if err := l.ClaimFenced(ctx, "listed", token, []byte("v"), time.Minute); !errors.Is(err, guard.ErrWrongType) {
			t.Fatalf("ClaimFenced = %v, want ErrWrongType", err)
		}
		if typ := admin.Type(ctx, claimKey("listed")).Val(); typ != "list" {
			t.Fatalf("the claim key is now a %s", typ)
		}
	})
}

func TestClaimFencedRejectsBadInput(t *testing.T) {
	srv, ls := newLockers(t, 1)
	l := ls[0]
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		key   string
		token int64
		ttl   time.Duration
	}{
		{"nil context", nil, "k", 1, time.Second}, //nolint:staticcheck
		{"empty key", ctx, "", 1, time.Second},
		{"key with }", ctx, "a}b", 1, time.Second},
		{"zero token", ctx, "k", 0, time.Second},
		{"negative token", ctx, "k", -1, time.Second},
		{"zero TTL", ctx, "k", 1, 0},
		{"negative TTL", ctx, "k", 1, -time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := l.ClaimFenced(tc.ctx, tc.key, tc.token, []byte("v"), tc.ttl); !errors.Is(err, guard.ErrInvalid) {
				t.Fatalf("ClaimFenced = %v, want ErrInvalid", err)
			}
		})
	}
	closed := newLocker(t, srv.Addr())
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if err := closed.ClaimFenced(ctx, "k", 1, []byte("v"), time.Second); !errors.Is(err, guard.ErrClosed) {
		t.Fatalf("closed Locker: %v, want ErrClosed", err)
	}
}

// However the stores of a stale and a newer holder interleave, the newer
// one's value is what remains, and the stale one is always refused.
func TestClaimFencedStaleNeverWins(t *testing.T) {
	_, ls := newLockers(t, 2)
	stale, newer := ls[0], ls[1]
	for i := range 50 {
		key := fmt.Sprintf("race-%d", i)
		old := tokenOf(t, stale, key)
		le := mustAcquire(t, t.Context(), newer, key)
		var wg sync.WaitGroup
		var staleErr, newerErr error
		wg.Go(func() { staleErr = stale.ClaimFenced(t.Context(), key, old, []byte("stale"), time.Minute) })
		wg.Go(func() { newerErr = newer.ClaimFenced(t.Context(), key, le.Token(), []byte("newer"), time.Minute) })
		wg.Wait()
		mustRelease(t, le)
		if !errors.Is(staleErr, guard.ErrSuperseded) || newerErr != nil {
			t.Fatalf("round %d: stale %v, newer %v; want ErrSuperseded and nil", i, staleErr, newerErr)
		}
		wantClaim(t, stale, key, "newer")
	}
}

// On Cluster the claim lives in its lock's slot, and the check works on
// every master.
func TestClaimFencedCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	l, cc := newClusterLocker(t, c)
	a, b := keysOnMasters(t, c)
	for _, name := range []string{a, b} {
		lockSlot := cc.ClusterKeySlot(t.Context(), lockKey(name)).Val()
		if slot := cc.ClusterKeySlot(t.Context(), claimKey(name)).Val(); slot != lockSlot {
			t.Fatalf("%s: claim in slot %d, lock in slot %d", name, slot, lockSlot)
		}
		older := tokenOf(t, l, name)
		newer := tokenOf(t, l, name)
		if err := l.ClaimFenced(t.Context(), name, older, []byte("stale"), time.Minute); !errors.Is(err, guard.ErrSuperseded) {
			t.Fatalf("%s: older token: %v, want ErrSuperseded", name, err)
		}
		if err := l.ClaimFenced(t.Context(), name, newer, []byte("newer"), time.Minute); err != nil {
			t.Fatalf("%s: newest token: %v", name, err)
		}
		wantClaim(t, l, name, "newer")
		master := c.MasterOf(t, lockKey(name)).Client(t)
		if v := master.Get(t.Context(), claimKey(name)).Val(); v != "newer" {
			t.Fatalf("%s: GET on its master = %q", name, v)
		}
	}
	if err := cc.Set(t.Context(), fenceKey(a), "not a counter", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.ClaimFenced(t.Context(), a, 1, []byte("v"), time.Minute); !errors.Is(err, guard.ErrWrongType) {
		t.Fatalf("wrong-type counter on Cluster: %v, want ErrWrongType", err)
	}
}
