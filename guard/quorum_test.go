package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/guard/observe"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// startQuorum starts n independent masters and returns their addresses.
func startQuorum(t testing.TB, n int) ([]*redistest.Server, []string) {
	t.Helper()
	servers := redistest.StartMasters(t, n)
	addrs := make([]string, n)
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return servers, addrs
}

// newQuorumLocker returns a Locker on clients of its own to addrs, standing
// in for one process of a fleet; clients and Locker are closed when the test
// ends. Each client option applies to every client.
func newQuorumLocker(t testing.TB, addrs []string, clientOpts []func(*redis.Options), opts ...guard.Option) *guard.Locker {
	t.Helper()
	clients := make([]redis.UniversalClient, len(addrs))
	for i, addr := range addrs {
		o := &redis.Options{Addr: addr}
		for _, f := range clientOpts {
			f(o)
		}
		clients[i] = redis.NewClient(o)
	}
	l, err := guard.NewQuorum(clients, opts...)
	if err != nil {
		t.Fatalf("guard.NewQuorum: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for _, c := range clients {
			_ = c.Close()
		}
	})
	return l
}

// failFast makes a client give up on a dead or silent master quickly, so a
// test's faults cost it seconds, not the go-redis defaults. That includes
// go-redis's dial retries (5 tries, 100ms apart, by default): with them, a
// request to a killed master lasted until guard's per-master deadline
// until the pool had counted PoolSize failed dials, and each split vote
// between the live masters waited for it (TestQuorumMinorityDown once ran
// only 9 times in 1.5s, where it runs about 300).
func failFast(o *redis.Options) {
	o.DialTimeout = 300 * time.Millisecond
	o.ReadTimeout = 500 * time.Millisecond
	o.WriteTimeout = 500 * time.Millisecond
	o.MaxRetries = -1
	o.DialerRetries = 1
}

// fenceOn reads key's fencing counter on one master (0 when missing).
func fenceOn(t testing.TB, s *redistest.Server, key string) int64 {
	t.Helper()
	c := s.Client(t, failFast)
	v, err := c.Get(t.Context(), lockKey(key)+":fence").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("GET fence on %s: %v", s.Addr(), err)
	}
	return v
}

