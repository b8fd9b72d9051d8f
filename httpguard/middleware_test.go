package httpguard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/httpguard"
)

// Ten identical requests at once: the handler runs once, the other nine
// are refused as in flight (logged at Info once: clients' retries repeat
// it), and a retry after completion is a replay.
func TestConcurrentDuplicates(t *testing.T) {
	e := newEnv(t)
	var runs counter
	var lg logs
	release := make(chan struct{})
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.SharedKeys(), httpguard.Logger(lg.logger()))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.inc()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "order 1")
	})))

	const n = 10
	results := make(chan result, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			res, err := e.try(post("/orders", "k-1", `{"item":"book"}`))
			if err != nil {
				t.Error(err)
			}
			results <- res
		})
	}
	// The handler holds the key until the other nine have their answers.
	for i := range n - 1 {
		res := wait(t, results, 10*time.Second, fmt.Sprintf("refusal %d of %d", i+1, n-1))
		wantProblem(t, res, http.StatusConflict, httpguard.TypeInFlight)
		if ra := res.header.Get("Retry-After"); ra != "5" { // a live holder: the default cap
			t.Errorf("Retry-After %q, want 5", ra)
		}
	}
	close(release)
	wg.Wait()
	if n := strings.Count(lg.String(), "key in flight"); n != 9 {
		t.Errorf("%d refusals logged, want 9:\n%s", n, lg.String())
	}
	if n := strings.Count(lg.String(), `level=INFO msg="httpguard: key in flight"`); n != 1 {
		t.Errorf("%d refusals of one key logged at Info, want 1 (once a minute per key):\n%s", n, lg.String())
	}
	if res := <-results; res.status != http.StatusCreated || res.body != "order 1" {
		t.Fatalf("the request that ran: %d %q, want 201 order 1", res.status, res.body)
	}
	if got := runs.get(); got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}

	res := e.send(t, post("/orders", "k-1", `{"item":"book"}`))
	if res.status != http.StatusCreated || res.body != "order 1" || res.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %q replayed=%q, want a replay of 201 order 1", res.status, res.body, res.header.Get("Idempotent-Replayed"))
	}
	if got := runs.get(); got != 1 {
		t.Fatalf("handler ran %d times after the retry, want 1", got)
	}
}

// Requests with different keys hold different locks and run together.
func TestDifferentKeysRunInParallel(t *testing.T) {
	e := newEnv(t)
	const n = 4
	var inside, most atomic.Int32
	all := make(chan struct{})
	var once sync.Once
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := inside.Add(1)
		defer inside.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		if now == n {
			once.Do(func() { close(all) })
		}
		select { // every handler waits until all are inside at once
		case <-all:
		case <-time.After(5 * time.Second):
		}
		w.WriteHeader(http.StatusCreated)
	})))

	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := e.try(post("/orders", fmt.Sprintf("key-%d", i), "{}"))
			if err != nil || res.status != http.StatusCreated {
				t.Errorf("key-%d: %v %d %s", i, err, res.status, res.body)
			}
		})
	}
	wg.Wait()
	if got := most.Load(); got != n {
		t.Fatalf("at most %d handlers ran at once, want %d", got, n)
	}
}

