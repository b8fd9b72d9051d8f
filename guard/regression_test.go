package guard_test

// Regressions found in review: each test failed before its fix.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A reader that gets a key other Lockers wait for must let their readers in,
// not cancel their hand-off and leave them asleep until the TTL.
func TestReadersOnEveryLockerJoin(t *testing.T) {
	_, ls := newLockers(t, 3, guard.WithTTL(3*time.Second))
	writer := mustAcquire(t, t.Context(), ls[0], "rw")
	type result struct {
		le  *guard.Lease
		err error
		at  time.Time
	}
	r2, r3 := make(chan result, 1), make(chan result, 1)
	read := func(l *guard.Locker, out chan<- result) {
		le, err := l.AcquireRead(t.Context(), "rw", guard.Wait(10*time.Second))
		out <- result{le, err, time.Now()}
	}
	go read(ls[1], r2)
	time.Sleep(150 * time.Millisecond)
	go read(ls[2], r3)
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	mustRelease(t, writer)
	a, b := <-r2, <-r3
	if a.err != nil || b.err != nil {
		t.Fatalf("readers: %v, %v", a.err, b.err)
	}
	defer mustRelease(t, a.le)
	defer mustRelease(t, b.le)
	if d := b.at.Sub(start); d > time.Second {
		t.Fatalf("second Locker's reader got in %v after the writer left, want at once", d)
	}
}

// A deferred Release with a context that shutdown canceled still frees the key.
func TestReleaseWithCanceledContext(t *testing.T) {
	_, ls := newLockers(t, 2)
	le := mustAcquire(t, t.Context(), ls[0], "canceled-release")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := le.Release(ctx); err != nil {
		t.Fatalf("Release with a canceled ctx: %v", err)
	}
	mustRelease(t, mustAcquire(t, t.Context(), ls[1], "canceled-release", guard.Wait(0)))
}

// A renewal still on the wire when a MinHold release lands must not keep the
// key for another TTL.
func TestRenewDoesNotExtendMinHold(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	acquire := redis.NewScript(readScript(t, "prelude.lua") + readScript(t, "acquire.lua"))
	update := redis.NewScript(readScript(t, "prelude.lua") + readScript(t, "set_counts.lua"))
	renew := redis.NewScript(readScript(t, "prelude.lua") + readScript(t, "renew.lua"))
	k := []string{"guard:{m}", "guard:{m}:fence", "guard:{m}:waiters"}
	if _, err := acquire.Run(t.Context(), c, k, "o1", 10000, "w", "", "id", 300).Int64Slice(); err != nil {
		t.Fatal(err)
	}
	if _, err := update.Run(t.Context(), c, []string{k[0], k[2], "guard:{m}:done:o1", k[1]}, "o1", 2000).Int64(); err != nil {
		t.Fatal(err)
	}
	if res, err := renew.Run(t.Context(), c, []string{k[0]}, "o1", 10000).Int64(); err != nil || res == 1 {
		t.Fatalf("renew of a released hold = %d, %v; want it refused", res, err)
	}
	time.Sleep(500 * time.Millisecond)
	got, err := acquire.Run(t.Context(), c, k, "o2", 10000, "w", "", "id").Int64Slice()
	if err != nil || got[0] != 1 {
		t.Fatalf("other owner after MinHold 300ms: %v, %v; want acquired", got, err)
	}
}

// A final release whose reply is lost and which go-redis retries is still a
// release, not a lost lease.
func TestRetriedReleaseIsNotALoss(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 150 * time.Millisecond, MaxRetries: 2})
	defer client.Close()
	// A 1s request timeout leaves the read timeout, go-redis's retry and its
	// answer room to finish on a loaded machine.
	l, err := guard.New(client, guard.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mustRelease(t, mustAcquire(t, t.Context(), l, "warm")) // scripts loaded
	err = l.WithLock(t.Context(), "retried", func(context.Context) error {
		proxy.SetLatency(100 * time.Millisecond) // the release's reply comes after the read timeout
		time.AfterFunc(130*time.Millisecond, func() { proxy.SetLatency(0) })
		return nil
	})
	if err != nil {
		t.Fatalf("WithLock of a job that returned nil: %v", err)
	}
	mustRelease(t, mustAcquire(t, t.Context(), newLocker(t, srv.Addr()), "retried", guard.Wait(0)))
}

// flakyCtx reports cancellation from Err before Done closes: the moment
// between a waiter's select taking a wake-up and its retry being sent.
type flakyCtx struct {
	context.Context
	off  atomic.Bool
	done chan struct{}
}

func (c *flakyCtx) Done() <-chan struct{} { return c.done }
func (c *flakyCtx) Err() error {
	if c.off.Load() {
		return context.Canceled
	}
	return nil
}

