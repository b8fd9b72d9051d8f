package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The liveness promise: every call returns when its context is done, also
// while the server cannot answer, and also while another goroutine of the
// same Locker is stuck in the same fault (no lock in guard is held across a
// network call). Each case below builds a fresh fleet: the Locker under test
// reaches its servers through a fault proxy and a dialer that can be made
// slow; a second Locker, direct, holds the keys it waits for.

const (
	// callBudget is the context every measured call gets.
	callBudget = 300 * time.Millisecond
	// returnBound is how soon after its start a call must have returned.
	returnBound = time.Second
)

// slowDialer opens connections after a delay the test sets, as a dial does
// when SYNs are dropped: new connections are slow, open ones are not.
type slowDialer struct{ delay atomic.Int64 }

func (d *slowDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if delay := time.Duration(d.delay.Load()); delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// faultEnv is one fleet: l is the Locker under test, other a second
// process's Locker that holds the keys l waits for.
type faultEnv struct {
	servers []*redistest.Server
	proxies []*faultproxy.Proxy
	dialer  *slowDialer
	clients []*redis.Client // l's
	l       *guard.Locker
	other   *guard.Locker
}

// newFaultEnv starts one server (New) or three (NewQuorum when quorum).
func newFaultEnv(t *testing.T, quorum bool) *faultEnv {
	t.Helper()
	e := &faultEnv{dialer: &slowDialer{}}
	if quorum {
		e.servers = redistest.StartMasters(t, 3)
	} else {
		e.servers = []*redistest.Server{redistest.Start(t)}
	}
	var mine, theirs []redis.UniversalClient
	for _, s := range e.servers {
		p := faultproxy.New(t, s.Addr())
		e.proxies = append(e.proxies, p)
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), Dialer: e.dialer.dial})
		e.clients = append(e.clients, c)
		mine = append(mine, c)
		theirs = append(theirs, redis.NewClient(&redis.Options{Addr: s.Addr()}))
	}
	t.Cleanup(func() {
		for _, c := range append(mine, theirs...) {
			_ = c.Close()
		}
	})
	open := func(clients []redis.UniversalClient) *guard.Locker {
		var l *guard.Locker
		var err error
		if quorum {
			l, err = guard.NewQuorum(clients)
		} else {
			l, err = guard.New(clients[0])
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	e.l, e.other = open(mine), open(theirs)
	return e
}

// warm opens a few connections in each of l's pools, so that only a new
// kind of connection (the subscription) needs a dial during the fault.
func (e *faultEnv) warm(t *testing.T) {
	t.Helper()
	for _, c := range e.clients {
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				if err := c.Ping(t.Context()).Err(); err != nil {
					t.Errorf("warming the pool: %v", err)
				}
			})
		}
		wg.Wait()
	}
}

// hold has the other Locker hold key until the test ends.
func (e *faultEnv) hold(t *testing.T, key string) {
	t.Helper()
	le := mustAcquire(t, t.Context(), e.other, key, guard.Wait(0))
	t.Cleanup(func() { _ = le.Release(context.Background()) })
}

// killFeeds closes every subscription connection on the servers.
func (e *faultEnv) killFeeds(t *testing.T) {
	t.Helper()
	for _, s := range e.servers {
		c := s.Client(t)
		if err := c.ClientKillByFilter(t.Context(), "TYPE", "pubsub").Err(); err != nil {
			t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
		}
	}
}

type livenessFault struct {
	name string
	// feedFirst has a waiter subscribed before the fault, for a fault
	// that acts on the subscription.
	feedFirst     bool
	inject, clear func(t *testing.T, e *faultEnv)
}

var livenessFaults = []livenessFault{
	{
		name:   "new connections slow to open",
		inject: func(_ *testing.T, e *faultEnv) { e.dialer.delay.Store(int64(4 * time.Second)) },
		clear:  func(_ *testing.T, e *faultEnv) { e.dialer.delay.Store(0) },
	},
	{
		name: "link black-holed",
		inject: func(_ *testing.T, e *faultEnv) {
			for _, p := range e.proxies {
				p.Blackhole(true)
			}
		},
		clear: func(_ *testing.T, e *faultEnv) {
			for _, p := range e.proxies {
				p.Blackhole(false)
				p.CutAll() // what was lost meanwhile must not be read as a late reply
			}
		},
	},
	{
		name: "server SIGSTOPped",
		inject: func(t *testing.T, e *faultEnv) {
			for _, s := range e.servers {
				s.Pause(t)
			}
		},
		clear: func(t *testing.T, e *faultEnv) {
			for _, s := range e.servers {
				s.Resume(t)
			}
		},
	},
	{
		name:      "pub/sub connection killed",
		feedFirst: true,
		inject:    func(t *testing.T, e *faultEnv) { e.killFeeds(t) },
		clear:     func(*testing.T, *faultEnv) {},
	},
}