// A key is scoped by principal and by route: the same key from another
// tenant, or on another route, neither waits for nor replays the first.
func TestKeyScope(t *testing.T) {
	e := newEnv(t)
	started := make(chan string, 4)
	release := make(chan struct{})
	handler := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tenant := r.Header.Get("X-Tenant")
			started <- name + " " + tenant
			if tenant == "acme" && name == "orders" {
				select { // the first request holds its key for the whole test
				case <-release:
				case <-time.After(10 * time.Second):
				}
			}
			_, _ = io.WriteString(w, name+" for "+tenant)
		})
	}
	idem := httpguard.Middleware(e.locker, httpguard.Principal(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))
	e.mux.Handle("POST /orders", idem(handler("orders")))
	e.mux.Handle("POST /refunds", idem(handler("refunds")))

	first := make(chan result, 1)
	go func() {
		res, err := e.try(post("/orders", "shared", "{}", "X-Tenant", "acme"))
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	if got := wait(t, started, 5*time.Second, "first request starts"); got != "orders acme" {
		t.Fatalf("started %q", got)
	}

	for _, tc := range []struct {
		name, path, tenant, want string
	}{
		{"other tenant", "/orders", "globex", "orders for globex"},
		{"other route", "/refunds", "acme", "refunds for acme"},
		{"no tenant", "/orders", "", "orders for "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := e.send(t, post(tc.path, "shared", "{}", "X-Tenant", tc.tenant))
			if res.status != http.StatusOK || res.body != tc.want || res.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("got %d %q, want a fresh 200 %q", res.status, res.body, tc.want)
			}
			wait(t, started, time.Second, "handler ran")
		})
	}
	// The same tenant on the same route is still refused.
	wantProblem(t, e.send(t, post("/orders", "shared", "{}", "X-Tenant", "acme")), http.StatusConflict, httpguard.TypeInFlight)
	close(release)
	if res := wait(t, first, 5*time.Second, "first request ends"); res.body != "orders for acme" {
		t.Fatalf("first request: %d %q", res.status, res.body)
	}
	// Each scope replays its own response.
	for tenant, want := range map[string]string{"acme": "orders for acme", "globex": "orders for globex"} {
		res := e.send(t, post("/orders", "shared", "{}", "X-Tenant", tenant))
		if res.body != want || res.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("tenant %s: %q replayed=%q, want a replay of %q", tenant, res.body, res.header.Get("Idempotent-Replayed"), want)
		}
	}
}

// Requests the middleware refuses never reach the handler, and every
// refusal is problem details that no cache keeps.
func TestRefusals(t *testing.T) {
	e := newEnv(t)
	var runs counter
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.MaxBody(16), httpguard.SharedKeys())(echo(&runs)))
	e.mux.Handle("POST /strict", httpguard.Middleware(e.locker, httpguard.Required(), httpguard.SharedKeys())(echo(&runs)))
	e.send(t, post("/orders", "used", "first"))
	e.send(t, post("/orders?x=1", "used-q", "first"))
	base := runs.get()

	for _, tc := range []struct {
		name   string
		req    req
		status int
		typ    string
	}{
		{"empty key", post("/orders", "", "{}"), 400, httpguard.TypeKeyInvalid},
		{"blank key", post("/orders", "   ", "{}"), 400, httpguard.TypeKeyInvalid},
		{"empty quoted key", post("/orders", `""`, "{}"), 400, httpguard.TypeKeyInvalid},
		{"key of 256", post("/orders", strings.Repeat("k", 256), "{}"), 400, httpguard.TypeKeyInvalid},
		{"quoted key of 256", post("/orders", `"`+strings.Repeat("k", 256)+`"`, "{}"), 400, httpguard.TypeKeyInvalid},
		{"tab in key", post("/orders", "a\tb", "{}"), 400, httpguard.TypeKeyInvalid},
		{"non-ASCII key", post("/orders", "clé", "{}"), 400, httpguard.TypeKeyInvalid},
		{"unterminated quote", post("/orders", `"abc`, "{}"), 400, httpguard.TypeKeyInvalid},
		{"quote inside quotes", post("/orders", `"a"b"`, "{}"), 400, httpguard.TypeKeyInvalid},
		{"sf-string parameters", post("/orders", `"abc";p=1`, "{}"), 400, httpguard.TypeKeyInvalid},
		{"key twice", post("/orders", "a", "{}", "Idempotency-Key", "b"), 400, httpguard.TypeKeyInvalid},
		{"required and missing", req{method: "POST", path: "/strict", body: "{}"}, 400, httpguard.TypeKeyMissing},
		{"required and invalid", post("/strict", "", "{}"), 400, httpguard.TypeKeyInvalid},
		{"body over MaxBody", post("/orders", "big", strings.Repeat("x", 17)), 413, httpguard.TypeBodyTooLarge},
		{"other body", post("/orders", "used", "second"), 422, httpguard.TypeKeyReused},
		{"other query", post("/orders?x=2", "used-q", "first"), 422, httpguard.TypeKeyReused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, e.send(t, tc.req), tc.status, tc.typ)
		})
	}
	if got := runs.get(); got != base {
		t.Fatalf("handler ran %d more times, want 0", got-base)
	}

	// A body of unknown length (chunked) over the cap, and a body at the cap.
	t.Run("chunked body over MaxBody", func(t *testing.T) {
		r, _ := http.NewRequest("POST", e.srv.URL+"/orders", io.MultiReader(strings.NewReader(strings.Repeat("y", 10)), strings.NewReader(strings.Repeat("y", 10))))
		r.Header.Set("Idempotency-Key", "chunked")
		resp, err := e.srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ContentLength != -1 && r.ContentLength != 0 {
			t.Fatalf("request was not chunked")
		}
		wantProblem(t, result{resp.StatusCode, resp.Header, string(b)}, 413, httpguard.TypeBodyTooLarge)
	})
	t.Run("body at MaxBody", func(t *testing.T) {
		res := e.send(t, post("/orders", "at-cap", strings.Repeat("z", 16)))
		if res.status != http.StatusCreated || !strings.Contains(res.body, strings.Repeat("z", 16)) {
			t.Fatalf("got %d %s, want 201 echoing the body", res.status, res.body)
		}
	})
}

