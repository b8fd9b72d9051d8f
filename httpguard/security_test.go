package httpguard_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/httpguard"
)

// Nothing of one caller reaches another, and what a caller can store is
// bounded: the safe defaults and the limits behind the Security page.

// claimKey is the Redis key of the claim (binding or stored response) of
// POST requests to pattern with key, for principal.
func claimKey(pattern, principal, key string) string {
	return httpguard.LockKey("POST", pattern, principal, key) + ":claim"
}

// Whose keys are whose is decided at wiring: a Middleware with neither
// Principal nor SharedKeys is refused, so the default wiring can no longer
// replay one caller's response to another.
func TestMiddlewareRequiresPrincipalOrSharedKeys(t *testing.T) {
	e := newEnv(t)
	tenant := httpguard.Principal(func(r *http.Request) string { return r.Header.Get("X-Tenant") })
	for _, tc := range []struct {
		name string
		opts []httpguard.Option
		want string // in the panic's message; "" for none
	}{
		{"neither", nil, "Principal"},
		{"only other options", []httpguard.Option{httpguard.Required()}, "SharedKeys"},
		{"both", []httpguard.Option{tenant, httpguard.SharedKeys()}, "Principal and SharedKeys"},
		{"Principal", []httpguard.Option{tenant}, ""},
		{"SharedKeys", []httpguard.Option{httpguard.SharedKeys()}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := panicked(func() { httpguard.Middleware(e.locker, tc.opts...) })
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("panicked: %v", err)
			case tc.want != "" && (!errors.Is(err, guard.ErrInvalid) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("panic %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

// Headers that carry one client's credentials or session are never stored
// for replay: to whoever sends the key next they would hand the session.
func TestSecretHeadersAreNeverReplayed(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"Set-Cookie", "set-cookie", "Set-Cookie2", "Authentication-Info", "Proxy-Authentication-Info"} {
		err := panicked(func() {
			httpguard.Middleware(e.locker, httpguard.SharedKeys(), httpguard.ReplayHeaders("Location", name))
		})
		if !errors.Is(err, guard.ErrInvalid) || !strings.Contains(err.Error(), "credentials") {
			t.Errorf("ReplayHeaders(%q): panic %v, want ErrInvalid saying it carries credentials", name, err)
		}
	}
}

// A response is stored as its own bytes, not base64 inside JSON: a 1 MiB
// body costs Redis about 1 MiB.
func TestStoredResponseCostsItsOwnSize(t *testing.T) {
	e := newEnv(t)
	body := strings.Repeat("x", 1<<20)
	var runs counter
	e.mux.Handle("POST /export", httpguard.Middleware(e.locker, httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runs.inc()
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(body))
	})))
	if res := e.send(t, post("/export", "big", "{}")); res.status != http.StatusOK || len(res.body) != len(body) {
		t.Fatalf("first request: %d, %d bytes", res.status, len(res.body))
	}
	n, err := e.admin.StrLen(t.Context(), claimKey("POST /export", "", "big")).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a %d-byte response is stored in %d bytes", len(body), n)
	if n < int64(len(body)) || n > int64(len(body))+512 {
		t.Errorf("stored %d bytes for a %d-byte body, want the body plus at most 512", n, len(body))
	}
	res := e.send(t, post("/export", "big", "{}"))
	if res.body != body || res.header.Get("Idempotent-Replayed") != "true" || runs.get() != 1 {
		t.Fatalf("retry: replayed %q, %d bytes, %d runs; want the stored body replayed", res.header.Get("Idempotent-Replayed"), len(res.body), runs.get())
	}
}

// A client error is replayed for ErrorRetention only, and a key whose
// response is not stored stays bound for as long: a stream of failed
// requests keeps nothing for a day. A success is kept for Retention.
func TestErrorResponsesAreKeptBriefly(t *testing.T) {
	e := newEnv(t)
	const brief = 2 * time.Second
	var runs counter
	status := func(r *http.Request) int { n, _ := strconv.Atoi(r.URL.Query().Get("status")); return n }
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.SharedKeys(), httpguard.ErrorRetention(brief))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.inc()
		w.WriteHeader(status(r))
		_, _ = fmt.Fprintf(w, "answer %d", status(r))
	})))
	for _, tc := range []struct {
		status    int
		replayed  bool // a retry at once is answered from storage
		ttlAbove  time.Duration
		ttlAtMost time.Duration
	}{
		{http.StatusCreated, true, time.Hour, 24 * time.Hour},
		{http.StatusBadRequest, true, 0, brief},
		{http.StatusConflict, true, 0, brief},
		{http.StatusInternalServerError, false, 0, brief},
		{http.StatusTooManyRequests, false, 0, brief},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			key, path := "k-"+strconv.Itoa(tc.status), "/orders?status="+strconv.Itoa(tc.status)
			before := runs.get()
			if res := e.send(t, post(path, key, "{}")); res.status != tc.status {
				t.Fatalf("status %d, want %d", res.status, tc.status)
			}
			ttl, err := e.admin.PTTL(t.Context(), claimKey("POST /orders", "", key)).Result()
			if err != nil || ttl <= tc.ttlAbove || ttl > tc.ttlAtMost {
				t.Fatalf("the key's claim lives %v (%v), want within (%v, %v]", ttl, err, tc.ttlAbove, tc.ttlAtMost)
			}
			res := e.send(t, post(path, key, "{}"))
			if replayed := res.header.Get("Idempotent-Replayed") == "true"; replayed != tc.replayed || res.status != tc.status {
				t.Fatalf("retry: %d replayed=%v, want %d replayed=%v", res.status, replayed, tc.status, tc.replayed)
			}
			if tc.ttlAtMost == brief {
				// Past the window, the key is free for any payload.
				time.Sleep(brief + 100*time.Millisecond)
				if res := e.send(t, post(path, key, `{"other":1}`)); res.status != tc.status || res.header.Get("Idempotent-Replayed") != "" {
					t.Fatalf("another payload after ErrorRetention: %d replayed=%q, want the handler to run", res.status, res.header.Get("Idempotent-Replayed"))
				}
			}
			t.Logf("status %d: %d runs", tc.status, runs.get()-before)
		})
	}
}

