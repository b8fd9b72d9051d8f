package guard_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
)

func TestClaimExpires(t *testing.T) {
	_, ls := newLockers(t, 1)
	if ok, err := ls[0].Claim(t.Context(), "short", []byte("x"), 100*time.Millisecond); !ok || err != nil {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, ok, err := ls[0].Claimed(t.Context(), "short"); ok || err != nil {
		t.Fatalf("Claimed after expiry = %v, %v; want nothing", ok, err)
	}
	if ok, err := ls[0].Claim(t.Context(), "short", []byte("y"), time.Second); !ok || err != nil {
		t.Fatalf("Claim after expiry = %v, %v; want stored", ok, err)
	}
}

func TestClaimRejectsBadInput(t *testing.T) {
	_, ls := newLockers(t, 1)
	if _, err := ls[0].Claim(t.Context(), "", nil, time.Second); !errors.Is(err, guard.ErrInvalid) {
		t.Errorf("empty key: err = %v, want ErrInvalid", err)
	}
	if _, err := ls[0].Claim(t.Context(), "k", nil, 0); !errors.Is(err, guard.ErrInvalid) {
		t.Errorf("zero TTL: err = %v, want ErrInvalid", err)
	}
	if _, _, err := ls[0].Claimed(t.Context(), "a}b"); !errors.Is(err, guard.ErrInvalid) {
		t.Errorf("bad key: err = %v, want ErrInvalid", err)
	}
}

func TestFenceTTL(t *testing.T) {
	srv, ls := newLockers(t, 1)
	client := srv.Client(t)
	l := ls[0]
	// Without FenceTTL the counter is kept forever.
	mustRelease(t, mustAcquire(t, t.Context(), l, "kept"))
	if ttl := client.PTTL(t.Context(), "guard:{kept}:fence").Val(); ttl != -1 {
		t.Fatalf("counter PTTL %v without FenceTTL, want none (-1)", ttl)
	}
	// With it, a fresh counter expires, and tokens still rise while in use.
	first := mustAcquire(t, t.Context(), l, "once", guard.FenceTTL(time.Minute))
	mustRelease(t, first)
	second := mustAcquire(t, t.Context(), l, "once", guard.FenceTTL(time.Minute))
	mustRelease(t, second)
	if second.Token() <= first.Token() {
		t.Fatalf("tokens %d then %d, want increasing", first.Token(), second.Token())
	}
	if ttl := client.PTTL(t.Context(), "guard:{once}:fence").Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("counter PTTL %v with FenceTTL(1m), want (0, 1m]", ttl)
	}
	// A fresh counter outlives the lease it was minted for: a FenceTTL
	// shorter than the TTL gives way to the TTL.
	mustRelease(t, mustAcquire(t, t.Context(), l, "short", guard.FenceTTL(time.Second), guard.TTL(time.Minute)))
	if ttl := client.PTTL(t.Context(), "guard:{short}:fence").Val(); ttl <= 59*time.Second || ttl > time.Minute {
		t.Fatalf("counter PTTL %v with FenceTTL(1s) and TTL(1m), want the TTL", ttl)
	}
	// A counter that was persistent stays persistent: its tokens must keep rising.
	mustRelease(t, mustAcquire(t, t.Context(), l, "kept", guard.FenceTTL(time.Minute)))
	if ttl := client.PTTL(t.Context(), "guard:{kept}:fence").Val(); ttl != -1 {
		t.Fatalf("persistent counter got PTTL %v from FenceTTL, want none", ttl)
	}
}

func TestValidateLockOptions(t *testing.T) {
	_, ls := newLockers(t, 1)
	if err := ls[0].ValidateLockOptions(guard.TTL(time.Minute), guard.Wait(0), guard.FenceTTL(time.Hour)); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, opt := range []guard.LockOption{guard.TTL(time.Millisecond), guard.Wait(-1), guard.FenceTTL(-1), nil} {
		if err := ls[0].ValidateLockOptions(opt); !errors.Is(err, guard.ErrInvalid) {
			t.Errorf("ValidateLockOptions: err = %v, want ErrInvalid", err)
		}
	}
}