// A different payload is refused as reused even while the first request
// is still in flight.
func TestReusedWhileInFlight(t *testing.T) {
	e := newEnv(t)
	started, release := make(chan struct{}), make(chan struct{})
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
	})))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := e.try(post("/orders", "k", "a")); err != nil {
			t.Error(err)
		}
	}()
	wait(t, started, 5*time.Second, "first request starts")
	wantProblem(t, e.send(t, post("/orders", "k", "b")), 422, httpguard.TypeKeyReused)
	wantProblem(t, e.send(t, post("/orders", "k", "a")), 409, httpguard.TypeInFlight)
	close(release)
	wait(t, done, 5*time.Second, "first request ends")
}

// A replay has the status, body and allow-listed headers of the response,
// plus Idempotent-Replayed, and nothing else of it.
func TestReplay(t *testing.T) {
	e := newEnv(t)
	var runs counter
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.inc()
		body, _ := io.ReadAll(r.Body)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Location", "/orders/7")
		h.Set("ETag", `"v1"`)
		h.Set("X-Custom", "yes")
		h.Set("Set-Cookie", "session=secret")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":7,"echo":%q}`, body)
		h.Set("Location", "/changed-after-write") // not part of the response
	})
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.SharedKeys())(handler))
	e.mux.Handle("POST /custom", httpguard.Middleware(e.locker, httpguard.ReplayHeaders("x-custom"), httpguard.SharedKeys())(handler))
	e.mux.Handle("POST /once", httpguard.Middleware(e.locker, httpguard.NoReplay(), httpguard.SharedKeys())(handler))
	e.mux.Handle("PATCH /orders/{id}", httpguard.Middleware(e.locker, httpguard.SharedKeys())(handler))

	replayed := func(t *testing.T, first, again result) {
		t.Helper()
		if again.status != first.status || again.body != first.body {
			t.Fatalf("replay %d %q, want %d %q", again.status, again.body, first.status, first.body)
		}
		if got := again.header.Get("Idempotent-Replayed"); got != "true" {
			t.Fatalf("Idempotent-Replayed %q, want true", got)
		}
		if first.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("the first response is marked as replayed")
		}
	}

	t.Run("default headers", func(t *testing.T) {
		before := runs.get()
		first := e.send(t, post("/orders", "r1", "hello"))
		again := e.send(t, post("/orders", "r1", "hello"))
		replayed(t, first, again)
		for _, h := range []string{"Content-Type", "Location", "ETag"} {
			if again.header.Get(h) != first.header.Get(h) || first.header.Get(h) == "" {
				t.Errorf("%s: replay %q, first %q", h, again.header.Get(h), first.header.Get(h))
			}
		}
		for _, h := range []string{"X-Custom", "Set-Cookie"} {
			if again.header.Get(h) != "" {
				t.Errorf("%s replayed: %q", h, again.header.Get(h))
			}
		}
		if runs.get() != before+1 {
			t.Fatalf("handler ran %d times, want 1", runs.get()-before)
		}
	})
	t.Run("quoted and bare key are one key", func(t *testing.T) {
		before := runs.get()
		first := e.send(t, post("/orders", `"r 2 \"x\""`, "q"))
		replayed(t, first, e.send(t, post("/orders", `r 2 "x"`, "q")))
		if runs.get() != before+1 {
			t.Fatalf("handler ran %d times, want 1", runs.get()-before)
		}
	})
	t.Run("ReplayHeaders", func(t *testing.T) {
		first := e.send(t, post("/custom", "r3", "c"))
		again := e.send(t, post("/custom", "r3", "c"))
		replayed(t, first, again)
		if again.header.Get("X-Custom") != "yes" || again.header.Get("Location") != "" || again.header.Get("Set-Cookie") != "" {
			t.Fatalf("replayed headers %v, want X-Custom only", again.header)
		}
	})
	t.Run("PATCH with a path parameter", func(t *testing.T) {
		before := runs.get()
		first := e.send(t, req{method: "PATCH", path: "/orders/7", body: "p", header: []string{"Idempotency-Key", "r4"}})
		replayed(t, first, e.send(t, req{method: "PATCH", path: "/orders/7", body: "p", header: []string{"Idempotency-Key", "r4"}}))
		wantProblem(t, e.send(t, req{method: "PATCH", path: "/orders/8", body: "p", header: []string{"Idempotency-Key", "r4"}}), 422, httpguard.TypeKeyReused)
		if runs.get() != before+1 {
			t.Fatalf("handler ran %d times, want 1", runs.get()-before)
		}
	})
	t.Run("NoReplay", func(t *testing.T) {
		before := runs.get()
		for range 2 {
			if res := e.send(t, post("/once", "r5", "n")); res.status != 201 || res.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("got %d replayed=%q", res.status, res.header.Get("Idempotent-Replayed"))
			}
		}
		wantProblem(t, e.send(t, post("/once", "r5", "other")), 422, httpguard.TypeKeyReused)
		if runs.get() != before+2 {
			t.Fatalf("handler ran %d times, want 2", runs.get()-before)
		}
	})
}