// A handler that stops when its request's context ends (a streamed export
// whose client went away) has written part of its answer: that part is not
// stored, and the retry runs the handler again instead of replaying it.
func TestTruncatedResponseIsNotStored(t *testing.T) {
	e := newEnv(t)
	var runs counter
	stopped := make(chan struct{}, 2)
	e.mux.Handle("POST /export", httpguard.Middleware(e.locker, httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.inc() > 1 {
			_, _ = w.Write([]byte(`{"rows":[{"id":0}]}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"rows":[{"id":0},{"id":1},{"id":2},`))
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // streams until its client leaves
		stopped <- struct{}{}
	})))

	// A client that reads the start of the stream and hangs up.
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fmt.Fprintf(conn, "POST /export HTTP/1.1\r\nHost: x\r\nIdempotency-Key: exp\r\nContent-Length: 2\r\n\r\n{}")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v, %v", resp, err)
	}
	_ = conn.Close()
	wait(t, stopped, 5*time.Second, "the handler notices its client left")

	deadline := time.Now().Add(5 * time.Second)
	for {
		res := e.send(t, post("/export", "exp", "{}"))
		if res.status == http.StatusConflict && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // the first run is still releasing its lease
			continue
		}
		if res.header.Get("Idempotent-Replayed") != "" || res.body != `{"rows":[{"id":0}]}` || runs.get() != 2 {
			t.Fatalf("retry: %d %q replayed=%q after %d runs; want the handler to run again", res.status, res.body, res.header.Get("Idempotent-Replayed"), runs.get())
		}
		break
	}
}