// waitFence waits until every server's fencing counter of key is token.
func waitFence(t testing.TB, servers []*redistest.Server, key string, token int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, s := range servers {
		for got := fenceOn(t, s, key); got != token; got = fenceOn(t, s, key) {
			if time.Now().After(deadline) {
				t.Fatalf("fencing counter of %q on %s is %d, want %d", key, s.Addr(), got, token)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// waitHeld waits until key's lock exists on every server: a master that
// granted an acquisition after a majority had is not waited for by it.
func waitHeld(t testing.TB, servers []*redistest.Server, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, s := range servers {
		c := s.Client(t, failFast)
		for n, err := c.Exists(t.Context(), lockKey(key)).Result(); n != 1; n, err = c.Exists(t.Context(), lockKey(key)).Result() {
			if time.Now().After(deadline) {
				t.Fatalf("lock %q not on %s: %v", key, s.Addr(), err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func TestNewQuorumRejectsBadInput(t *testing.T) {
	_, addrs := startQuorum(t, 1)
	client := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addrs[0]})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	other := func(port int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b, c := client(), other(1), other(2)
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cluster.Close() })
	var nilClient *redis.Client
	for _, tc := range []struct {
		name    string
		clients []redis.UniversalClient
		opts    []guard.Option
	}{
		{"none", nil, nil},
		{"one", []redis.UniversalClient{a}, nil},
		{"two", []redis.UniversalClient{a, b}, nil},
		{"even", []redis.UniversalClient{a, b, c, other(3)}, nil},
		{"nil interface", []redis.UniversalClient{a, b, nil}, nil},
		{"nil pointer", []redis.UniversalClient{a, b, nilClient}, nil},
		{"same client twice", []redis.UniversalClient{a, b, a}, nil},
		{"same address twice", []redis.UniversalClient{a, b, client()}, nil},
		{"cluster client", []redis.UniversalClient{a, b, cluster}, nil},
		{"bad option", []redis.UniversalClient{a, b, c}, []guard.Option{guard.WithTTL(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := guard.NewQuorum(tc.clients, tc.opts...)
			if !errors.Is(err, guard.ErrInvalid) {
				if l != nil {
					_ = l.Close()
				}
				t.Fatalf("NewQuorum: err = %v, want ErrInvalid", err)
			}
			t.Log(err)
		})
	}
}

func TestQuorumTokenIsOnAMajority(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	l := newQuorumLocker(t, addrs, nil)
	for range 5 {
		le := mustAcquire(t, t.Context(), l, "written")
		mustRelease(t, le)
		// The write-back is awaited on a majority and sent to every master.
		have := 0
		for _, s := range servers {
			if fenceOn(t, s, "written") >= le.Token() {
				have++
			}
		}
		if have < 2 {
			t.Fatalf("token %d is on %d of 3 masters, want a majority", le.Token(), have)
		}
	}
}

func TestQuorumHandOffWithoutPolling(t *testing.T) {
	_, addrs := startQuorum(t, 3)
	rec := newRecorder()
	holder := newQuorumLocker(t, addrs, nil, guard.WithTTL(20*time.Second))
	waiter := newQuorumLocker(t, addrs, nil, guard.WithTTL(20*time.Second), guard.WithObserver(rec))
	le := mustAcquire(t, t.Context(), holder, "handoff")
	type result struct {
		le  *guard.Lease
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		le, err := waiter.Acquire(t.Context(), "handoff", guard.Wait(15*time.Second))
		got <- result{le, err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond) // the waiter is asleep on its subscription
	released := time.Now()
	mustRelease(t, le)
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer mustRelease(t, r.le)
	// The fallback timer would fire at the holder's TTL, 20s.
	if took := r.at.Sub(released); took > 2*time.Second {
		t.Fatalf("the waiter got the key %v after the release: not woken by the notification", took)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if n := len(rec.ended[observe.Acquire]); n != 1 {
		t.Fatalf("%d acquisitions ended, want 1", n)
	}
	// One attempt before waiting, one after subscribing, one per wake-up:
	// each master publishes the release, and an attempt that comes while
	// the release has reached only some masters is dropped and woken again.
	a := rec.ended[observe.Acquire][0].Attempts
	t.Logf("%d attempts", a)
	if a > 10 {
		t.Fatalf("the waiter sent %d attempts", a)
	}
	if r.le.Token() <= le.Token() {
		t.Fatalf("token %d after %d", r.le.Token(), le.Token())
	}
}

func TestQuorumClose(t *testing.T) {
	_, addrs := startQuorum(t, 3)
	clients := make([]redis.UniversalClient, len(addrs))
	for i, addr := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr})
		defer clients[i].Close()
	}
	l, err := guard.NewQuorum(clients, guard.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	other := newQuorumLocker(t, addrs, nil)
	le := mustAcquire(t, t.Context(), l, "closing")
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = l.Close()
	}()
	<-le.Context().Done()
	if cause := context.Cause(le.Context()); !errors.Is(cause, guard.ErrClosed) || errors.Is(cause, guard.ErrLeaseLost) {
		t.Fatalf("lease cause on Close = %v, want ErrClosed (still held)", cause)
	}
	// Close keeps the key held until the job lets go of it.
	if _, err := other.Acquire(t.Context(), "closing", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("other Locker while Close waits: err = %v, want ErrNotAcquired", err)
	}
	mustRelease(t, le)
	<-closed
	if _, err := l.Acquire(t.Context(), "closing"); !errors.Is(err, guard.ErrClosed) {
		t.Fatalf("Acquire after Close: err = %v, want ErrClosed", err)
	}
	mustRelease(t, mustAcquire(t, t.Context(), other, "closing", guard.Wait(0)))
}

func TestQuorumReplicaAckPerMaster(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	ack := guard.WithReplicaAck(1, 200*time.Millisecond)
	// No master has a replica: no master can acknowledge, so no hold stands.
	l := newQuorumLocker(t, addrs, nil, ack)
	if _, err := l.Acquire(t.Context(), "acked", guard.Wait(0)); !errors.Is(err, guard.ErrNotReplicated) || errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("Acquire without replicas: err = %v, want ErrNotReplicated", err)
	}
	// The holds it got were dropped: a Locker that asks for no ack gets the key.
	mustRelease(t, mustAcquire(t, t.Context(), newQuorumLocker(t, addrs, nil), "acked", guard.Wait(0)))

	// Two masters with a replica each: a majority acknowledges.
	redistest.StartReplica(t, servers[0])
	redistest.StartReplica(t, servers[1])
	le := mustAcquire(t, t.Context(), l, "acked", guard.Wait(0))
	mustRelease(t, le)
}

func TestQuorumClaimFenced(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	a, b := newQuorumLocker(t, addrs, []func(*redis.Options){failFast}), newQuorumLocker(t, addrs, []func(*redis.Options){failFast})
	first := mustAcquire(t, t.Context(), a, "result")
	if err := a.ClaimFenced(t.Context(), "result", first.Token(), []byte("first"), time.Minute); err != nil {
		t.Fatalf("ClaimFenced with the newest token: %v", err)
	}
	mustRelease(t, first)
	second := mustAcquire(t, t.Context(), b, "result")
	if err := a.ClaimFenced(t.Context(), "result", first.Token(), []byte("stale"), time.Minute); !errors.Is(err, guard.ErrSuperseded) {
		t.Fatalf("ClaimFenced with a superseded token: err = %v, want ErrSuperseded", err)
	}
	// Every master ends up with the token, a late one included; then one
	// may go down and the token is still on a majority. (The hold itself may
	// be on just a majority, which a master going down would break: release
	// it first.)
	waitFence(t, servers, "result", second.Token())
	mustRelease(t, second)
	servers[0].Kill(t)
	if err := b.ClaimFenced(t.Context(), "result", second.Token(), []byte("second"), time.Minute); err != nil {
		t.Fatalf("ClaimFenced with a master down: %v", err)
	}
	if v, ok, err := a.Claimed(t.Context(), "result"); err != nil || !ok || string(v) != "second" {
		t.Fatalf("Claimed = %q, %v, %v; want second", v, ok, err)
	}
}

// Claimers that ask at once split the masters now and then (each first on
// a minority); they take back what they stored and try again, so every
// claim has exactly one winner, never none.
func TestQuorumConcurrentClaimsHaveOneWinner(t *testing.T) {
	_, addrs := startQuorum(t, 3)
	lockers := make([]*guard.Locker, 5)
	for i := range lockers {
		lockers[i] = newQuorumLocker(t, addrs, nil)
	}
	for round := range 30 {
		key := fmt.Sprintf("tick-%d", round)
		var winners atomic.Int32
		var wg sync.WaitGroup
		for i, l := range lockers {
			wg.Go(func() {
				ok, err := l.Claim(t.Context(), key, []byte{byte('a' + i)}, time.Minute)
				if err != nil {
					t.Errorf("Claim: %v", err)
				}
				if ok {
					winners.Add(1)
				}
			})
		}
		wg.Wait()
		if n := winners.Load(); n != 1 {
			t.Fatalf("round %d: %d winners, want 1", round, n)
		}
		if v, ok, err := lockers[0].Claimed(t.Context(), key); err != nil || !ok || len(v) != 1 {
			t.Fatalf("round %d: Claimed = %q, %v, %v; want the winner's value", round, v, ok, err)
		}
	}
}
