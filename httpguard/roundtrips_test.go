package httpguard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/httpguard"
	"github.com/redis/go-redis/v9"
)

// roundTrips is a go-redis hook that counts requests: each command sent
// alone and each pipeline, except a new connection's handshake (HELLO, and
// CLIENT SETINFO, which go-redis sends as a pipeline of two: counted, it
// made a replay two round trips when the pool opened a connection for it,
// once in a hundred runs).
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.count(cmd)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 {
			r.count(cmds[0])
		}
		return next(ctx, cmds)
	}
}

func (r *roundTrips) count(first redis.Cmder) {
	if name := first.Name(); name != "hello" && name != "client" {
		r.n.Add(1)
	}
}

// What each kind of request costs Redis, in round trips: a fresh key two
// (its claim read, the key acquired and bound in one; the response stored
// and the key released in the other), a replay, a reuse and a key in
// flight one. Quota adds its Charges and a read of the claim before them.
func TestRoundTripsPerRequest(t *testing.T) {
	e := newEnv(t)
	client := e.redis.Client(t)
	var trips roundTrips
	client.AddHook(&trips)
	l, err := guard.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })

	started, release := make(chan struct{}, 1), make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Pause") != "" {
			started <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("done"))
	})
	failing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	plain := httpguard.Middleware(l, httpguard.SharedKeys())(handler)
	quota := httpguard.Middleware(l, httpguard.SharedKeys(), httpguard.Quota(1<<20))(handler)
	unstored := httpguard.Middleware(l, httpguard.SharedKeys())(failing)
	serve := func(h http.Handler, key, body string, header ...string) int {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", key)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	// The first request loads the scripts and has the eviction policy read.
	serve(plain, "warm-up", "x")
	serve(quota, "warm-up-quota", "x")

	count := func(send func() int) (int64, int) {
		before := trips.n.Load()
		status := send()
		return trips.n.Load() - before, status
	}
	check := func(name string, trips int64, status int, send func() int) {
		t.Helper()
		if n, got := count(send); n != trips || got != status {
			t.Errorf("%s: %d round trips, status %d; want %d, %d", name, n, got, trips, status)
		}
	}
	check("fresh key", 2, http.StatusCreated, func() int { return serve(plain, "k1", "x") })
	check("replay", 1, http.StatusCreated, func() int { return serve(plain, "k1", "x") })
	check("reuse", 1, http.StatusUnprocessableEntity, func() int { return serve(plain, "k1", "y") })
	check("response not stored", 2, http.StatusServiceUnavailable, func() int { return serve(unstored, "k2", "x") })
	check("its retry", 2, http.StatusServiceUnavailable, func() int { return serve(unstored, "k2", "x") })

	inFlight := make(chan int, 1)
	go func() { inFlight <- serve(plain, "k3", "x", "X-Pause", "1") }()
	<-started
	check("in flight", 1, http.StatusConflict, func() int { return serve(plain, "k3", "x") })
	check("reuse while in flight", 1, http.StatusUnprocessableEntity, func() int { return serve(plain, "k3", "y") })
	close(release)
	if first := <-inFlight; first != http.StatusCreated {
		t.Errorf("the request in flight: %d", first)
	}

	check("fresh key, Quota", 5, http.StatusCreated, func() int { return serve(quota, "q1", "x") })
	check("replay, Quota", 1, http.StatusCreated, func() int { return serve(quota, "q1", "x") })
}
