package fence_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/fence"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// redisTopologies runs test on a standalone server and on a 3-master
// Cluster, with a client for the fence and one for looking at the keys.
func redisTopologies(t *testing.T, test func(t *testing.T, client, admin redis.UniversalClient)) {
	t.Run("standalone", func(t *testing.T) {
		s := redistest.Start(t)
		test(t, s.Client(t), s.Client(t))
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		test(t, c.Client(t), c.Client(t))
	})
}

// Keys with and without a hash tag, spread over the Cluster's masters.
var redisKeys = []string{"report", "user:{42}:profile", "a{b", "{tagged}", "x", "y", "z"}

// pttlOf returns key's PTTL as the server reports it (-1: no expiry, -2:
// no key).
func pttlOf(t *testing.T, admin redis.UniversalClient, key string) time.Duration {
	t.Helper()
	d, err := admin.PTTL(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func get(t *testing.T, admin redis.UniversalClient, key string) string {
	t.Helper()
	v, err := admin.Get(t.Context(), key).Result()
	if errors.Is(err, redis.Nil) {
		return "<none>"
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

func TestRedisSetAndDelRefuseLowerTokens(t *testing.T) {
	redisTopologies(t, func(t *testing.T, client, admin redis.UniversalClient) {
		f := fence.NewRedis(client)
		ctx := t.Context()
		for _, key := range redisKeys {
			for _, tok := range []int64{5, 9, 9} { // higher, then equal
				if err := f.Set(ctx, key, fmt.Sprint("v", tok), tok, 0); err != nil {
					t.Fatalf("%s: Set with %d: %v", key, tok, err)
				}
			}
			err := f.Set(ctx, key, "stale", 8, 0)
			var se *fence.StaleError
			if !errors.As(err, &se) || !errors.Is(err, fence.ErrStale) || *se != (fence.StaleError{Resource: key, Token: 8, Newer: 9}) {
				t.Fatalf("%s: Set with 8 after 9: %v, want a StaleError for 8 and 9", key, err)
			}
			if v := get(t, admin, key); v != "v9" {
				t.Errorf("%s holds %q after a refused Set, want v9", key, v)
			}
			if err := f.Del(ctx, key, 8); !errors.Is(err, fence.ErrStale) {
				t.Errorf("%s: Del with 8 after 9: %v, want ErrStale", key, err)
			}
			if v := get(t, admin, key); v != "v9" {
				t.Errorf("%s holds %q after a refused Del, want v9", key, v)
			}
			if err := f.Del(ctx, key, 10); err != nil {
				t.Fatalf("%s: Del with 10: %v", key, err)
			}
			if v := get(t, admin, key); v != "<none>" {
				t.Errorf("%s holds %q after Del, want nothing", key, v)
			}
			// The token outlives the value: a stale write after the delete
			// is still refused; the same hold may delete again.
			if err := f.Set(ctx, key, "stale", 9, 0); !errors.Is(err, fence.ErrStale) {
				t.Errorf("%s: Set with 9 after Del with 10: %v, want ErrStale", key, err)
			}
			if err := f.Del(ctx, key, 10); err != nil {
				t.Errorf("%s: Del with an equal token of a missing key: %v", key, err)
			}
			if err := f.Set(ctx, key, []byte("v11"), 11, 0); err != nil || get(t, admin, key) != "v11" {
				t.Errorf("%s: Set with 11: %v, holds %q", key, err, get(t, admin, key))
			}
		}
	})
}

// Tokens are compared exactly, also above 2^53, where Lua's numbers (doubles)
// could not tell them apart.
func TestRedisComparesLargeTokensExactly(t *testing.T) {
	s := redistest.Start(t)
	f := fence.NewRedis(s.Client(t))
	ctx := t.Context()
	for _, c := range []struct{ high, low int64 }{
		{1<<53 + 1, 1 << 53},
		{math.MaxInt64, math.MaxInt64 - 1},
		{1_785_000_000_000_001, 1_785_000_000_000_000},
		{100, 99}, // different lengths
	} {
		key := fmt.Sprint("k", c.high)
		if err := f.Set(ctx, key, "high", c.high, 0); err != nil {
			t.Fatal(err)
		}
		var se *fence.StaleError
		if err := f.Set(ctx, key, "low", c.low, 0); !errors.As(err, &se) || se.Newer != c.high {
			t.Errorf("Set with %d after %d: %v, want stale against %d", c.low, c.high, err, c.high)
		}
		if err := f.Set(ctx, key, "again", c.high, 0); err != nil {
			t.Errorf("Set with an equal token %d: %v", c.high, err)
		}
	}
}

// The recorded token lives at least as long as the value, and its TTL is
// never shortened; without a TTL both stay.
func TestRedisTokenOutlivesValue(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client(t)
	f := fence.NewRedis(s.Client(t))
	ctx := t.Context()
	pttl := func(key string) time.Duration { return pttlOf(t, admin, key) }
	const tk = "fence:{k}" // the documented token key of k

	if err := f.Set(ctx, "k", "a", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	// The token's TTL is read first: read second, it would be a few
	// milliseconds lower than the value's for no fault of the script.
	if tok, v := pttl(tk), pttl("k"); v <= 59*time.Minute || tok < v {
		t.Errorf("value TTL %v, token TTL %v: want about 1h, and the token's at least the value's", v, tok)
	}
	if err := f.Set(ctx, "k", "b", 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	if v, tok := pttl("k"), pttl(tk); v > time.Minute || tok <= 59*time.Minute {
		t.Errorf("after a 1m Set: value TTL %v, token TTL %v: want 1m and the 1h kept", v, tok)
	}
	if err := f.Del(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	if tok := pttl(tk); tok <= 59*time.Minute {
		t.Errorf("after Del the token's TTL is %v, want the 1h kept", tok)
	}
	if err := f.Set(ctx, "k", "c", 4, 0); err != nil {
		t.Fatal(err)
	}
	if v, tok := pttl("k"), pttl(tk); v != -1 || tok != -1 {
		t.Errorf("after a Set without TTL: value TTL %v, token TTL %v, want no expiry on both", v, tok)
	}
	if err := f.Set(ctx, "k", "d", 5, time.Second); err != nil {
		t.Fatal(err)
	}
	if v, tok := pttl("k"), pttl(tk); v <= 0 || v > time.Second || tok != -1 {
		t.Errorf("after a 1s Set: value TTL %v, token TTL %v: want 1s, and the token kept for good", v, tok)
	}

	// Sub-millisecond TTLs round up rather than meaning "no expiry".
	if err := f.Set(ctx, "short", "x", 1, time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if v := pttl("short"); v == -1 {
		t.Errorf("a 1µs TTL left the value without expiry")
	}
}

// Writers with interleaved tokens race on one key: the value left is the
// highest token's, and every refusal names a higher token.
func TestRedisConcurrentWriters(t *testing.T) {
	redisTopologies(t, func(t *testing.T, client, admin redis.UniversalClient) {
		f := fence.NewRedis(client)
		const workers, rounds = 8, 50
		var next, highest, refused atomic.Int64
		next.Store(1_785_000_000_000_000)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range rounds {
					tok := next.Add(1)
					err := f.Set(t.Context(), "{counter}:value", fmt.Sprint(tok), tok, time.Minute)
					var se *fence.StaleError
					switch {
					case err == nil:
						for h := highest.Load(); tok > h && !highest.CompareAndSwap(h, tok); h = highest.Load() {
						}
					case errors.As(err, &se) && se.Newer > tok:
						refused.Add(1)
					default:
						t.Errorf("Set with %d: %v", tok, err)
						return
					}
				}
			})
		}
		wg.Wait()
		t.Logf("%d Sets, %d refused as stale", workers*rounds, refused.Load())
		want := fmt.Sprint(next.Load())
		if v := get(t, admin, "{counter}:value"); v != want || fmt.Sprint(highest.Load()) != want {
			t.Errorf("value %s, highest accepted %d, want both %s (the last token drawn)", v, highest.Load(), want)
		}
	})
}

func TestRedisBadInput(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client(t)
	f := fence.NewRedis(s.Client(t))
	var nilCtx context.Context
	for _, c := range []struct {
		name  string
		f     *fence.Redis
		ctx   context.Context
		key   string
		token int64
		ttl   time.Duration
		want  string
	}{
		{"nil client", fence.NewRedis(nil), t.Context(), "k", 1, 0, "nil Redis client"},
		{"nil fence", nil, t.Context(), "k", 1, 0, "nil Redis client"},
		{"nil ctx", f, nilCtx, "k", 1, 0, "nil context"},
		{"empty key", f, t.Context(), "", 1, 0, "empty key"},
		{"zero token", f, t.Context(), "k", 0, 0, "token 0"},
		{"negative token", f, t.Context(), "k", -3, 0, "token -3"},
		{"negative TTL", f, t.Context(), "k", 1, -time.Second, "TTL -1s"},
		{"brace without tag", f, t.Context(), "a}b", 1, 0, "hash tag"},
		{"empty tag", f, t.Context(), "{}b", 1, 0, "hash tag"},
	} {
		err := c.f.Set(c.ctx, c.key, "v", c.token, c.ttl)
		if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Set with %s: %v, want ErrInvalid saying %q", c.name, err, c.want)
		}
		if c.ttl < 0 {
			continue // Del has no TTL
		}
		err = c.f.Del(c.ctx, c.key, c.token)
		if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Del with %s: %v, want ErrInvalid saying %q", c.name, err, c.want)
		}
		v, found, err := c.f.Get(c.ctx, c.key, c.token)
		if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), c.want) || found || v != nil {
			t.Errorf("Get with %s: %q, %v, %v, want ErrInvalid saying %q", c.name, v, found, err, c.want)
		}
	}

	// A token key that holds something else is an error, not a refusal.
	ctx := t.Context()
	admin.Set(ctx, "fence:{junk}", "not-a-token", 0)
	if err := f.Set(ctx, "junk", "v", 1, 0); err == nil || errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), "not a fencing token") {
		t.Errorf("Set beside a junk token: %v, want an error saying so", err)
	}
	admin.HSet(ctx, "fence:{hash}", "f", "v")
	if err := f.Del(ctx, "hash", 1); err == nil || errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Del beside a hash: %v, want WRONGTYPE", err)
	}
	if _, _, err := f.Get(ctx, "junk", 1); err == nil || errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), "not a fencing token") {
		t.Errorf("Get beside a junk token: %v, want an error saying so", err)
	}
}