// A waiter that takes a wake-up and gives up before using it passes it on.
func TestWakeUpPassedOnByWaiterThatGivesUp(t *testing.T) {
	_, ls := newLockers(t, 2, guard.WithTTL(4*time.Second))
	holder := mustAcquire(t, t.Context(), ls[0], "pass-on")
	first := &flakyCtx{Context: context.Background(), done: make(chan struct{})}
	gaveUp := make(chan error, 1)
	go func() {
		_, err := ls[1].Acquire(first, "pass-on", guard.Wait(10*time.Second))
		gaveUp <- err
	}()
	time.Sleep(200 * time.Millisecond)
	got := make(chan time.Time, 1)
	go func() {
		le, err := ls[1].Acquire(t.Context(), "pass-on", guard.Wait(10*time.Second))
		got <- time.Now()
		if err == nil {
			mustRelease(t, le)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	first.off.Store(true)
	start := time.Now()
	mustRelease(t, holder)
	if err := <-gaveUp; !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("first waiter: %v", err)
	}
	close(first.done)
	if d := (<-got).Sub(start); d > time.Second {
		t.Fatalf("second waiter got the free key %v after the release: the wake-up was lost", d)
	}
}

// Close and a Release after it stay bounded while Redis is unreachable.
func TestCloseWhilePartitioned(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // go-redis defaults: 3s reads, 3 retries
	defer client.Close()
	l, err := guard.New(client, guard.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	le := mustAcquire(t, t.Context(), l, "partitioned")
	proxy.Blackhole(true)
	defer proxy.Blackhole(false)
	start := time.Now()
	_ = l.Close()
	closed := time.Since(start)
	start = time.Now()
	err = le.Release(t.Context())
	released := time.Since(start)
	t.Logf("Close took %v, Release after it %v (%v)", closed, released, err)
	// Close waits for requests still on the wire: at most about one
	// go-redis read timeout, not its retries too.
	if closed > 8*time.Second {
		t.Errorf("Close took %v with Redis unreachable", closed)
	}
	if !errors.Is(err, guard.ErrNotHeld) || released > time.Second {
		t.Errorf("Release after Close: %v after %v; want ErrNotHeld at once", err, released)
	}
}

// A waiter whose registration was lost (a failover that kept the hold but
// not the waiters' zset, an eviction) still hears the release.
func TestReleaseTellsWaiterWithoutRegistration(t *testing.T) {
	srv, ls := newLockers(t, 2, guard.WithTTL(6*time.Second))
	holder := mustAcquire(t, t.Context(), ls[0], "lostreg")
	got := make(chan time.Time, 1)
	go func() {
		le, err := ls[1].Acquire(t.Context(), "lostreg", guard.Wait(20*time.Second))
		got <- time.Now()
		if err == nil {
			mustRelease(t, le)
		}
	}()
	time.Sleep(300 * time.Millisecond) // the waiter registered and subscribed
	if n, err := srv.Client(t).Del(t.Context(), "guard:{lostreg}:waiters").Result(); err != nil || n != 1 {
		t.Fatalf("deleting the waiters' zset: %d, %v", n, err)
	}
	start := time.Now()
	mustRelease(t, holder)
	if d := (<-got).Sub(start); d > time.Second {
		t.Fatalf("waiter got the free key %v after the release, want at once", d)
	}
}

// A waiter with a short TTL behind a holder with a long one stays
// registered (it attempts again at least once per its own TTL), so the
// release names it and it gets the key at once.
func TestShortWaiterBehindLongHolderIsNamed(t *testing.T) {
	srv, ls := newLockers(t, 2)
	holder := mustAcquire(t, t.Context(), ls[0], "long", guard.TTL(20*time.Second))
	got := make(chan time.Time, 1)
	go func() {
		le, err := ls[1].Acquire(t.Context(), "long", guard.TTL(500*time.Millisecond), guard.Wait(10*time.Second))
		got <- time.Now()
		if err == nil {
			mustRelease(t, le)
		}
	}()
	time.Sleep(1500 * time.Millisecond) // past twice the waiter's TTL
	admin := srv.Client(t)
	now, err := admin.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	live, err := admin.ZCount(t.Context(), "guard:{long}:waiters", fmt.Sprintf("(%d", now.UnixMilli()), "+inf").Result()
	if err != nil || live != 1 {
		t.Fatalf("live registrations after 1.5s: %d, %v; want the waiter's", live, err)
	}
	start := time.Now()
	mustRelease(t, holder)
	if d := (<-got).Sub(start); d > 300*time.Millisecond {
		t.Fatalf("waiter got the free key %v after the release, want at once", d)
	}
}

// A client whose ACL denies functions but allows scripts by hash keeps
// working through EVALSHA (8ffcbe5; its first test went with a refactor).
func TestScriptsFallBackWhenACLDeniesFunctions(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "nofunctions", "on", "nopass", "~*", "&*", "+@all", "-fcall", "-fcall_ro", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	client := srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "nofunctions", "any" }) // nopass: any password
	if who, err := client.Do(t.Context(), "ACL", "WHOAMI").Text(); err != nil || who != "nofunctions" {
		t.Fatalf("ACL WHOAMI: %q, %v", who, err)
	}
	l, err := guard.New(client, guard.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	first := mustAcquire(t, t.Context(), l, "acl", guard.Wait(0))
	if _, err := l.Acquire(t.Context(), "acl", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("second Acquire: %v, want ErrNotAcquired", err)
	}
	if err := first.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	second := mustAcquire(t, t.Context(), l, "acl", guard.Wait(0))
	if second.Token() <= first.Token() {
		t.Errorf("token %d after %d", second.Token(), first.Token())
	}
	if err := second.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	stats, err := admin.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stats, "cmdstat_evalsha:calls=") {
		t.Errorf("no EVALSHA ran:\n%s", stats)
	}
	if strings.Contains(stats, "cmdstat_fcall:calls=") && !strings.Contains(stats, "cmdstat_fcall:calls=0,") {
		t.Errorf("an FCALL ran for a user whose ACL denies it:\n%s", stats)
	}
}