// Responses that invite a retry, that are too large, or that a panic cut
// short are not stored: the retry runs the handler again.
func TestNotStored(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request)
		stored  bool
	}{
		{"500", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) }, false},
		{"503", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }, false},
		{"429", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(429) }, false},
		{"408", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(408) }, false},
		{"body over MaxStoredBody", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, strings.Repeat("a", 20))
			_, _ = io.WriteString(w, strings.Repeat("b", 20))
		}, false},
		{"panic", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(201)
			panic(http.ErrAbortHandler)
		}, false},
		{"400 from the handler", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "bad order", 400) }, true},
		{"204", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }, true},
		{"nothing written", func(w http.ResponseWriter, r *http.Request) {}, true},
		{"body at MaxStoredBody", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, strings.Repeat("a", 32)) }, true},
		{"flushed", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "part 1, ")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "part 2")
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs counter
			path := "/t/" + strings.ReplaceAll(tc.name, " ", "-")
			e.mux.Handle("POST "+path, httpguard.Middleware(e.locker, httpguard.MaxStoredBody(32), httpguard.SharedKeys())(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.inc(); tc.handler(w, r) })))
			// After a panic the connection breaks and net/http's client
			// sends the request again by itself (it has an Idempotency-Key),
			// so count the runs of each call rather than in total.
			first, err := e.try(post(path, "k", "x"))
			if tc.name != "panic" && err != nil {
				t.Fatal(err)
			}
			before := runs.get()
			again, err := e.try(post(path, "k", "x"))
			if tc.name != "panic" && err != nil {
				t.Fatal(err)
			}
			ran := runs.get() - before
			if tc.stored {
				if ran != 0 || again.status != first.status || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("retry ran the handler %d times and got %d %q replayed=%q; want a replay of %d %q",
						ran, again.status, again.body, again.header.Get("Idempotent-Replayed"), first.status, first.body)
				}
				return
			}
			if ran == 0 || again.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("retry ran the handler %d times, replayed=%q; want it to run again", ran, again.header.Get("Idempotent-Replayed"))
			}
		})
	}
}

