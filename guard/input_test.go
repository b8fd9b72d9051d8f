package guard_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestNewRejectsBadOptions(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialed
	defer client.Close()
	var nilClient *redis.Client
	tests := []struct {
		name   string
		client redis.UniversalClient
		opts   []guard.Option
		want   string
	}{
		{"nil client", nil, nil, "nil client"},
		{"typed nil client", nilClient, nil, "nil client"},
		{"zero TTL", client, []guard.Option{guard.WithTTL(0)}, "TTL 0s must be positive"},
		{"negative TTL", client, []guard.Option{guard.WithTTL(-time.Second)}, "must be positive"},
		{"interval equals TTL", client, []guard.Option{guard.WithTTL(time.Second), guard.WithRenewInterval(time.Second)}, "less than the TTL"},
		{"zero interval", client, []guard.Option{guard.WithRenewInterval(0)}, "renew interval 0s"},
		{"negative grace", client, []guard.Option{guard.WithStopGrace(-1)}, "stop grace"},
		{"grace does not fit", client, []guard.Option{guard.WithRenewInterval(20 * time.Second), guard.WithStopGrace(9 * time.Second)}, "exceed TTL"},
		{"timeout does not fit", client, []guard.Option{guard.WithRequestTimeout(25 * time.Second)}, "exceed TTL"},
		{"zero request timeout", client, []guard.Option{guard.WithRequestTimeout(0)}, "request timeout"},
		{"prefix with brace", client, []guard.Option{guard.WithPrefix("a{b")}, "prefix"},
		{"nil logger", client, []guard.Option{guard.WithLogger(nil)}, "nil logger"},
		{"nil observer", client, []guard.Option{guard.WithObserver(nil)}, "nil observer"},
		{"nil option", client, []guard.Option{nil}, "nil option"},
		{"replica ack without timeout", client, []guard.Option{guard.WithReplicaAck(1, 0)}, "replica ack"},
		{"replica ack on Cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}),
			[]guard.Option{guard.WithReplicaAck(1, time.Second)}, "Cluster"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := guard.New(tc.client, tc.opts...)
			if !errors.Is(err, guard.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: err = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
			if l != nil {
				t.Fatal("New returned a Locker with its error")
			}
			if c, ok := tc.client.(*redis.ClusterClient); ok {
				_ = c.Close()
			}
		})
	}
}

func TestAcquireRejectsBadInput(t *testing.T) {
	_, ls := newLockers(t, 1)
	l := ls[0]
	tests := []struct {
		name string
		key  string
		opts []guard.LockOption
		want string
	}{
		{"empty key", "", nil, "empty key"},
		{"key with closing brace", "a}b", nil, "'}'"},
		{"negative wait", "k", []guard.LockOption{guard.Wait(-time.Second)}, "wait"},
		{"zero TTL", "k", []guard.LockOption{guard.TTL(0)}, "TTL"},
		{"TTL too short for its schedule", "k", []guard.LockOption{guard.TTL(time.Millisecond)}, "exceed TTL"},
		{"negative MinHold", "k", []guard.LockOption{guard.MinHold(-time.Second)}, "MinHold"},
		{"nil lock option", "k", []guard.LockOption{nil}, "nil lock option"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			le, err := l.Acquire(t.Context(), tc.key, tc.opts...)
			if !errors.Is(err, guard.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Acquire: err = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
			if le != nil {
				t.Fatal("Acquire returned a lease with its error")
			}
		})
	}
	if err := l.WithLock(t.Context(), "k", nil); !errors.Is(err, guard.ErrInvalid) {
		t.Fatalf("WithLock with nil fn: err = %v, want ErrInvalid", err)
	}
}