// Quota caps what one principal keeps: once its budget is spent, a new key
// is refused with 429 before the handler runs, while its stored responses
// still replay and other principals are not touched; what it was charged
// is at least what Redis holds for it.
func TestQuotaCapsWhatOnePrincipalStores(t *testing.T) {
	e := newEnv(t)
	const quota = 8 << 10
	var runs counter
	tenant := httpguard.Principal(func(r *http.Request) string { return r.Header.Get("X-Tenant") })
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, tenant, httpguard.Quota(quota))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runs.inc()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(strings.Repeat("r", 500)))
	})))
	accepted := 0
	var refused result
	for i := range 100 {
		res := e.send(t, post("/orders", "key-"+strconv.Itoa(i), "{}", "X-Tenant", "acme"))
		if res.status == http.StatusTooManyRequests {
			refused = res
			break
		}
		if res.status != http.StatusCreated {
			t.Fatalf("request %d: %d %s", i, res.status, res.body)
		}
		accepted++
	}
	if refused.status == 0 {
		t.Fatalf("100 new keys of one principal were all stored under a quota of %d bytes", quota)
	}
	p := wantProblem(t, refused, http.StatusTooManyRequests, httpguard.TypeQuotaSpent)
	after, err := strconv.Atoi(refused.header.Get("Retry-After"))
	if err != nil || after < 1 || after > int((24*time.Hour).Seconds()) {
		t.Errorf("Retry-After %q, want seconds until the window ends", refused.header.Get("Retry-After"))
	}
	t.Logf("quota %d: %d keys stored, then %d: %s", quota, accepted, refused.status, p.Detail)
	if runs.get() != accepted {
		t.Errorf("%d handler runs for %d accepted requests: a refused one must not run", runs.get(), accepted)
	}

	// Stored responses still replay; another principal has its own budget.
	if res := e.send(t, post("/orders", "key-0", "{}", "X-Tenant", "acme")); res.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay after the quota was spent: %d replayed=%q", res.status, res.header.Get("Idempotent-Replayed"))
	}
	if res := e.send(t, post("/orders", "key-0", "{}", "X-Tenant", "globex")); res.status != http.StatusCreated || res.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("another principal: %d replayed=%q, want its own fresh 201", res.status, res.header.Get("Idempotent-Replayed"))
	}

	// What acme was charged covers what Redis holds for its keys.
	var held int64
	for i := range accepted {
		lock := httpguard.LockKey("POST", "POST /orders", "acme", "key-"+strconv.Itoa(i))
		for _, k := range []string{lock + ":claim", lock + ":fence"} {
			n, err := e.admin.MemoryUsage(t.Context(), k).Result()
			if err != nil {
				t.Fatalf("MEMORY USAGE %s: %v", k, err)
			}
			held += n
		}
	}
	budgets, err := e.admin.Keys(t.Context(), "guard:{httpguard:quota:*}:budget").Result()
	if err != nil {
		t.Fatal(err)
	}
	var charged int64
	for _, b := range budgets {
		n, err := e.admin.Get(t.Context(), b).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if n > charged {
			charged = n // acme's is the larger
		}
	}
	t.Logf("acme: charged %d bytes for %d keys; Redis holds %d bytes for them (MEMORY USAGE)", charged, accepted, held)
	if charged < held || charged > quota {
		t.Errorf("charged %d bytes, Redis holds %d: the charge must cover what is held and stay within the quota %d", charged, held, quota)
	}
}

// The worst case per request, measured: what one request adds to Redis for
// Retention and for ErrorRetention, for the Security page.
func TestWorstCasePerRequest(t *testing.T) {
	e := newEnv(t)
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("size"))
		code, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(strings.Repeat("b", n)))
	})))
	usage := func(key string) (claim, fence int64) {
		lock := httpguard.LockKey("POST", "POST /orders", "", key)
		claim, _ = e.admin.MemoryUsage(context.Background(), lock+":claim").Result()
		fence, _ = e.admin.MemoryUsage(context.Background(), lock+":fence").Result()
		return claim, fence
	}
	for _, tc := range []struct {
		status, size int
	}{{400, 40}, {201, 40}, {201, 1 << 20}} {
		key := fmt.Sprintf("w-%d-%d", tc.status, tc.size)
		e.send(t, post(fmt.Sprintf("/orders?status=%d&size=%d", tc.status, tc.size), key, "{}"))
		claim, fence := usage(key)
		t.Logf("status %d, %d-byte body: claim %d bytes, fencing counter %d bytes", tc.status, tc.size, claim, fence)
		// The allocator rounds a large value up to its size class: up to a
		// quarter more, never the third more of base64.
		if tc.size == 1<<20 && claim > int64(tc.size)*5/4+4096 {
			t.Errorf("a %d-byte body costs %d bytes", tc.size, claim)
		}
	}
}
