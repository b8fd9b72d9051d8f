package guard_test

// Grants at the edges: acquisitions that give up or close while an attempt
// is on the wire, and grants that are gone before the waiter takes them.

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// queued returns the members of key's waiters zset.
func queued(t *testing.T, c *redis.Client, key string) []string {
	t.Helper()
	m, err := c.ZRange(context.Background(), "guard:{"+key+"}:waiters", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// An acquisition whose caller gives up while its first attempt is on the
// wire withdraws once the attempt has run after all (here the server stalls,
// as in a fork or a slow script): the next release finds no dead
// registration to grant the key to.
func TestAbandonedAttemptLeavesNoGrant(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	holderL := newLocker(t, srv.Addr(), guard.WithTTL(10*time.Second))
	waiterL := newLocker(t, srv.Addr(), guard.WithTTL(5*time.Second))
	otherL := newLocker(t, srv.Addr())
	holder := mustAcquire(t, t.Context(), holderL, "ghost")
	// Warm the waiter's connection (no dial or HELLO while paused).
	if warm, err := waiterL.Acquire(t.Context(), "warm", guard.Wait(0)); err != nil {
		t.Fatal(err)
	} else {
		mustRelease(t, warm)
	}

	srv.Pause(t)
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
	_, err := waiterL.Acquire(ctx, "ghost")
	cancel()
	if err == nil {
		t.Fatal("acquired a held key")
	}
	t.Logf("waiter gave up: %v", err)
	srv.Resume(t)

	time.Sleep(500 * time.Millisecond) // the stalled attempt runs; give withdraw every chance
	if q := queued(t, c, "ghost"); len(q) != 0 {
		t.Errorf("registration of an acquisition that gave up is still queued: %q", q)
	}
	mustRelease(t, holder)
	if owners, _ := c.HGetAll(t.Context(), "guard:{ghost}").Result(); len(owners) != 0 {
		pttl, _ := c.PTTL(t.Context(), "guard:{ghost}").Result()
		t.Errorf("after the release the key is held by %v for another %v", owners, pttl)
	}
	if le, err := otherL.Acquire(t.Context(), "ghost", guard.Wait(0)); err != nil {
		t.Errorf("key not free after its only holder released it (nobody waits): %v", err)
	} else {
		mustRelease(t, le)
	}
}

// Close while an acquisition's attempt is on the wire (a caller with a
// context that has no deadline runs the request on its own goroutine): the
// attempt registers, the acquisition returns ErrClosed, and withdraws
// although Close stopped the runner, so the next release grants nothing to
// it.
func TestCloseDuringAttemptLeavesNoGrant(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	holderL := newLocker(t, srv.Addr(), guard.WithTTL(10*time.Second))
	otherL := newLocker(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	waiterL, err := guard.New(client, guard.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	holder := mustAcquire(t, t.Context(), holderL, "closing")
	if warm, err := waiterL.Acquire(context.Background(), "warm", guard.Wait(0)); err != nil {
		t.Fatal(err)
	} else {
		mustRelease(t, warm)
	}

	srv.Pause(t)
	res := make(chan error, 1)
	paused := time.Now()
	go func() {
		_, err := waiterL.Acquire(context.Background(), "closing")
		t.Logf("acquire returned %v after pause: %v", time.Since(paused), err)
		res <- err
	}()
	time.Sleep(150 * time.Millisecond)
	closed := make(chan struct{})
	go func() { _ = waiterL.Close(); close(closed) }()
	time.Sleep(150 * time.Millisecond)
	srv.Resume(t)
	start := time.Now()
	if err := <-res; !errors.Is(err, guard.ErrClosed) {
		t.Fatalf("acquire: %v, want ErrClosed", err)
	}
	t.Logf("acquire returned %v after resume", time.Since(start))
	<-closed
	t.Logf("close returned %v after resume", time.Since(start))
	time.Sleep(300 * time.Millisecond)
	if q := queued(t, c, "closing"); len(q) != 0 {
		t.Errorf("registration of a closed Locker's acquisition is still queued: %q", q)
	}
	mustRelease(t, holder)
	if le, err := otherL.Acquire(t.Context(), "closing", guard.Wait(0)); err != nil {
		pttl, _ := c.PTTL(t.Context(), "guard:{closing}").Result()
		t.Errorf("key not free after its only holder released it: %v (blocked for another %v)", err, pttl)
	} else {
		mustRelease(t, le)
	}
}

// stallHook runs before on the next acquire FCALL once armed.
type stallHook struct {
	armed  atomic.Bool
	before func()
}

func (*stallHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *stallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && cmd.Name() == "fcall" {
			if fn, _ := args[1].(string); strings.HasSuffix(fn, "_acquire") && h.armed.CompareAndSwap(true, false) {
				h.before()
			}
		}
		return next(ctx, cmd)
	}
}
func (*stallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A grant that is gone by the time the waiter checks it (it expired while
// the waiter was stalled past it, or a failover lost it) is not taken after
// Redis answered busy, even on a wake-up within a renew interval of that
// answer: the busy answer says which tokens were minted before it. The
// hook stands in for the loss: just before the waiter's re-attempt (the
// grant is older than a renew interval) it deletes the grant and installs
// another holder with 150ms left.
func TestGoneGrantIsNotTakenAfterBusyAnswer(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	holderL := newLocker(t, srv.Addr(), guard.WithTTL(10*time.Second))
	otherL := newLocker(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	hook := &stallHook{}
	client.AddHook(hook)
	waiterL, err := guard.New(client, guard.WithTTL(1200*time.Millisecond)) // renew interval 400ms
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiterL.Close(); _ = client.Close() })

	holder := mustAcquire(t, t.Context(), holderL, "stale")
	got := acquireAsync(t.Context(), waiterL, "stale")
	waitQueued(t, c, "stale", 1)
	time.Sleep(600 * time.Millisecond) // the grant will be older than a renew interval
	var grantedTo string
	hook.before = func() {
		// The grant is gone (expired or lost in a failover); another owner holds the key.
		h, _ := c.HGetAll(context.Background(), "guard:{stale}").Result()
		grantedTo = h["writer"]
		c.Del(context.Background(), "guard:{stale}")
		c.HSet(context.Background(), "guard:{stale}", "intruder:t", "1", "writer", "intruder", "intruder", "1")
		c.PExpire(context.Background(), "guard:{stale}", 150*time.Millisecond)
	}
	hook.armed.Store(true)
	mustRelease(t, holder)
	var r acquired
	select {
	case r = <-got:
	case <-time.After(3 * time.Second):
		t.Fatal("waiter still waiting")
	}
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer r.le.Release(context.Background())
	if hook.armed.Load() {
		t.Fatal("the waiter never re-attempted; scenario not reached")
	}
	owner, _ := c.HGet(t.Context(), "guard:{stale}", "writer").Result()
	counter, _ := c.Get(t.Context(), "guard:{stale}:fence").Int64()
	t.Logf("grant went to %s; lease token %d; fence counter %d; writer in Redis now %q", grantedTo, r.le.Token(), counter, owner)
	// The lease claims to hold the key; does Redis agree?
	time.Sleep(200 * time.Millisecond) // the intruder's 150ms run out: the key is free
	if r.le.Context().Err() == nil {
		other, err := otherL.Acquire(t.Context(), "stale", guard.Wait(0))
		if err == nil {
			defer mustRelease(t, other)
			t.Errorf("two holders at once: the waiter's lease (token %d) is live and another Locker acquired (token %d)", r.le.Token(), other.Token())
		}
	}
}

// A release that would grant the key while the fencing counter cannot be
// read grants nothing and leaves the counter as it was, its TTL included.
func TestGrantLeavesUnreadableCounterAsItWas(t *testing.T) {
	srv, ls := newLockers(t, 1)
	c := srv.Client(t)
	holder := mustAcquire(t, t.Context(), ls[0], "gr")
	now, err := c.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	// A registration of a writer that takes grants, from no live Locker.
	ghost := redis.Z{Score: float64(now.Add(5 * time.Second).UnixMilli()), Member: "ghost-locker ghost-owner g 3000 0 0"}
	if err := c.ZAdd(t.Context(), "guard:{gr}:waiters", ghost).Err(); err != nil {
		t.Fatal(err)
	}
	// And, as acquire.lua does when it registers, the holder's key says
	// that somebody waits.
	if err := c.HSet(t.Context(), "guard:{gr}", "q", "1").Err(); err != nil {
		t.Fatal(err)
	}
	c.Set(t.Context(), "guard:{gr}:fence", "inf", time.Minute)
	mustRelease(t, holder)
	if got, _ := c.Get(t.Context(), "guard:{gr}:fence").Result(); got != "inf" {
		t.Errorf("counter after the refused grant: %q, want \"inf\"", got)
	}
	if left, err := c.PTTL(t.Context(), "guard:{gr}:fence").Result(); err != nil || left <= 0 {
		t.Errorf("counter TTL after the refused grant: %v, %v; want the minute it had", left, err)
	}
	if n, err := c.Exists(t.Context(), "guard:{gr}").Result(); err != nil || n != 0 {
		t.Errorf("lock key after the refused grant: exists=%d, %v; want it free", n, err)
	}
}