// A lock key is capped in length: a client that can choose one (an HTTP
// header, a task payload) must not make Redis keys and messages of any size.
func TestKeyLengthIsCapped(t *testing.T) {
	srv, ls := newLockers(t, 1)
	l := ls[0]
	longest := strings.Repeat("k", 512)
	mustRelease(t, mustAcquire(t, t.Context(), l, longest, guard.Wait(0)))
	for _, key := range []string{strings.Repeat("k", 513), strings.Repeat("x", 1<<20)} {
		calls := map[string]func() error{
			"Acquire": func() error { _, err := l.Acquire(t.Context(), key, guard.Wait(0)); return err },
			"Claim":   func() error { _, err := l.Claim(t.Context(), key, []byte("v"), time.Minute); return err },
			"Inspect": func() error { _, err := l.Inspect(t.Context(), key); return err },
		}
		for name, call := range calls {
			err := call()
			if !errors.Is(err, guard.ErrInvalid) || !strings.Contains(err.Error(), "at most 512") {
				t.Errorf("%s with a key of %d bytes: err = %v, want ErrInvalid naming the limit of 512", name, len(key), err)
			}
			if err != nil && len(err.Error()) > 200 {
				t.Errorf("%s: the error quotes the key (%d bytes)", name, len(err.Error()))
			}
		}
	}
	keys, err := srv.Client(t).Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, strings.Repeat("k", 513)) || strings.Contains(k, "xxxx") {
			t.Errorf("a refused key reached Redis: %.40s... (%d bytes)", k, len(k))
		}
	}
}

func TestWrongTypeKeyNamesTheKey(t *testing.T) {
	srv, ls := newLockers(t, 1)
	client := srv.Client(t)
	for _, k := range []string{"guard:{str}", "guard:{fence}:fence"} {
		if err := client.Set(t.Context(), k, "not a lock", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"str", "fence"} {
		_, err := ls[0].Acquire(t.Context(), key, guard.Wait(0))
		if !errors.Is(err, guard.ErrWrongType) || !strings.Contains(err.Error(), "guard:{"+key+"}") {
			t.Errorf("Acquire(%q): err = %v, want ErrWrongType naming the key", key, err)
		}
	}
}

func TestCanceledContext(t *testing.T) {
	_, ls := newLockers(t, 2)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	// No attempt is made, so Redis said nothing about the key.
	if _, err := ls[0].Acquire(ctx, "canceled"); errors.Is(err, guard.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a canceled ctx: err = %v, want context.Canceled and not ErrNotAcquired", err)
	}
	// Waiting on a busy key ends when ctx does.
	held := mustAcquire(t, t.Context(), ls[0], "busy")
	defer mustRelease(t, held)
	ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := ls[1].Acquire(ctx, "busy")
	if !errors.Is(err, guard.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting Acquire: err = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("waiting Acquire returned %v after its deadline of 200ms", d)
	}
}

func TestWaitBudget(t *testing.T) {
	_, ls := newLockers(t, 2)
	held := mustAcquire(t, t.Context(), ls[0], "budget")
	defer mustRelease(t, held)
	start := time.Now()
	_, err := ls[1].Acquire(t.Context(), "budget", guard.Wait(300*time.Millisecond))
	waited := time.Since(start)
	if !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrNotAcquired", err)
	}
	if waited < 300*time.Millisecond || waited > 2*time.Second {
		t.Fatalf("waited %v for a budget of 300ms", waited)
	}
}

func TestAcquireIsIdempotentForItsOwner(t *testing.T) {
	// go-redis retries a command after a network error; a retried acquire
	// that had been applied must report the hold, not find the key busy.
	srv := redistest.Start(t)
	client := srv.Client(t)
	script := redis.NewScript(readScript(t, "prelude.lua") + readScript(t, "acquire.lua"))
	keys := []string{"guard:{retry}", "guard:{retry}:fence", "guard:{retry}:waiters"}
	first, err := script.Run(t.Context(), client, keys, "owner-1", 10000, "w", "", "id").Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	again, err := script.Run(t.Context(), client, keys, "owner-1", 10000, "w", "", "id").Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if first[0] != 1 || again[0] != 1 || again[1] != first[1] {
		t.Fatalf("first %v, retried %v: want both acquired with the same token", first, again)
	}
	other, err := script.Run(t.Context(), client, keys, "owner-2", 10000, "w", "", "id").Int64Slice()
	if err != nil || other[0] != 0 {
		t.Fatalf("another owner: %v, %v; want busy", other, err)
	}
}

func readScript(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("internal", "redisstore", "scripts", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
