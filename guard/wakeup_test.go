package guard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/guard/observe"
	"github.com/jobguard/jobguard/internal/childproc"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A wake-up for every way a wait can end: whoever ends what a waiter waits
// for wakes it, or a bounded timer does; nothing wakes its own sender in a
// loop. These tests count a waiter's attempts and time its hand-off.

// attemptCounter is an Observer that counts acquire requests.
type attemptCounter struct {
	nopObserver
	mu       sync.Mutex
	attempts int
}

func (c *attemptCounter) Event(_ context.Context, e observe.Event, info observe.Info) {
	if e == observe.RoundTrip && info.Op == "acquire" {
		c.mu.Lock()
		c.attempts++
		c.mu.Unlock()
	}
}

func (c *attemptCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts
}

type nopObserver struct{}

func (nopObserver) Begin(ctx context.Context, _ observe.Phase, _ observe.Info) context.Context {
	return ctx
}
func (nopObserver) End(context.Context, observe.Phase, observe.Info)   {}
func (nopObserver) Event(context.Context, observe.Event, observe.Info) {}

// A release that reached only one master of three leaves the key held on a
// majority. The waiter's attempts split (that master grants, the others are
// busy) and it drops its hold there; that drop must not wake the waiter
// itself, which sleeps until the majority's holds can have expired.
func TestQuorumWaiterDoesNotPollAfterMinorityRelease(t *testing.T) {
	const ttl = 2 * time.Second
	_, addrs := startQuorum(t, 3)
	proxies := make([]*faultproxy.Proxy, len(addrs))
	viaProxy := make([]string, len(addrs))
	for i, addr := range addrs {
		proxies[i] = faultproxy.New(t, addr)
		viaProxy[i] = proxies[i].Addr()
	}
	holder := newQuorumLocker(t, viaProxy, []func(*redis.Options){failFast}, guard.WithTTL(ttl))
	counter := &attemptCounter{}
	waiter := newQuorumLocker(t, addrs, nil, guard.WithTTL(ttl), guard.WithObserver(counter))

	le := mustAcquire(t, t.Context(), holder, "minority", guard.Wait(0))
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		w, err := waiter.Acquire(ctx, "minority")
		if err == nil {
			defer mustRelease(t, w)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // the waiter is asleep
	proxies[1].Blackhole(true)
	proxies[2].Blackhole(true)
	released := time.Now()
	before := counter.count()
	err := le.Release(context.Background())
	t.Logf("release reaching master 0 only: %v", err)
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	took, attempts := time.Since(released), counter.count()-before
	t.Logf("waiter acquired %v after the minority release, in %d attempts", took.Round(time.Millisecond), attempts)
	if attempts > 5 {
		t.Errorf("waiter made %d attempts while a majority still held the key, want at most 5", attempts)
	}
	if took > ttl+time.Second {
		t.Errorf("waiter acquired %v after the release, want within the TTL %v + 1s", took, ttl)
	}
	proxies[1].Blackhole(false)
	proxies[2].Blackhole(false)
}

// A master that was down while the key was taken comes back empty: every
// attempt of a waiter splits there too, and must not wake itself.
func TestQuorumWaiterDoesNotPollAfterMasterReturnsEmpty(t *testing.T) {
	const ttl = 2 * time.Second
	servers, addrs := startQuorum(t, 3)
	holder := newQuorumLocker(t, addrs, []func(*redis.Options){failFast}, guard.WithTTL(ttl))
	counter := &attemptCounter{}
	waiter := newQuorumLocker(t, addrs, []func(*redis.Options){failFast}, guard.WithTTL(ttl), guard.WithObserver(counter))

	servers[2].Kill(t)
	le := mustAcquire(t, t.Context(), holder, "returned", guard.Wait(0))
	defer func() { _ = le.Release(context.Background()) }()
	servers[2].Restart(t)

	const window = 3 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), window)
	defer cancel()
	_, err := waiter.Acquire(ctx, "returned")
	attempts := counter.count()
	t.Logf("waiter over %v while the holder kept a majority: %d attempts, %v", window, attempts, err)
	if err == nil {
		t.Fatal("the waiter acquired a key that a majority holds")
	}
	// The holder renews every TTL/3, so the key's holds on the majority
	// seem to end at most every TTL: an attempt then, plus the first two.
	if limit := 2 + int(window/ttl) + 2; attempts > limit {
		t.Errorf("waiter made %d attempts in %v while a majority held the key, want at most %d", attempts, window, limit)
	}
}

