package httpguard_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/httpguard"
)

// instance is a second process of the service: its own Redis client,
// Locker and server, on e's Redis.
type instance struct {
	srv *httptest.Server
}

func (e *env) instance(t *testing.T, handler http.Handler) *instance {
	t.Helper()
	l, err := guard.New(e.redis.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", httpguard.Middleware(l)(handler))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &instance{srv: srv}
}

func (in *instance) send(t *testing.T, q req) result {
	t.Helper()
	e := &env{srv: in.srv}
	return e.send(t, q)
}

// paused is a handler that, on its first run, says it started and then
// waits for resume, ignoring its context as a paused process would; it then
// answers 201 with name and reports whether its context was still live.
type paused struct {
	name    string
	started chan struct{}
	resume  chan struct{}
	once    sync.Once
	live    chan bool
	runs    counter
}

// newPaused returns a paused handler. Defer its wake, so that a failing
// test does not hang its servers' Close (which runs later, in Cleanup).
func newPaused(name string) *paused {
	return &paused{name: name, started: make(chan struct{}, 1), resume: make(chan struct{}), live: make(chan bool, 1)}
}

func (p *paused) wake() { p.once.Do(func() { close(p.resume) }) }

func (p *paused) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.runs.inc() == 1 {
		p.started <- struct{}{}
		<-p.resume
		p.live <- r.Context().Err() == nil
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, "from "+p.name)
}

// staleAndNewer starts a request on instance a whose handler pauses, takes
// its lease away in Redis behind a's back (a's Locker renews only every
// 10s, so it does not notice during the test), and starts the same request
// on instance b, which gets the key with a newer token. It returns the
// channel of a's response.
func staleAndNewer(t *testing.T, e *env, a *instance, pa *paused) chan result {
	t.Helper()
	first := make(chan result, 1)
	go func() {
		res, err := (&env{srv: a.srv}).try(post("/orders", "k", "x"))
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	wait(t, pa.started, 5*time.Second, "a's handler starts")
	lockKey := httpguard.LockKey("POST", "POST /orders", "", "k")
	if n, err := e.admin.Del(t.Context(), lockKey).Result(); err != nil || n != 1 {
		t.Fatalf("DEL %s: %d, %v", lockKey, n, err)
	}
	return first
}

// wantReplay checks that a retry, on either instance, replays b's response.
func wantReplay(t *testing.T, a, b *instance, body string) {
	t.Helper()
	for _, in := range []*instance{a, b} {
		res := in.send(t, post("/orders", "k", "x"))
		if res.status != http.StatusCreated || res.body != body || res.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d %q replayed=%q, want a replay of %q", res.status, res.body, res.header.Get("Idempotent-Replayed"), body)
		}
	}
}

// A request whose lease is lost while its handler runs (it does not know:
// it was paused), while a newer request with the same key runs and
// completes first: the stale one's response does not replace the newer
// one's.
func TestFencedCompletionNewerCompletesFirst(t *testing.T) {
	e := newEnv(t)
	pa, pb := newPaused("a"), newPaused("b")
	defer pa.wake()
	defer pb.wake()
	pb.wake() // b does not pause
	a, b := e.instance(t, pa), e.instance(t, pb)

	first := staleAndNewer(t, e, a, pa)
	if res := b.send(t, post("/orders", "k", "x")); res.status != http.StatusCreated || res.body != "from b" {
		t.Fatalf("newer request: %d %q, want 201 from b", res.status, res.body)
	}
	pa.wake()
	if live := wait(t, pa.live, 5*time.Second, "a resumes"); !live {
		t.Fatal("a's context was canceled: the test means a lease lost without a's knowledge")
	}
	if res := wait(t, first, 5*time.Second, "a's response"); res.body != "from a" {
		t.Fatalf("a's response %d %q", res.status, res.body)
	}
	wantReplay(t, a, b, "from b")
	if n := pa.runs.get() + pb.runs.get(); n != 2 {
		t.Errorf("the handlers ran %d times, want 2", n)
	}
}

// The same, but the stale request completes while the newer one still
// runs: its response is not stored, the newer one's is, and retries replay
// the newer one's.
func TestFencedCompletionStaleCompletesFirst(t *testing.T) {
	e := newEnv(t)
	pa, pb := newPaused("a"), newPaused("b")
	defer pa.wake()
	defer pb.wake()
	a, b := e.instance(t, pa), e.instance(t, pb)

	first := staleAndNewer(t, e, a, pa)
	second := make(chan result, 1)
	go func() {
		res, err := (&env{srv: b.srv}).try(post("/orders", "k", "x"))
		if err != nil {
			t.Error(err)
		}
		second <- res
	}()
	wait(t, pb.started, 5*time.Second, "b's handler starts")

	pa.wake() // a completes first, unaware that its lease is gone
	if live := wait(t, pa.live, 5*time.Second, "a resumes"); !live {
		t.Fatal("a's context was canceled: the test means a lease lost without a's knowledge")
	}
	if res := wait(t, first, 5*time.Second, "a's response"); res.body != "from a" {
		t.Fatalf("a's response %d %q", res.status, res.body)
	}
	// b still runs: the key is in flight, not completed by a.
	if res := a.send(t, post("/orders", "k", "x")); res.status != http.StatusConflict {
		t.Fatalf("retry while b runs: %d %q, want 409", res.status, res.body)
	}

	pb.wake()
	if res := wait(t, second, 5*time.Second, "b's response"); res.body != "from b" {
		t.Fatalf("b's response %d %q", res.status, res.body)
	}
	wantReplay(t, a, b, "from b")
}