// A lease lost while the handler runs cancels the handler's context and
// stores nothing, so the retry runs the handler again.
func TestLeaseLost(t *testing.T) {
	e := newEnv(t)
	var runs counter
	var logged logs
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.TTL(900*time.Millisecond), httpguard.Logger(logged.logger()), httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.inc() == 1 {
			started <- struct{}{}
			select {
			case <-r.Context().Done():
				causes <- context.Cause(r.Context())
			case <-time.After(5 * time.Second):
				causes <- errors.New("handler context not canceled")
			}
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, "run %d", runs.get())
	})))

	first := make(chan result, 1)
	go func() {
		res, err := e.try(post("/orders", "k", "x"))
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	wait(t, started, 5*time.Second, "handler starts")
	lockKey := httpguard.LockKey("POST", "POST /orders", "", "k")
	if n, err := e.admin.Del(t.Context(), lockKey).Result(); err != nil || n != 1 {
		t.Fatalf("DEL %s: %d, %v", lockKey, n, err)
	}
	if cause := wait(t, causes, 5*time.Second, "handler told"); !errors.Is(cause, guard.ErrLeaseLost) {
		t.Fatalf("handler context cause %v, want guard.ErrLeaseLost", cause)
	}
	if res := wait(t, first, 5*time.Second, "first response"); res.body != "run 1" {
		t.Fatalf("first response %d %q", res.status, res.body)
	}
	if out := logged.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "response_stored=false") {
		t.Fatalf("want the loss logged at Warn with response_stored=false, got:\n%s", out)
	}

	res := e.send(t, post("/orders", "k", "x"))
	if res.body != "run 2" || res.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry: %q replayed=%q, want the handler to run again", res.body, res.header.Get("Idempotent-Replayed"))
	}
	res = e.send(t, post("/orders", "k", "x"))
	if res.body != "run 2" || res.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("second retry: %q replayed=%q, want a replay of run 2", res.body, res.header.Get("Idempotent-Replayed"))
	}
}

// Methods that are not guarded pass through untouched, whatever their
// Idempotency-Key, and leave nothing in Redis; so do guarded ones without
// a key.
func TestPassThrough(t *testing.T) {
	e := newEnv(t)
	var runs counter
	idem := httpguard.Middleware(e.locker, httpguard.SharedKeys())
	e.mux.Handle("/orders", idem(echo(&runs)))
	e.mux.Handle("/puts", httpguard.Middleware(e.locker, httpguard.Methods("PUT"), httpguard.SharedKeys())(echo(&runs)))

	for _, q := range []req{
		{method: "GET", path: "/orders", header: []string{"Idempotency-Key", "k"}},
		{method: "GET", path: "/orders", header: []string{"Idempotency-Key", ""}},
		{method: "DELETE", path: "/orders", header: []string{"Idempotency-Key", "k"}},
		{method: "PUT", path: "/orders", body: "x", header: []string{"Idempotency-Key", "k"}},
		{method: "POST", path: "/orders", body: "x"},
		{method: "POST", path: "/puts", body: "x", header: []string{"Idempotency-Key", "k"}},
	} {
		for range 2 {
			res := e.send(t, q)
			if res.status != http.StatusCreated || res.header.Get("Idempotent-Replayed") != "" || res.header.Get("Cache-Control") != "" {
				t.Fatalf("%s %s: %d %v", q.method, q.path, res.status, res.header)
			}
		}
	}
	if got := runs.get(); got != 12 {
		t.Fatalf("handler ran %d times, want 12", got)
	}
	if n, err := e.admin.DBSize(t.Context()).Result(); err != nil || n != 0 {
		t.Fatalf("Redis holds %d keys (%v), want none", n, err)
	}

	// Methods opts PUT in.
	first := e.send(t, req{method: "PUT", path: "/puts", body: "y", header: []string{"Idempotency-Key", "k"}})
	again := e.send(t, req{method: "PUT", path: "/puts", body: "y", header: []string{"Idempotency-Key", "k"}})
	if again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("PUT with Methods(PUT): %q then %q replayed=%q", first.body, again.body, again.header.Get("Idempotent-Replayed"))
	}
}

