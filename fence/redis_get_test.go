package fence_test

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/fence"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The lost update that fencing the write alone lets through, and that Get
// prevents: an older holder wakes from a pause after a newer holder read
// the value, and writes before the newer holder does.
func TestRedisGetPreventsLostUpdate(t *testing.T) {
	redisTopologies(t, func(t *testing.T, client, admin redis.UniversalClient) {
		f := fence.NewRedis(client)
		ctx := t.Context()
		for _, key := range redisKeys {
			// Without Get: the newer holder (2) reads plainly, the older (1)
			// writes its increment, the newer writes its own over it. Both
			// writes are accepted; one increment is lost.
			plain := "plain-" + key
			if err := f.Set(ctx, plain, "0", 1, 0); err != nil {
				t.Fatal(err)
			}
			newerRead := get(t, admin, plain)
			if err := f.Set(ctx, plain, "1", 1, 0); err != nil {
				t.Fatalf("%s: the older write after a plain read was refused (%v): the scenario shows nothing", key, err)
			}
			if err := f.Set(ctx, plain, increment(t, newerRead), 2, 0); err != nil {
				t.Fatal(err)
			}
			if v := get(t, admin, plain); v != "1" {
				t.Fatalf("%s: plain read: counter %s after two increments accepted, want the lost update (1)", key, v)
			}

			// With Get the older holder's write is refused, and the newer
			// one's read is the value its write replaces.
			if err := f.Set(ctx, key, "0", 1, 0); err != nil {
				t.Fatal(err)
			}
			v, found, err := f.Get(ctx, key, 2)
			if err != nil || !found || string(v) != "0" {
				t.Fatalf("%s: Get with 2: %q, %v, %v, want 0", key, v, found, err)
			}
			err = f.Set(ctx, key, "1", 1, 0)
			var se *fence.StaleError
			if !errors.As(err, &se) || *se != (fence.StaleError{Resource: key, Token: 1, Newer: 2}) {
				t.Fatalf("%s: the older Set after the newer Get: %v, want a StaleError for 1 and 2", key, err)
			}
			if err := f.Set(ctx, key, increment(t, string(v)), 2, 0); err != nil {
				t.Fatal(err)
			}
			if v := get(t, admin, key); v != "1" {
				t.Fatalf("%s: counter %s, want 1 (one increment accepted)", key, v)
			}
		}
	})
}

func increment(t *testing.T, s string) string {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("counter %q: %v", s, err)
	}
	return strconv.Itoa(n + 1)
}

// Get reads a missing key as not found, refuses a lower token, lets an
// equal one through, and compares large tokens exactly.
func TestRedisGetRefusesLowerTokens(t *testing.T) {
	redisTopologies(t, func(t *testing.T, client, admin redis.UniversalClient) {
		f := fence.NewRedis(client)
		ctx := t.Context()
		for _, key := range redisKeys {
			v, found, err := f.Get(ctx, key, 5)
			if err != nil || found || v != nil {
				t.Fatalf("%s: Get of a missing key: %q, %v, %v, want not found", key, v, found, err)
			}
			// The read recorded 5: a lower write is refused, though the key
			// was never written.
			if err := f.Set(ctx, key, "x", 4, 0); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("%s: Set with 4 after Get with 5: %v, want ErrStale", key, err)
			}
			if err := f.Set(ctx, key, "", 5, 0); err != nil {
				t.Fatal(err)
			}
			v, found, err = f.Get(ctx, key, 5)
			if err != nil || !found || len(v) != 0 {
				t.Fatalf("%s: Get of an empty value: %q, %v, %v, want found and empty", key, v, found, err)
			}
			_, _, err = f.Get(ctx, key, 3)
			var se *fence.StaleError
			if !errors.As(err, &se) || *se != (fence.StaleError{Resource: key, Token: 3, Newer: 5}) {
				t.Fatalf("%s: Get with 3 after 5: %v, want a StaleError for 3 and 5", key, err)
			}
		}
		// Tokens beyond 2^53 differ by one.
		const big = int64(1) << 60
		if err := f.Set(ctx, "big", "b", big+1, 0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.Get(ctx, "big", big); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Get with 2^60 after 2^60+1: %v, want ErrStale", err)
		}
		if v, _, err := f.Get(ctx, "big", big+2); err != nil || string(v) != "b" {
			t.Fatalf("Get with 2^60+2: %q, %v", v, err)
		}
		if tok := get(t, admin, "fence:{big}"); tok != strconv.FormatInt(big+2, 10) {
			t.Fatalf("token key holds %s after Get with 2^60+2", tok)
		}
	})
}