// livenessCall is one public call that can wait. setup runs before the
// fault; it returns the call, which run calls twice: once as the stuck
// goroutine (with a context the test cancels at the end) and once measured,
// with callBudget.
type livenessCall struct {
	name   string
	quorum bool
	setup  func(t *testing.T, e *faultEnv) (stuck, measured func(ctx context.Context) error)
}

func sameCall(f func(ctx context.Context) error) (func(context.Context) error, func(context.Context) error) {
	return f, f
}

var livenessCalls = []livenessCall{
	{name: "Acquire fresh", setup: acquireFresh},
	{name: "Acquire waiting", setup: acquireWaiting},
	{name: "Acquire re-entering", setup: acquireReentering},
	{name: "Release", setup: releaseLease},
	{name: "WithLock", setup: func(_ *testing.T, e *faultEnv) (func(context.Context) error, func(context.Context) error) {
		var n atomic.Int32
		return sameCall(func(ctx context.Context) error {
			return e.l.WithLock(ctx, fmt.Sprintf("withlock-%d", n.Add(1)), func(context.Context) error { return nil })
		})
	}},
	{name: "Inspect", setup: func(t *testing.T, e *faultEnv) (func(context.Context) error, func(context.Context) error) {
		e.hold(t, "inspected")
		return sameCall(func(ctx context.Context) error {
			_, err := e.l.Inspect(ctx, "inspected")
			return err
		})
	}},
	{name: "Scan", setup: func(t *testing.T, e *faultEnv) (func(context.Context) error, func(context.Context) error) {
		e.hold(t, "scanned")
		return sameCall(func(ctx context.Context) error {
			return e.l.Scan(ctx, "*", func(guard.LockState) error { return nil })
		})
	}},
	{name: "ForceRelease", setup: func(_ *testing.T, e *faultEnv) (func(context.Context) error, func(context.Context) error) {
		return sameCall(func(ctx context.Context) error {
			_, err := e.l.ForceRelease(ctx, "forced")
			return err
		})
	}},
	{name: "Claim", setup: func(_ *testing.T, e *faultEnv) (func(context.Context) error, func(context.Context) error) {
		return sameCall(func(ctx context.Context) error {
			_, err := e.l.Claim(ctx, "claimed", []byte("v"), time.Minute)
			return err
		})
	}},
	{name: "ClaimFenced", setup: func(t *testing.T, e *faultEnv) (func(context.Context) error, func(context.Context) error) {
		le := mustAcquire(t, t.Context(), e.l, "fenced-claim", guard.Wait(0))
		t.Cleanup(func() { _ = le.Release(context.Background()) })
		return sameCall(func(ctx context.Context) error {
			return e.l.ClaimFenced(ctx, "fenced-claim", le.Token(), []byte("v"), time.Minute)
		})
	}},
	{name: "WithClaim release", setup: withClaimRelease},
	{name: "quorum Acquire fresh", quorum: true, setup: acquireFresh},
	{name: "quorum Acquire waiting", quorum: true, setup: acquireWaiting},
	{name: "quorum Release", quorum: true, setup: releaseLease},
}

func acquireFresh(_ *testing.T, e *faultEnv) (func(context.Context) error, func(context.Context) error) {
	var n atomic.Int32
	return sameCall(func(ctx context.Context) error {
		le, err := e.l.Acquire(ctx, fmt.Sprintf("fresh-%d", n.Add(1)))
		if err == nil {
			_ = le.Release(ctx)
		}
		return err
	})
}

func acquireWaiting(t *testing.T, e *faultEnv) (func(context.Context) error, func(context.Context) error) {
	e.hold(t, "waited-a")
	e.hold(t, "waited-b")
	acquire := func(key string) func(context.Context) error {
		return func(ctx context.Context) error {
			le, err := e.l.Acquire(ctx, key)
			if err == nil {
				_ = le.Release(ctx)
			}
			return err
		}
	}
	return acquire("waited-a"), acquire("waited-b")
}

