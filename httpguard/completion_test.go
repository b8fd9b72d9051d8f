package httpguard_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/httpguard"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/redis/go-redis/v9"
)

// instance is a second process of the service: its own Redis client,
// Locker and server, on e's Redis.
type instance struct {
	srv *httptest.Server
}

func (e *env) instance(t *testing.T, handler http.Handler) *instance {
	t.Helper()
	return e.instanceOn(t, e.redis.Client(t), nil, handler)
}

// instanceOn is an instance whose Locker, made with gopts, uses client,
// and whose middleware has hopts.
func (e *env) instanceOn(t *testing.T, client *redis.Client, gopts []guard.Option, handler http.Handler, hopts ...httpguard.Option) *instance {
	t.Helper()
	l, err := guard.New(client, gopts...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", httpguard.Middleware(l, append(hopts, httpguard.SharedKeys())...)(handler))
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

// Runs that store nothing (here: 500s) leave the key bound to the payload;
// the run that finally stores replaces the binding and is replayed.
func TestFencedCompletionAfterUnstoredRuns(t *testing.T) {
	e := newEnv(t)
	var runs counter
	var logged logs
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.Logger(logged.logger()), httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

// However many runs stored nothing, the next one still runs the handler
// (the chain of slots an earlier version followed stopped at 100), and its
// response is stored and replayed.
func TestUnstoredRunsAreNotBounded(t *testing.T) {
	e := newEnv(t)
	var runs counter
	var logged logs
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.Logger(logged.logger()), httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.inc() <= 101 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "done")
	})))
	for i := 1; i <= 101; i++ {
		if res := e.send(t, post("/orders", "k", "x")); res.status != 503 || runs.get() != i {
			t.Fatalf("run %d: %d after %d runs", i, res.status, runs.get())
		}
	}
	if res := e.send(t, post("/orders", "k", "x")); res.status != http.StatusCreated || res.body != "done" || runs.get() != 102 {
		t.Fatalf("run 102: %d %q after %d runs, want the handler's 201", res.status, res.body, runs.get())
	}
	if res := e.send(t, post("/orders", "k", "x")); res.header.Get("Idempotent-Replayed") != "true" || res.body != "done" || runs.get() != 102 {
		t.Fatalf("retry: %d %q replayed=%q after %d runs, want a replay", res.status, res.body, res.header.Get("Idempotent-Replayed"), runs.get())
	}
	if strings.Contains(logged.String(), "level=ERROR") || strings.Contains(logged.String(), "level=WARN") {
		t.Errorf("unexpected warnings or errors:\n%s", logged.String())
	}
}

// A response stored after an earlier run stored nothing is replayed for
// the whole retention, counted from when it was stored, not from when the
// key was bound.
func TestResponseKeptForRetentionAfterUnstoredRun(t *testing.T) {
	e := newEnv(t)
	const retention = 2 * time.Second
	var runs counter
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.Retention(retention), httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

// A request that runs past the retention window, whose lease is lost
// unnoticed meanwhile, while a newer request with the same key binds the
// key afresh and is still running: the stale request completes first, and
// its response is refused by the token check, not stored in place of the
// newer one's. (The chain of slots an earlier version used let it store:
// the binding that led the newer request to fence it had expired.)
func TestFencedCompletionStaleOutlivesRetention(t *testing.T) {
	const retention = 2 * time.Second
	e := newEnv(t)
	pa, pb := newPaused("a"), newPaused("b")
	defer pa.wake()
	defer pb.wake()
	var logged logs
	// a renews only every 20s: it does not notice the loss during the test.
	a := e.instanceOn(t, e.redis.Client(t), []guard.Option{guard.WithTTL(time.Minute)}, pa,
		httpguard.Retention(retention), httpguard.Logger(logged.logger()))
	b := e.instanceOn(t, e.redis.Client(t), nil, pb, httpguard.Retention(retention))

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
	// a runs past the retention window: the key's binding expires.
	deadline := time.Now().Add(retention + 10*time.Second)
	for e.admin.Exists(t.Context(), lockKey+":claim").Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the binding did not expire; PTTL %v", e.admin.PTTL(t.Context(), lockKey+":claim").Val())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, err := e.admin.Del(t.Context(), lockKey).Result(); err != nil || n != 1 {
		t.Fatalf("DEL %s: %d, %v", lockKey, n, err)
	}

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
	if out := logged.String(); !strings.Contains(out, "response not stored") || !strings.Contains(out, guard.ErrSuperseded.Error()) {
		t.Fatalf("want a's store refused by the token check, logged; got:\n%s", out)
	}
	if res := a.send(t, post("/orders", "k", "x")); res.status != http.StatusConflict {
		t.Fatalf("retry while b runs: %d %q, want 409", res.status, res.body)
	}

	pb.wake()
	if res := wait(t, second, 5*time.Second, "b's response"); res.body != "from b" {
		t.Fatalf("b's response %d %q", res.status, res.body)
	}
	wantReplay(t, a, b, "from b")
}

