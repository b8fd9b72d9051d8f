package httpguard_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/httpguard"
)

// retryAfter returns the Retry-After of res in seconds, failing the test
// when it is not a positive integer.
func retryAfter(t *testing.T, res result) int {
	t.Helper()
	v := res.header.Get("Retry-After")
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("Retry-After %q, want a positive number of seconds", v)
	}
	return n
}

// A holder that crashed (here: another instance whose client is closed, so
// it can neither renew nor release) keeps its key until its lease runs out.
// The 409's Retry-After is that remaining time, as Redis reports it, in
// whole seconds rounded up: it shrinks as the lease decays, and a client
// that follows it is let in once the key is free, not 30 one-second
// retries later.
func TestRetryAfterCrashedHolder(t *testing.T) {
	e := newEnv(t)
	var runs counter
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.SharedKeys())(echo(&runs)))

	holderClient := e.redis.Client(t)
	holder, err := guard.New(holderClient)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() }) // its release fails: the key is left to expire
	const ttl = 4 * time.Second
	if _, err := holder.Acquire(t.Context(), httpguard.LookupKey("POST", "POST /orders", "", "k"), guard.TTL(ttl), guard.Wait(0)); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	if err := holderClient.Close(); err != nil { // the crash: no renewal, no release from now on
		t.Fatal(err)
	}

	first := e.send(t, post("/orders", "k", "x"))
	wantProblem(t, first, http.StatusConflict, httpguard.TypeInFlight)
	a := retryAfter(t, first)
	if a < 3 || a > 4 {
		t.Errorf("Retry-After %d right after the crash, want the lease's remaining time: 4 (3 on a slow machine)", a)
	}
	time.Sleep(2 * time.Second)
	second := e.send(t, post("/orders", "k", "x"))
	wantProblem(t, second, http.StatusConflict, httpguard.TypeInFlight)
	if b := retryAfter(t, second); b >= a || b > 2 {
		t.Errorf("Retry-After %d two seconds later (was %d), want it to have decayed to at most 2", b, a)
	}

	// Once the lease has run out, the request runs.
	for i := 0; ; i++ {
		res := e.send(t, post("/orders", "k", "x"))
		if res.status == http.StatusCreated {
			if since := time.Since(crashed); since < ttl-100*time.Millisecond {
				t.Errorf("the handler ran %v after the crash, before the %v lease ran out", since, ttl)
			}
			break
		}
		wantProblem(t, res, http.StatusConflict, httpguard.TypeInFlight)
		if i == 50 {
			t.Fatalf("still 409 %v after the crash", time.Since(crashed))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if runs.get() != 1 {
		t.Errorf("handler ran %d times, want 1", runs.get())
	}
}

// A live request renews its lease, so Redis reports nearly the whole TTL
// (30s by default) however soon it will finish. Retry-After is capped, by
// default at 5s, so a client does not wait half a minute for a request that
// completes in a second; MaxRetryAfter changes the cap.
func TestRetryAfterLiveHolder(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []httpguard.Option
		want int
	}{
		{"default cap", nil, 5},
		{"MaxRetryAfter(2s)", []httpguard.Option{httpguard.MaxRetryAfter(2 * time.Second)}, 2},
		{"MaxRetryAfter(1500ms) rounds up", []httpguard.Option{httpguard.MaxRetryAfter(1500 * time.Millisecond)}, 2},
		{"MaxRetryAfter above the TTL", []httpguard.Option{httpguard.MaxRetryAfter(time.Hour)}, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			started, release := make(chan struct{}), make(chan struct{})
			e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, append(tc.opts, httpguard.SharedKeys())...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(started)
				<-release
				w.WriteHeader(http.StatusCreated)
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
			wantProblem(t, res, http.StatusConflict, httpguard.TypeInFlight)
			if got := retryAfter(t, res); got != tc.want {
				t.Errorf("Retry-After %d, want %d", got, tc.want)
			}
		})
	}
}

// An acquisition that fails for any reason but "held by another" is not a
// conflict: the middleware could not find out, so it answers 503. Here the
// lock key has the wrong Redis type, so the acquire script fails.
func TestAcquireErrorIsUnavailable(t *testing.T) {
	e := newEnv(t)
	var runs counter
	var logged logs
	e.mux.Handle("POST /orders", httpguard.Middleware(e.locker, httpguard.Logger(logged.logger()), httpguard.SharedKeys())(echo(&runs)))
	if err := e.admin.Set(t.Context(), httpguard.LockKey("POST", "POST /orders", "", "k"), "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	res := e.send(t, post("/orders", "k", "x"))
	wantProblem(t, res, http.StatusServiceUnavailable, httpguard.TypeUnavailable)
	if ra := res.header.Get("Retry-After"); ra != "1" || runs.get() != 0 {
		t.Fatalf("Retry-After %q, handler ran %d times", ra, runs.get())
	}
	t.Logf("logged: %s", logged.String())
}
