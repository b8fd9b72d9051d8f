package httpguard_test

import (
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/httpguard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// env is one real redis-server, a Locker on it, and an httptest.Server
// whose ServeMux the test fills before sending requests.
type env struct {
	redis  *redistest.Server
	admin  *redis.Client // for looking at and tampering with Redis
	locker *guard.Locker
	mux    *http.ServeMux
	srv    *httptest.Server
}

func newEnv(t *testing.T, opts ...guard.Option) *env {
	t.Helper()
	e := &env{redis: redistest.Start(t), mux: http.NewServeMux()}
	e.admin = e.redis.Client(t)
	client := e.redis.Client(t)
	l, err := guard.New(client, opts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	e.locker = l
	e.srv = httptest.NewUnstartedServer(e.mux)
	e.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // panicking handlers are part of the tests
	e.srv.Start()
	t.Cleanup(func() {
		e.srv.Close()
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// result is a response as the client saw it.
type result struct {
	status int
	header http.Header
	body   string
}

func (r result) problem(t *testing.T) httpguard.Problem {
	t.Helper()
	var p httpguard.Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	return p
}

// req is a request to send: header holds name/value pairs; an absent key
// header is simply not listed.
type req struct {
	method, path, body string
	header             []string
}

func post(path, key, body string, header ...string) req {
	return req{method: http.MethodPost, path: path, body: body, header: append([]string{"Idempotency-Key", key}, header...)}
}

// try sends q and reads the whole response.
func (e *env) try(q req) (result, error) {
	var body io.Reader
	if q.body != "" {
		body = strings.NewReader(q.body)
	}
	r, err := http.NewRequest(q.method, e.srv.URL+q.path, body)
	if err != nil {
		return result{}, err
	}
	for i := 0; i+1 < len(q.header); i += 2 {
		r.Header.Add(q.header[i], q.header[i+1])
	}
	resp, err := e.srv.Client().Do(r)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return result{}, err
	}
	return result{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

func (e *env) send(t *testing.T, q req) result {
	t.Helper()
	res, err := e.try(q)
	if err != nil {
		t.Fatalf("%s %s: %v", q.method, q.path, err)
	}
	return res
}

// logs collects log lines for a Logger option.
type logs struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logs) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// counter counts handler runs.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) inc() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

func (c *counter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// echo is a handler that counts its runs and answers 201 with the run
// number and the request body, a Location and a header that is not
// replayed.
func echo(runs *counter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n := runs.inc()
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/1")
		w.Header().Set("X-Run", strconv.Itoa(n))
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"run":`+strconv.Itoa(n)+`,"got":"`+string(b)+`"}`)
	}
}

// wait receives from ch or fails the test after d.
func wait[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("not within %v: %s", d, what)
		panic("unreachable")
	}
}

// wantProblem checks that res is a problem of type typ with status.
func wantProblem(t *testing.T, res result, status int, typ string) httpguard.Problem {
	t.Helper()
	if res.status != status {
		t.Fatalf("status %d, want %d; body %s", res.status, status, res.body)
	}
	if ct := res.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	if cc := res.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	p := res.problem(t)
	if p.Type != typ || p.Status != status || p.Title == "" || p.Detail == "" {
		t.Errorf("problem %+v, want type %s and status %d with title and detail", p, typ, status)
	}
	return p
}