// acquireReentering re-enters a hold of l's through the hold's context.
func acquireReentering(t *testing.T, e *faultEnv) (func(context.Context) error, func(context.Context) error) {
	le := mustAcquire(t, t.Context(), e.l, "reentered", guard.Wait(0))
	t.Cleanup(func() { _ = le.Release(context.Background()) })
	return sameCall(func(ctx context.Context) error {
		// ctx's values must carry the hold: derive from the lease's context,
		// with ctx's cancellation.
		rctx, cancel := context.WithCancel(le.Context())
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		inner, err := e.l.Acquire(rctx, "reentered")
		if err == nil {
			_ = inner.Release(ctx)
		}
		return err
	})
}

// withClaimRelease runs WithClaim's final release, which stores the job's
// result and frees the key in one request, into the fault: each job starts
// before the fault and returns its result when its call is made, under a
// WithClaim context that the call's context cancels.
func withClaimRelease(t *testing.T, e *faultEnv) (func(context.Context) error, func(context.Context) error) {
	call := func(key string) func(context.Context) error {
		parent, cancel := context.WithCancel(context.Background())
		started, finish := make(chan struct{}), make(chan struct{})
		var once sync.Once
		result := make(chan error, 1)
		go func() {
			_, err := e.l.WithClaim(parent, key, []byte("bind"), time.Minute, func(context.Context) ([]byte, time.Duration, error) {
				close(started)
				<-finish
				return []byte("result"), time.Minute, nil
			})
			result <- err
		}()
		t.Cleanup(func() { // should the test end before the call
			once.Do(func() { close(finish) })
			cancel()
			<-result
		})
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatalf("WithClaim(%q) did not start its job within 5s", key)
		}
		return func(ctx context.Context) error {
			stop := context.AfterFunc(ctx, cancel)
			defer stop()
			once.Do(func() { close(finish) })
			err := <-result
			result <- err // for the cleanup
			return err
		}
	}
	return call("claim-stuck"), call("claim-measured")
}

// releaseLease releases two leases of one hold: the stuck goroutine the
// inner, the measured call the outer.
func releaseLease(t *testing.T, e *faultEnv) (func(context.Context) error, func(context.Context) error) {
	outer := mustAcquire(t, t.Context(), e.l, "released", guard.Wait(0))
	inner := mustAcquire(t, outer.Context(), e.l, "released")
	return inner.Release, outer.Release
}

func TestEveryCallReturnsWhenItsContextIsDone(t *testing.T) {
	for _, f := range livenessFaults {
		for _, c := range livenessCalls {
			t.Run(f.name+"/"+c.name, func(t *testing.T) {
				e := newFaultEnv(t, c.quorum)
				e.warm(t)
				stuck, measured := c.setup(t, e)
				if f.feedFirst {
					// A waiter subscribed before the fault.
					e.hold(t, "subscribed")
					go func() {
						ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
						defer cancel()
						_, _ = e.l.Acquire(ctx, "subscribed")
					}()
					time.Sleep(200 * time.Millisecond)
				}
				e.hold(t, "stuck-waiter")
				f.inject(t, e)
				cleared := false
				defer func() {
					if !cleared {
						f.clear(t, e)
					}
				}()

				// Another goroutine of the same Locker, stuck in the same fault:
				// a waiter (it subscribes) and the same call.
				stuckCtx, cancelStuck := context.WithCancel(t.Context())
				type result struct {
					name string
					err  error
					took time.Duration // after its context was done
				}
				stuckDone := make(chan result, 2)
				var canceledAt atomic.Pointer[time.Time]
				for name, call := range map[string]func(context.Context) error{
					"stuck waiter": func(ctx context.Context) error { _, err := e.l.Acquire(ctx, "stuck-waiter"); return err },
					"stuck call":   stuck,
				} {
					go func() {
						err := call(stuckCtx)
						var took time.Duration
						if at := canceledAt.Load(); at != nil {
							took = time.Since(*at)
						}
						stuckDone <- result{name, err, took}
					}()
				}
				time.Sleep(200 * time.Millisecond)

				ctx, cancel := context.WithTimeout(t.Context(), callBudget)
				start := time.Now()
				err := measured(ctx)
				took := time.Since(start)
				cancel()
				t.Logf("returned after %v: %v", took.Round(time.Millisecond), err)
				if took > returnBound {
					t.Errorf("returned %v after it was called with a %v context, want within %v", took.Round(time.Millisecond), callBudget, returnBound)
				}

				// The stuck calls too return when their context is done,
				// fault or not.
				now := time.Now()
				canceledAt.Store(&now)
				cancelStuck()
				for range 2 {
					select {
					case r := <-stuckDone:
						if r.took > returnBound {
							t.Errorf("%s returned %v after its context was canceled, want within %v (%v)", r.name, r.took.Round(time.Millisecond), returnBound, r.err)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("a stuck call did not return within 10s of its context's end")
					}
				}
				f.clear(t, e)
				cleared = true
			})
		}
	}
}

// A Release under a context that is never done, or already done (a
// deferred Release after shutdown), waits for the answer no longer than the
// request timeout, also when go-redis would wait longer on a dead link.
func TestDetachedReleaseIsBoundedByTheRequestTimeout(t *testing.T) {
	const ttl = time.Second // request timeout: TTL/10
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 5 * time.Second, MaxRetries: -1})
	defer client.Close()
	l, err := guard.New(client, guard.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	for name, ctx := range map[string]context.Context{"Background": context.Background(), "already canceled": canceled} {
		t.Run(name, func(t *testing.T) {
			le := mustAcquire(t, t.Context(), l, "detached-"+name, guard.Wait(0))
			proxy.Blackhole(true)
			defer proxy.Blackhole(false)
			start := time.Now()
			err := le.Release(ctx)
			took := time.Since(start)
			t.Logf("Release returned after %v: %v", took.Round(time.Millisecond), err)
			if took > returnBound {
				t.Errorf("Release(%s) returned after %v on a dead link, want within %v (request timeout %v)", name, took, returnBound, ttl/10)
			}
		})
	}
}