// A lease really lost while the handler runs: a's link to Redis is cut, its
// renewals fail, its lease ends in Redis and its context is canceled, but
// its handler goes on (it ignores its context). A second request gets the
// key and completes first. a's response, when it comes, is neither stored
// over b's nor replayed instead of it.
func TestFencedCompletionLeaseLostOnCutLink(t *testing.T) {
	const ttl = time.Second
	e := newEnv(t)
	pa, pb := newPaused("a"), newPaused("b")
	defer pa.wake()
	defer pb.wake()
	pb.wake() // b does not pause
	proxy := faultproxy.New(t, e.redis.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	var logged logs
	a := e.instanceOn(t, client, []guard.Option{guard.WithTTL(ttl)}, pa, httpguard.Logger(logged.logger()))
	b := e.instance(t, pb)

	first := make(chan result, 1)
	go func() {
		res, err := (&env{srv: a.srv}).try(post("/orders", "k", "x"))
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	wait(t, pa.started, 5*time.Second, "a's handler starts")
	proxy.Blackhole(true)
	defer proxy.Blackhole(false)

	// b is refused while a's lease lives in Redis, and runs once it ends.
	var res result
	for deadline := time.Now().Add(10 * ttl); ; {
		res = b.send(t, post("/orders", "k", "x"))
		if res.status != http.StatusConflict || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if res.status != http.StatusCreated || res.body != "from b" {
		t.Fatalf("newer request: %d %q, want 201 from b once a's lease ended", res.status, res.body)
	}

	proxy.Blackhole(false)
	pa.wake()
	if live := wait(t, pa.live, 5*time.Second, "a resumes"); live {
		t.Fatal("a's context is still live: its lease was not lost")
	}
	if res := wait(t, first, 5*time.Second, "a's response"); res.body != "from a" {
		t.Fatalf("a's response %d %q", res.status, res.body)
	}
	wantReplay(t, a, b, "from b")
	if n := pa.runs.get() + pb.runs.get(); n != 2 {
		t.Errorf("the handlers ran %d times, want 2", n)
	}
	if out := logged.String(); !strings.Contains(out, "lease lost while the request was processed") || !strings.Contains(out, "response_stored=false") {
		t.Errorf("want a's loss logged with response_stored=false; got:\n%s", out)
	}
}

// A request that runs, holding its lease, longer than both the retention
// window and the lease TTL outlives the key's fencing counter: nothing can
// prove its hold the newest any more, so its response is not stored and a
// retry runs the handler again.
func TestRunOutlivingFenceCounterStoresNothing(t *testing.T) {
	const ttl = 2 * time.Second // the counter lives max(Retention, TTL) after the acquisition
	e := newEnv(t)
	var runs counter
	var logged logs
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.TTL(ttl), httpguard.Retention(10*time.Millisecond), httpguard.Logger(logged.logger()), httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.inc()
		if n == 1 {
			fence := httpguard.LockKey("POST", "POST /orders", "", "k") + ":fence"
			for deadline := time.Now().Add(10 * ttl); e.admin.Exists(r.Context(), fence).Val() != 0; {
				if time.Now().After(deadline) || r.Context().Err() != nil {
					t.Errorf("the fencing counter is still there after %v, or the lease was lost: %v", 10*ttl, context.Cause(r.Context()))
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "run "+strconv.Itoa(n))
	})))
	if res := e.send(t, post("/orders", "k", "x")); res.status != http.StatusCreated || res.body != "run 1" {
		t.Fatalf("first: %d %q", res.status, res.body)
	}
	if out := logged.String(); !strings.Contains(out, "response not stored") || !strings.Contains(out, "counter is gone") {
		t.Fatalf("want the store refused for want of a counter, logged; got:\n%s", out)
	}
	if res := e.send(t, post("/orders", "k", "x")); res.body != "run 2" || res.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry: %q replayed=%q, want the handler to run again", res.body, res.header.Get("Idempotent-Replayed"))
	}
}
