// Http runs an order service whose POST /orders is guarded by httpguard,
// and a client that does what real clients do: it retries, sends a request
// twice at once, reuses a key by mistake and forgets the key. It prints
// what the middleware made of each request.
//
//	go run ./examples/http                                            # embedded Redis
//	REDIS_URL=redis://127.0.0.1:6379/15 go run ./examples/http        # a real one
//	go run ./examples/http -trace                                     # and print the spans as a tree
//	go run ./examples/http -trace=json                                # or as JSON, as they end
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/examples/internal/exampleenv"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/httpguard"
)

func main() { exampleenv.Main("http example", run) }

// run tells the story on out; opts go to the service's Locker.
func run(ctx context.Context, out io.Writer, opts ...guard.Option) error {
	dial, stopRedis, err := exampleenv.Connect()
	if err != nil {
		return err
	}
	defer stopRedis()
	rdb := dial()
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	locker, err := guard.New(rdb, opts...)
	if err != nil {
		return err
	}
	defer locker.Close()

	p := exampleenv.NewPrinter(out)
	orders := &orderService{p: p, firstStarted: make(chan struct{}), letFirstFinish: make(chan struct{})}
	mux := http.NewServeMux()
	// Keys are scoped to the account that sent them: one account's stored
	// response is never replayed to another that sends the same key.
	idem := httpguard.Middleware(locker, httpguard.Principal(accountOf))
	mux.Handle("POST /orders", authenticate(idem(orders)))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		<-served
	}()
	p.Say("server", "listening on %s; POST /orders is guarded by httpguard", ln.Addr())

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	c := &client{p: p, http: &http.Client{Transport: transport, Timeout: 10 * time.Second}, base: "http://" + ln.Addr().String(), token: "alice-token"}
	// A fresh key per run, so that a real Redis does not replay the last run.
	key := "checkout-" + strings.ToLower(rand.Text()[:8])

	p.Say("story", "--- 1. a client creates an order; the service is slow today")
	first := make(chan error, 1)
	go func() {
		_, err := c.post("client", key, `{"item":"book"}`)
		first <- err
	}()
	select {
	case <-orders.firstStarted:
	case <-time.After(5 * time.Second):
		return errors.New("the first request never reached the handler")
	}

	p.Say("story", "--- 2. a double click sends the same request while the first is in flight")
	status, err := c.post("double-click", key, `{"item":"book"}`)
	close(orders.letFirstFinish)
	if err != nil {
		return err
	}
	if status != http.StatusConflict {
		return fmt.Errorf("the duplicate got %d, want 409", status)
	}
	if err := <-first; err != nil {
		return err
	}

	p.Say("story", "--- 3. the client never saw that 201 (a timeout, say) and retries")
	if _, err := c.post("client", key, `{"item":"book"}`); err != nil {
		return err
	}

	p.Say("story", "--- 4. a bug reuses the key for another order")
	if _, err := c.post("client", key, `{"item":"lamp"}`); err != nil {
		return err
	}

	p.Say("story", "--- 5. a request without a key is not guarded")
	if _, err := c.post("client", "", `{"item":"pen"}`); err != nil {
		return err
	}

	p.Say("story", "--- 6. a key that is not 1-255 printable ASCII characters")
	if _, err := c.post("client", strings.Repeat("x", 256), `{"item":"pen"}`); err != nil {
		return err
	}

	p.Say("story", "--- 7. another account sends the same key and payload as step 1")
	c.token = "bob-token"
	if _, err := c.post("bob", key, `{"item":"book"}`); err != nil {
		return err
	}

	p.Say("story", "the handler ran %d times for %d requests; orders: %s", orders.count(), c.sent.Load(), strings.Join(orders.list(), ", "))
	return nil
}

// accounts maps API tokens to accounts: a stand-in for real authentication.
var accounts = map[string]string{"alice-token": "alice", "bob-token": "bob"}

type accountKey struct{}

// authenticate answers 401 to a request without a known token and puts
// the account in the request's context for the handlers inside it.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		account, ok := accounts[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		if !ok {
			http.Error(w, "unknown token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), accountKey{}, account)))
	})
}

// accountOf is httpguard's Principal: the account authenticate found.
func accountOf(r *http.Request) string {
	account, _ := r.Context().Value(accountKey{}).(string)
	return account
}

// orderService creates orders. The first one is slow: it waits until the
// story has sent a duplicate.
type orderService struct {
	p              *exampleenv.Printer
	firstStarted   chan struct{}
	letFirstFinish chan struct{}

	mu     sync.Mutex
	orders []string
}

func (s *orderService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct{ Item string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad order", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.orders = append(s.orders, req.Item)
	id := len(s.orders)
	s.mu.Unlock()
	s.p.Say("server", "handler runs: creating order %d (%s)", id, req.Item)
	if id == 1 {
		close(s.firstStarted)
		select {
		case <-s.letFirstFinish:
		case <-time.After(5 * time.Second):
		}
		time.Sleep(300 * time.Millisecond) // the slow part
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%d,"item":%q}`, id, req.Item)
}

func (s *orderService) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.orders)
}

func (s *orderService) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.orders...)
}

// client sends requests with its account's token and prints what came back.
type client struct {
	p     *exampleenv.Printer
	http  *http.Client
	base  string
	token string
	sent  atomic.Int32
}

// post sends POST /orders with key (none if empty) and returns the status.
func (c *client) post(who, key, body string) (int, error) {
	r, err := http.NewRequest(http.MethodPost, c.base+"/orders", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+c.token)
	shown := "no Idempotency-Key"
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
		shown = "Idempotency-Key: " + key
		if len(key) > 20 {
			shown = fmt.Sprintf("Idempotency-Key: %s... (%d characters)", key[:12], len(key))
		}
	}
	c.p.Say(who, "POST /orders %s, %s", body, shown)
	c.sent.Add(1)
	resp, err := c.http.Do(r)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var notes []string
	for _, h := range []string{"Location", "Idempotent-Replayed", "Retry-After", "Cache-Control"} {
		if v := resp.Header.Get(h); v != "" {
			notes = append(notes, h+": "+v)
		}
	}
	answer := strings.TrimSpace(string(b))
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		var problem httpguard.Problem
		if err := json.Unmarshal(b, &problem); err == nil {
			answer = fmt.Sprintf("problem %q: %s", problem.Title, problem.Detail)
		}
	}
	c.p.Say(who, "<- %d %s [%s] %s", resp.StatusCode, http.StatusText(resp.StatusCode), strings.Join(notes, ", "), answer)
	return resp.StatusCode, nil
}