// More calls than a Locker sends at once (the rest wait to share a flight)
// are stuck behind a black hole: each returns when its context is done,
// whether its request was sent or waited, and Close returns once the link
// is back.
func TestManyStuckCallsReturnWhenTheirContextsAreDone(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 64})
	t.Cleanup(func() { _ = client.Close() })
	l, err := guard.New(client, guard.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	le := mustAcquire(t, t.Context(), l, "warm-up")
	if err := le.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(true)
	const calls = 40 // five times the eight a Locker sends at once
	took := make([]time.Duration, calls)
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), callBudget)
			defer cancel()
			start := time.Now()
			var le *guard.Lease
			le, errs[i] = l.Acquire(ctx, fmt.Sprint("stuck-", i))
			took[i] = time.Since(start)
			if le != nil {
				_ = le.Release(t.Context())
			}
		}()
	}
	wg.Wait()
	for i := range calls {
		if errs[i] == nil {
			t.Errorf("call %d acquired through a black hole", i)
		}
		if took[i] > returnBound {
			t.Errorf("call %d returned %v after it was called with a %v context, want within %v", i, took[i].Round(time.Millisecond), callBudget, returnBound)
		}
	}
	proxy.Blackhole(false)
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return within 15s of the link's return")
	}
}

// A release's sender gives up on a try at the request timeout, whether
// go-redis ends its reads by itself or not: with the client's timeouts on,
// the try runs on the sender's goroutine and ends at the read timeout; with
// them off (-2: no deadline on the socket at all) it runs where the sender
// can leave it at its deadline. Either way the hold is settled (its release
// logged as failed) while the link is still dead.
func TestReleaseSenderGivesUpOnADeadLink(t *testing.T) {
	for name, opts := range map[string]redis.Options{
		"read timeout":    {ReadTimeout: 500 * time.Millisecond, MaxRetries: -1},
		"no socket limit": {ReadTimeout: -2, WriteTimeout: -2, MaxRetries: -1},
	} {
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := faultproxy.New(t, srv.Addr())
			opts.Addr = proxy.Addr()
			client := redis.NewClient(&opts)
			var logged syncBuffer
			l, err := guard.New(client, guard.WithTTL(3*time.Second), guard.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				// Close waits for the tries on the link; one that lost its
				// request to the black hole and has no socket deadline ends
				// only with its connection.
				proxy.Blackhole(false)
				_ = client.Close()
				_ = l.Close()
			}()
			le := mustAcquire(t, t.Context(), l, "sender", guard.Wait(0))
			proxy.Blackhole(true)
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			if err := le.Release(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Release on a dead link = %v, want its context's error", err)
			}
			for stop := time.Now().Add(10 * time.Second); !strings.Contains(logged.String(), "release failed"); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(stop) {
					t.Fatalf("no failed release logged 10s into a dead link (request timeout 300ms); log:\n%s", logged.String())
				}
			}
		})
	}
}