// The token a Get records lives at least as long as the value, is never
// given a shorter TTL, and is kept for good when there is neither a value
// nor a recorded token yet; once it has expired with the value, a lower
// token's write is accepted again, as documented (and as with Set).
func TestRedisGetKeepsTokenAsLongAsValue(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client(t)
	f := fence.NewRedis(s.Client(t))
	ctx := t.Context()
	pttl := func(key string) time.Duration { return pttlOf(t, admin, key) }
	if _, _, err := f.Get(ctx, "none", 1); err != nil {
		t.Fatal(err)
	}
	if tok := pttl("fence:{none}"); tok != -1 {
		t.Errorf("token of a key read before any value: TTL %v, want none", tok)
	}
	admin.Set(ctx, "k", "v", time.Hour) // written without the fence
	if _, _, err := f.Get(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if tok, v := pttl("fence:{k}"), pttl("k"); tok < v || v <= 59*time.Minute {
		t.Errorf("value TTL %v, token TTL %v: want the token's at least the value's", v, tok)
	}
	admin.Set(ctx, "k", "v", time.Minute)
	if _, _, err := f.Get(ctx, "k", 2); err != nil {
		t.Fatal(err)
	}
	if tok := pttl("fence:{k}"); tok <= 59*time.Minute {
		t.Errorf("token TTL %v after a Get of a value with 1m left, want the 1h kept", tok)
	}

	// A short-lived value: the record ends with it, and then nothing is
	// left to refuse an older token.
	admin.Set(ctx, "short", "v", 150*time.Millisecond)
	if _, _, err := f.Get(ctx, "short", 5); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, "short", "stale", 4, 0); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Set with 4 right after Get with 5: %v, want ErrStale", err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := f.Set(ctx, "short", "after expiry", 4, 0); err != nil {
		t.Fatalf("Set with 4 after the value and its record expired: %v, want it accepted (nothing to compare with)", err)
	}
}

// Concurrent read-modify-writes of one counter, each holder with a higher
// token than the last one drawn: every increment accepted is in the final
// value, none lost.
func TestRedisGetConcurrentIncrements(t *testing.T) {
	redisTopologies(t, func(t *testing.T, client, admin redis.UniversalClient) {
		f := fence.NewRedis(client)
		const workers, rounds, key = 8, 40, "{counter}:rmw"
		var next, accepted atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range rounds {
					tok := next.Add(1)
					v, found, err := f.Get(t.Context(), key, tok)
					if errors.Is(err, fence.ErrStale) {
						continue
					}
					if err != nil {
						t.Errorf("Get with %d: %v", tok, err)
						return
					}
					n := 0
					if found {
						if n, err = strconv.Atoi(string(v)); err != nil {
							t.Errorf("counter %q", v)
							return
						}
					}
					switch err := f.Set(t.Context(), key, n+1, tok, 0); {
					case err == nil:
						accepted.Add(1)
					case !errors.Is(err, fence.ErrStale):
						t.Errorf("Set with %d: %v", tok, err)
						return
					}
				}
			})
		}
		wg.Wait()
		t.Logf("%d increments tried, %d accepted", workers*rounds, accepted.Load())
		if v := get(t, admin, key); v != fmt.Sprint(accepted.Load()) {
			t.Errorf("counter %s after %d accepted increments: an update was lost", v, accepted.Load())
		}
	})
}