// waitHelpers run in a child process: a waiter the test can SIGKILL.
func init() {
	// wait ADDR KEY TTL: wait for KEY with TTL, printing "waiting PID" first.
	childHelpers["wait"] = func(args []string) error {
		if len(args) != 3 {
			return fmt.Errorf("wait: want ADDR KEY TTL, got %q", args)
		}
		ttl, err := time.ParseDuration(args[2])
		if err != nil {
			return err
		}
		client := redis.NewClient(&redis.Options{Addr: args[0]})
		defer client.Close()
		l, err := guard.New(client, guard.WithTTL(ttl), guard.WithIdentity("dead-waiter"))
		if err != nil {
			return err
		}
		defer l.Close()
		fmt.Println("waiting")
		le, err := l.Acquire(context.Background(), args[1])
		if err != nil {
			return err
		}
		fmt.Printf("held %d\n", le.Token())
		select {} // stay until killed
	}
}

// A release grants the key to the oldest waiter, which has crashed: the
// grant expires after that waiter's TTL, and a live waiter of another
// process must then get the key, not sleep on until its own timer.
func TestGrantToCrashedWaiterHandsOverWithinItsTTL(t *testing.T) {
	const deadTTL = 2 * time.Second
	srv := redistest.Start(t)
	holder := newLocker(t, srv.Addr()) // TTL 30s
	live := newLocker(t, srv.Addr())
	le := mustAcquire(t, t.Context(), holder, "granted", guard.Wait(0))

	dead := childproc.Start(t, "wait", srv.Addr(), "granted", deadTTL.String())
	dead.WaitLine(t, "waiting", 10*time.Second)
	waitWaiters(t, holder, "granted", 1)
	dead.Kill(t)

	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		defer cancel()
		w, err := live.Acquire(ctx, "granted")
		if err == nil {
			defer mustRelease(t, w)
		}
		got <- err
	}()
	waitWaiters(t, holder, "granted", 2)
	st, err := holder.Inspect(t.Context(), "granted")
	if err != nil {
		t.Fatal(err)
	}
	if st.Waiters[0].Identity != "dead-waiter" {
		t.Fatalf("the crashed waiter is not first in the queue: %+v", st.Waiters)
	}
	released := time.Now()
	mustRelease(t, le)
	if err := <-got; err != nil {
		t.Fatalf("live waiter: %v", err)
	}
	took := time.Since(released)
	t.Logf("live waiter acquired %v after the release granted the key to a crashed waiter (its TTL %v)", took.Round(time.Millisecond), deadTTL)
	if took > deadTTL+time.Second {
		t.Errorf("live waiter acquired %v after the release, want within the crashed waiter's TTL %v + 1s", took, deadTTL)
	}
}

// waitWaiters waits until key has n registered waiters.
func waitWaiters(t *testing.T, l *guard.Locker, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := l.Inspect(t.Context(), key)
		if err == nil && len(st.Waiters) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q: %d waiters after 5s, want %d (%v)", key, len(st.Waiters), n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A subscription connection that dies silently (a stateful firewall lost
// its state: the connection is half-open) is noticed and replaced, so a
// release that grants the key to a waiter on it is heard within seconds,
// not when the waiter's timer fires a TTL later.
func TestSilentSubscriptionIsReplaced(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 500 * time.Millisecond})
	defer client.Close()
	waiter, err := guard.New(client) // TTL 30s: its timer would fire after 30s
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	holder := newLocker(t, srv.Addr())
	le := mustAcquire(t, t.Context(), holder, "silent", guard.Wait(0))

	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		w, err := waiter.Acquire(ctx, "silent")
		if err == nil {
			defer mustRelease(t, w)
		}
		got <- err
	}()
	waitWaiters(t, holder, "silent", 1)
	time.Sleep(200 * time.Millisecond) // subscribed
	proxy.Freeze()
	released := time.Now()
	mustRelease(t, le)
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	took := time.Since(released)
	t.Logf("waiter on a silently dead subscription acquired %v after the release", took.Round(time.Millisecond))
	if took > 12*time.Second {
		t.Errorf("waiter acquired %v after the release, want within 12s (a dead subscription noticed and replaced)", took)
	}
}