// Methods takes method names in any case: HTTP methods are upper-case
// tokens, so Methods("put") guards PUT rather than a method no client sends.
func TestMethodsUpperCased(t *testing.T) {
	e := newEnv(t)
	var runs counter
	e.mux.Handle("/r", httpguard.Middleware(e.locker, httpguard.Methods("put", "Delete"), httpguard.SharedKeys())(echo(&runs)))
	for _, method := range []string{"PUT", "DELETE"} {
		q := req{method: method, path: "/r", body: "x", header: []string{"Idempotency-Key", "k-" + method}}
		first, again := e.send(t, q), e.send(t, q)
		if first.status != http.StatusCreated || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s: %d %q then %d %q replayed=%q, want the second a replay of the first",
				method, first.status, first.body, again.status, again.body, again.header.Get("Idempotent-Replayed"))
		}
	}
	if got := runs.get(); got != 2 {
		t.Errorf("handler ran %d times, want 2 (once per key)", got)
	}
	// POST is no longer guarded: Methods replaces the default.
	q := post("/r", "k-post", "x")
	if e.send(t, q); e.send(t, q).header.Get("Idempotent-Replayed") != "" {
		t.Errorf("POST replayed, want it passed through")
	}
}

// No response, whatever its kind, carries the lock key, its hash or an
// owner token.
func TestNothingSecretInResponses(t *testing.T) {
	e := newEnv(t)
	var runs counter
	started, release := make(chan struct{}), make(chan struct{})
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.MaxBody(64), httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.inc() == 1 {
			close(started)
			<-release
		}
		echo(&counter{})(w, r)
	})))

	var all []result
	done := make(chan result, 1)
	go func() {
		res, err := e.try(post("/orders", "secret-test", "x"))
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	wait(t, started, 5*time.Second, "first request starts")
	lockKey := httpguard.LockKey("POST", "POST /orders", "", "secret-test")
	secrets := []string{lockKey, strings.TrimSuffix(strings.TrimPrefix(lockKey, "guard:{httpguard:"), "}"), "guard:", "httpguard:"}
	fields, err := e.admin.HKeys(t.Context(), lockKey).Result()
	if err != nil || len(fields) == 0 {
		t.Fatalf("HKEYS %s: %v %v", lockKey, fields, err)
	}
	for _, f := range fields {
		owner, _, _ := strings.Cut(f, ":")
		if len(owner) >= 16 {
			secrets = append(secrets, owner)
		}
	}
	if len(secrets) < 5 {
		t.Fatalf("found no owner token among the lock's fields %v", fields)
	}
	all = append(all,
		e.send(t, post("/orders", "secret-test", "x")), // 409
		e.send(t, post("/orders", "secret-test", "y")), // 422
	)
	close(release)
	all = append(all,
		wait(t, done, 5*time.Second, "first response"),
		e.send(t, post("/orders", "secret-test", "x")),                     // replay
		e.send(t, post("/orders", "", "x")),                                // 400
		e.send(t, post("/orders", "secret-test", strings.Repeat("x", 65))), // 413
	)
	wantStatus := []int{409, 422, 201, 201, 400, 413}
	for i, res := range all {
		if res.status != wantStatus[i] {
			t.Errorf("response %d: status %d, want %d", i, res.status, wantStatus[i])
		}
		text := res.body
		for k, vs := range res.header {
			text += "\n" + k + ": " + strings.Join(vs, ", ")
		}
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("response %d contains %q:\n%s", i, s, text)
			}
		}
	}
}

