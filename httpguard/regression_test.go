package httpguard_test

// Regressions found in review.

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/httpguard"
)

// A client that gives up mid-request; the handler sees ctx done and returns
// without writing. The retry should run the handler, not replay an empty 200.
func TestClientGoneStoresNothing(t *testing.T) {
	e := newEnv(t)
	var runs counter
	started := make(chan struct{}, 2)
	e.mux.Handle("POST /pay", httpguard.Middleware(e.locker, httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.inc()
		if n == 1 {
			started <- struct{}{}
			<-r.Context().Done() // client gone: abort, write nothing
			return
		}
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("paid"))
	})))
	ctx, cancel := context.WithCancel(context.Background())
	r, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/pay", strings.NewReader("x"))
	r.Header.Set("Idempotency-Key", "k1")
	go func() { <-started; cancel() }()
	_, err := e.srv.Client().Do(r)
	_ = err // the client gave up: an error is expected
	time.Sleep(300 * time.Millisecond)
	res := e.send(t, post("/pay", "k1", "x"))
	t.Logf("retry: status=%d replayed=%q body=%q runs=%d", res.status, res.header.Get("Idempotent-Replayed"), res.body, runs.get())
	if runs.get() != 2 {
		t.Errorf("retry replayed the aborted run instead of running the handler")
	}
}
