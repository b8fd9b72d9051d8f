package redisstore

import (
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A retried release_claim whose first try stored the value and granted
// the key to a waiting writer (a newer token) still answers "stored": the
// claim holds the value, whatever the counter says now.
func TestReleaseClaimRetryAfterGrantIsStored(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	s := New(client, Options{})
	k := store.KeysFor("guard:", "rc")
	claim := "guard:{rc}:claim"
	ctx := t.Context()

	holder := store.AcquireArgs{Owner: "HOLDER", TTL: 10 * time.Second, Write: true}
	got, err := s.Acquire(ctx, k, holder)
	if err != nil || !got.Acquired {
		t.Fatalf("Acquire: %+v, %v", got, err)
	}
	// A writer that takes grants waits for the key.
	waiter := store.AcquireArgs{Owner: "WAITER", TTL: 10 * time.Second, Write: true, Waiter: "locker-2"}
	if busy, err := s.Acquire(ctx, k, waiter); err != nil || busy.Acquired {
		t.Fatalf("waiter's Acquire: %+v, %v; want busy", busy, err)
	}
	release := store.CountArgs{Owner: "HOLDER", Marker: 5 * time.Second}
	value := []byte("the result")
	first, err := s.ReleaseClaim(ctx, k, claim, got.Token, value, time.Minute, release)
	if err != nil || first.Outcome != store.Applied || first.Counter != got.Token {
		t.Fatalf("first ReleaseClaim: %+v, %v; want applied and stored", first, err)
	}
	if tok, err := client.HGet(ctx, k.Lock, "WAITER:t").Int64(); err != nil || tok <= got.Token {
		t.Fatalf("the release did not grant the key to the waiter: token %d, %v", tok, err)
	}
	// The retry, as if the first answer had been lost.
	retry, err := s.ReleaseClaim(ctx, k, claim, got.Token, value, time.Minute, release)
	if err != nil || retry.Outcome != store.Applied || retry.Counter != got.Token || retry.ClaimErr != nil {
		t.Fatalf("retried ReleaseClaim: %+v, %v; want applied and stored", retry, err)
	}
	// Another value under the old token is still refused.
	other, err := s.ReleaseClaim(ctx, k, claim, got.Token, []byte("another"), time.Minute, release)
	if err != nil || other.Counter == got.Token {
		t.Fatalf("ReleaseClaim of another value under a superseded token: %+v, %v; want refused", other, err)
	}
	if v, _ := client.Get(ctx, claim).Result(); v != string(value) {
		t.Fatalf("claim = %q, want %q", v, value)
	}
}