// A custom DenyHandler writes every refusal, with Cache-Control and
// Retry-After already set.
func TestDenyHandler(t *testing.T) {
	e := newEnv(t)
	started, release := make(chan struct{}), make(chan struct{})
	var got []httpguard.Problem
	var mu sync.Mutex
	deny := func(w http.ResponseWriter, r *http.Request, p httpguard.Problem) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(p.Status)
		_, _ = io.WriteString(w, "custom: "+p.Title)
	}
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.DenyHandler(deny), httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
	})))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := e.try(post("/orders", "k", "x")); err != nil {
			t.Error(err)
		}
	}()
	wait(t, started, 5*time.Second, "first request starts")
	res := e.send(t, post("/orders", "k", "x"))
	close(release)
	wait(t, done, 5*time.Second, "first response")
	if res.status != 409 || !strings.HasPrefix(res.body, "custom: ") || res.header.Get("Retry-After") != "5" || res.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("got %d %q %v", res.status, res.body, res.header)
	}
	if len(got) != 1 || got[0].Type != httpguard.TypeInFlight {
		t.Fatalf("deny handler saw %+v", got)
	}
}

// Without Redis the middleware cannot tell a retry from a first request:
// it refuses with 503 rather than run the handler unguarded.
func TestRedisDown(t *testing.T) {
	e := newEnv(t)
	var runs counter
	var logged logs
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.Logger(logged.logger()), httpguard.SharedKeys())(echo(&runs)))
	e.redis.Kill(t)
	res := e.send(t, post("/orders", "k", "x"))
	wantProblem(t, res, http.StatusServiceUnavailable, httpguard.TypeUnavailable)
	if res.header.Get("Retry-After") != "1" || runs.get() != 0 {
		t.Fatalf("Retry-After %q, handler ran %d times", res.header.Get("Retry-After"), runs.get())
	}
	if strings.Contains(res.body, "127.0.0.1") || strings.Contains(res.body, "refused") {
		t.Fatalf("the problem leaks the error: %s", res.body)
	}
	if out := logged.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "refused") {
		t.Fatalf("want the Redis failure logged at Error, got:\n%s", out)
	}
}

// What a guarded request leaves in Redis expires after the retention
// window: the payload's fingerprint, the stored response and the fencing
// counter.
func TestRedisKeysExpire(t *testing.T) {
	e := newEnv(t)
	var runs counter
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.Retention(time.Hour), httpguard.SharedKeys())(echo(&runs)))
	e.send(t, post("/orders", "a", "x"))
	e.send(t, post("/orders", "a", "x")) // a replay adds nothing
	e.send(t, post("/orders", "b", "x"))
	keys, err := e.admin.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		ttl, err := e.admin.PTTL(t.Context(), k).Result()
		if err != nil || ttl <= 0 || ttl > time.Hour {
			t.Errorf("%s: TTL %v (%v), want at most the 1h retention", k, ttl, err)
		}
	}
	// A claim (the fingerprint, then the response) and a fencing counter
	// per key, and maybe the seconds-long marker of a release
	// (guard:{…}:done:<owner>).
	long := slices.DeleteFunc(keys, func(k string) bool { return strings.Contains(k, "}:done:") })
	if len(long) != 4 {
		t.Errorf("%d keys, want 4: %v", len(long), long)
	}
}