// Runs that store nothing (here: 500s) lengthen the key's chain of slots;
// the run that finally stores is found and replayed.
func TestFencedCompletionAfterUnstoredRuns(t *testing.T) {
	e := newEnv(t)
	var runs counter
	var logged logs
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.Logger(logged.logger()))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := runs.inc(); n <= 3 {
			http.Error(w, "try again", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "done")
	})))
	for i := 1; i <= 4; i++ {
		res := e.send(t, post("/orders", "k", "x"))
		if res.header.Get("Idempotent-Replayed") != "" || (i < 4) != (res.status == 500) {
			t.Fatalf("run %d: %d %q replayed=%q", i, res.status, res.body, res.header.Get("Idempotent-Replayed"))
		}
	}
	for range 2 {
		res := e.send(t, post("/orders", "k", "x"))
		if res.status != http.StatusCreated || res.body != "done" || res.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d %q replayed=%q, want a replay of the fourth run", res.status, res.body, res.header.Get("Idempotent-Replayed"))
		}
	}
	if res := e.send(t, post("/orders", "k", "other")); res.status != http.StatusUnprocessableEntity {
		t.Errorf("other payload: %d, want 422", res.status)
	}
	if runs.get() != 4 {
		t.Errorf("the handler ran %d times, want 4", runs.get())
	}
	if strings.Contains(logged.String(), "level=ERROR") || strings.Contains(logged.String(), "level=WARN") {
		t.Errorf("unexpected warnings or errors:\n%s", logged.String())
	}
	// Every key expires with the retention window.
	keys, err := e.admin.Keys(context.Background(), "guard:{httpguard:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if ttl := e.admin.PTTL(t.Context(), k).Val(); ttl <= 0 {
			t.Errorf("%s: TTL %v", k, ttl)
		}
	}
}

// A key that ran 101 times without storing a response is answered 503
// rather than followed through an ever longer chain.
func TestFencedCompletionBoundsTheChain(t *testing.T) {
	e := newEnv(t)
	var runs counter
	var logged logs
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.Logger(logged.logger()))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.inc()
		w.WriteHeader(http.StatusServiceUnavailable)
	})))
	for i := 1; i <= 101; i++ {
		if res := e.send(t, post("/orders", "k", "x")); res.status != 503 || runs.get() != i {
			t.Fatalf("run %d: %d after %d runs", i, res.status, runs.get())
		}
	}
	res := e.send(t, post("/orders", "k", "x"))
	wantProblem(t, res, http.StatusServiceUnavailable, httpguard.TypeUnavailable)
	if runs.get() != 101 || !strings.Contains(logged.String(), "stored no response") {
		t.Errorf("runs %d, log:\n%s", runs.get(), logged.String())
	}
}

// A response stored in a later slot of the chain (an earlier run stored
// nothing) is replayed for the whole retention, counted from when it was
// stored: the mark that leads to it outlives it.
func TestChainedResponseKeptForRetention(t *testing.T) {
	e := newEnv(t)
	const retention = 2 * time.Second
	var runs counter
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.Retention(retention))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch runs.inc() {
		case 1:
			http.Error(w, "try again", http.StatusInternalServerError)
			return
		case 2:
			time.Sleep(1200 * time.Millisecond) // a slow but healthy run
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "done")
	})))
	if res := e.send(t, post("/orders", "k", "x")); res.status != 500 {
		t.Fatalf("run 1: %d", res.status)
	}
	if res := e.send(t, post("/orders", "k", "x")); res.status != 201 {
		t.Fatalf("run 2: %d", res.status)
	}
	stored := time.Now()
	time.Sleep(time.Second) // well within the response's 2s retention
	res := e.send(t, post("/orders", "k", "x"))
	t.Logf("retry %v after the response was stored: %d %q replayed=%q, runs=%d", time.Since(stored).Round(time.Millisecond), res.status, res.body, res.header.Get("Idempotent-Replayed"), runs.get())
	if res.header.Get("Idempotent-Replayed") != "true" || runs.get() != 2 {
		t.Errorf("the handler ran %d times; the retry was not replayed although the stored response is within retention", runs.get())
	}
}
