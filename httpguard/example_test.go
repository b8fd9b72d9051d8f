package httpguard_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/httpguard"
	"github.com/redis/go-redis/v9"
)

func Example() {
	m, err := miniredis.Run() // an embedded Redis, so the example runs anywhere
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	locker, err := guard.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	orders := 0
	createOrder := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", orders))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d: %s", orders, body)
	})
	// Keys belong to the account that sent them: accountOf reads what the
	// authentication in front of the middleware found (a header stands in
	// for it here), so no account is ever replayed another's response.
	accountOf := func(r *http.Request) string { return r.Header.Get("X-Account") }
	idem := httpguard.Middleware(locker, httpguard.Principal(accountOf))
	mux := http.NewServeMux()
	// Wrap each route, so that keys are scoped by its pattern.
	mux.Handle("POST /orders", idem(createOrder))

	send := func(key, body string) {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(body))
		r.Header.Set("X-Account", "acme")
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Printf("%d %s (Location %q, replayed %q)\n", w.Code, strings.TrimSpace(w.Body.String()),
			w.Header().Get("Location"), w.Header().Get("Idempotent-Replayed"))
	}
	send("a1", "1 book")      // runs the handler
	send("a1", "1 book")      // a retry: the stored response
	send("a1", "2 books")     // the same key for another order
	send("b2", "1 newspaper") // another key runs the handler
	fmt.Println("orders created:", orders)
	// Output:
	// 201 order 1: 1 book (Location "/orders/1", replayed "")
	// 201 order 1: 1 book (Location "/orders/1", replayed "true")
	// 422 {"type":"https://pkg.go.dev/github.com/jobguard/jobguard/httpguard#TypeKeyReused","title":"Idempotency-Key reused","status":422,"detail":"The Idempotency-Key was already used with a different request payload."} (Location "", replayed "")
	// 201 order 2: 1 newspaper (Location "/orders/2", replayed "")
	// orders created: 2
}

// exampleLocker returns a Locker on an embedded Redis and a func that
// closes both.
func exampleLocker() (*guard.Locker, func()) {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	locker, err := guard.New(client)
	if err != nil {
		log.Fatal(err)
	}
	return locker, func() { locker.Close(); client.Close(); m.Close() }
}

// The middleware around one route: a request and its retry with the same
// Idempotency-Key create one order, and the retry gets the stored response.
func ExampleMiddleware() {
	locker, stop := exampleLocker() //docs:hide
	defer stop()                    //docs:hide

	orders := 0
	createOrder := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", orders)
	})
	// accountOf names who sent it: here the Basic-auth user that the
	// authentication in front of this handler checked; never an unchecked value.
	accountOf := func(r *http.Request) string { user, _, _ := r.BasicAuth(); return user }
	idem := httpguard.Middleware(locker, httpguard.Principal(accountOf))
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idem(createOrder)) // keys are scoped by the route pattern

	for range 2 { // a request, and its retry
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"book":1}`))
		r.Header.Set("Idempotency-Key", "4f6c1e")
		r.SetBasicAuth("acme", "s3cret")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Body.String(), "replayed:", w.Header().Get("Idempotent-Replayed") == "true")
	}
	// Output:
	// 201 order 1 replayed: false
	// 201 order 1 replayed: true
}
