package guard_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/guard/observe"
	"github.com/jobguard/jobguard/internal/redistest"
)

// acquireCounter counts the acquire scripts a client sends (as FCALL of the
// library's acquire function, which a Redis 7 server runs).
type acquireCounter struct{ n atomic.Int64 }

func (*acquireCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *acquireCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && cmd.Name() == "fcall" {
			if fn, _ := args[1].(string); strings.HasSuffix(fn, "_acquire") {
				c.n.Add(1)
			}
		}
		return next(ctx, cmd)
	}
}
func (*acquireCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// countedLocker returns a Locker on a client of its own that counts its
// acquire requests.
func countedLocker(t *testing.T, addr string, opts ...guard.Option) (*guard.Locker, *acquireCounter) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr})
	counter := &acquireCounter{}
	client.AddHook(counter)
	l, err := guard.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = l.Close()
		_ = client.Close()
	})
	return l, counter
}

// acquireAsync starts an acquisition and returns where its result arrives.
func acquireAsync(ctx context.Context, l *guard.Locker, key string, opts ...guard.LockOption) <-chan acquired {
	return startAcquire(ctx, l.Acquire, key, opts...)
}

func startAcquire(ctx context.Context, acquire func(context.Context, string, ...guard.LockOption) (*guard.Lease, error), key string, opts ...guard.LockOption) <-chan acquired {
	out := make(chan acquired, 1)
	go func() {
		le, err := acquire(ctx, key, opts...)
		out <- acquired{le, err, time.Now()}
	}()
	return out
}

type acquired struct {
	le  *guard.Lease
	err error
	at  time.Time
}

// waitQueued waits until n acquisitions are registered in key's queue.
func waitQueued(t *testing.T, c *redis.Client, key string, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := c.ZCard(t.Context(), "guard:{"+key+"}:waiters").Result()
		if err == nil && got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d acquisitions queued for %q, want %d (err %v)", got, key, n, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// queueApart lets the server's clock pass a millisecond, so that the next
// registration in a lock's queue comes after the last one: registrations
// made in one millisecond are ordered by their text, not their arrival.
func queueApart() { time.Sleep(3 * time.Millisecond) }

// attemptLog records how many acquire requests each fresh acquisition sent,
// by its fencing token, and counts the acquire requests answered.
type attemptLog struct {
	mu       sync.Mutex
	attempts map[int64]int
	answered atomic.Int64
}

func (o *attemptLog) Begin(ctx context.Context, _ observe.Phase, _ observe.Info) context.Context {
	return ctx
}
func (o *attemptLog) Event(_ context.Context, e observe.Event, info observe.Info) {
	if e == observe.RoundTrip && info.Op == "acquire" {
		o.answered.Add(1)
	}
}

// waitAnswered waits until n acquire requests have been answered, so that
// waiters queue in a known order: each attempt refreshes its registration.
func (o *attemptLog) waitAnswered(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for o.answered.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d acquire requests answered, want %d", o.answered.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
func (o *attemptLog) End(_ context.Context, p observe.Phase, info observe.Info) {
	if p == observe.Acquire && info.Token != 0 && !info.Reentrant {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.attempts[info.Token] = info.Attempts
	}
}

func (o *attemptLog) of(le *guard.Lease) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.attempts[le.Token()]
}

// loggedLocker returns a Locker that logs its acquisitions' attempts.
func loggedLocker(t *testing.T, addr string, opts ...guard.Option) (*guard.Locker, *attemptLog) {
	log := &attemptLog{attempts: make(map[int64]int)}
	return newLocker(t, addr, append(opts, guard.WithObserver(log))...), log
}

// A release hands the key to the oldest waiting writer itself: the waiter
// gets a lease, with a newer fencing token, without sending another
// acquire. A hand-off then costs two requests: the waiter's busy attempt
// and the holder's release. (A Locker's first waiter on a key tries once
// more after subscribing, since a release may have come before it
// listened.)
func TestReleaseGrantsKeyToWaiter(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	holderL := newLocker(t, srv.Addr())
	waiterL, log := loggedLocker(t, srv.Addr())
	holder := mustAcquire(t, t.Context(), holderL, "grant")
	first := acquireAsync(t.Context(), waiterL, "grant")
	log.waitAnswered(t, 2)
	queueApart()
	second := acquireAsync(t.Context(), waiterL, "grant")
	log.waitAnswered(t, 3)
	waitQueued(t, c, "grant", 2)
	mustRelease(t, holder)
	a := <-first
	if a.err != nil {
		t.Fatalf("first waiter: %v", a.err)
	}
	if a.le.Token() <= holder.Token() {
		t.Errorf("granted token %d not above the previous holder's %d", a.le.Token(), holder.Token())
	}
	// The granted hold is a hold like any other.
	if _, err := holderL.Acquire(t.Context(), "grant", guard.Wait(0)); err == nil {
		t.Fatal("a second owner acquired a granted key")
	}
	if err := a.le.Context().Err(); err != nil {
		t.Fatalf("granted lease's context is done: %v", err)
	}
	mustRelease(t, a.le)
	b := <-second
	if b.err != nil {
		t.Fatalf("second waiter: %v", b.err)
	}
	mustRelease(t, b.le)
	if got := log.of(a.le); got != 2 {
		t.Errorf("first waiter sent %d acquire requests, want 2 (busy, busy after subscribing)", got)
	}
	if got := log.of(b.le); got != 1 {
		t.Errorf("second waiter sent %d acquire requests, want 1 (busy): the release should have granted it the key", got)
	}
	if b.le.Token() <= a.le.Token() {
		t.Errorf("token %d after %d", b.le.Token(), a.le.Token())
	}
	if q, _ := c.Exists(t.Context(), "guard:{grant}:waiters").Result(); q != 0 {
		t.Errorf("grants left registrations queued")
	}
}

// Writers queued behind a holder, on two Lockers, get the key in the order
// they queued, each by a grant, and never two at once.
func TestGrantsFollowQueueOrder(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	holderL := newLocker(t, srv.Addr())
	holder := mustAcquire(t, t.Context(), holderL, "order")
	var lockers [2]*guard.Locker
	var logs [2]*attemptLog
	for i := range lockers {
		lockers[i], logs[i] = loggedLocker(t, srv.Addr())
	}
	const n = 6
	results := make([]<-chan acquired, n)
	for i := range n {
		results[i] = acquireAsync(t.Context(), lockers[i%2], "order")
		logs[i%2].waitAnswered(t, int64(2+i/2)) // its Locker's first waiter tries twice
		waitQueued(t, c, "order", int64(i+1))
		queueApart()
	}
	mustRelease(t, holder)
	last := holder.Token()
	for i := range n {
		r := <-results[i]
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		for j := i + 1; j < n; j++ {
			select {
			case other := <-results[j]:
				t.Fatalf("waiter %d acquired while waiter %d held the key (%v)", j, i, other.err)
			default:
			}
		}
		if r.le.Token() <= last {
			t.Errorf("waiter %d token %d not above %d", i, r.le.Token(), last)
		}
		last = r.le.Token()
		mustRelease(t, r.le)
		want := 1
		if i < 2 {
			want = 2 // its Locker's first waiter
		}
		if got := logs[i%2].of(r.le); got != want {
			t.Errorf("waiter %d sent %d acquire requests, want %d", i, got, want)
		}
	}
}

// A grant keeps the grantee's MinHold: released at once, the key stays
// held until MinHold has passed.
func TestGrantKeepsMinHold(t *testing.T) {
	srv, ls := newLockers(t, 3)
	c := srv.Client(t)
	holder := mustAcquire(t, t.Context(), ls[0], "grant-min")
	got := acquireAsync(t.Context(), ls[1], "grant-min", guard.MinHold(time.Second))
	waitQueued(t, c, "grant-min", 1)
	mustRelease(t, holder)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	mustRelease(t, r.le)
	if _, err := ls[2].Acquire(t.Context(), "grant-min", guard.Wait(0)); err == nil {
		t.Fatal("the key was free before the grantee's MinHold passed")
	}
	le := mustAcquire(t, t.Context(), ls[2], "grant-min", guard.Wait(3*time.Second))
	if held := time.Since(r.at); held < 900*time.Millisecond {
		t.Errorf("key free %v after the grant, before MinHold (1s)", held)
	}
	mustRelease(t, le)
}

// Readers are not granted the key: the oldest waiting reader's Locker is
// woken and every reader behind it joins.
func TestWaitingReadersJoinAfterRelease(t *testing.T) {
	srv, ls := newLockers(t, 4)
	c := srv.Client(t)
	holder := mustAcquire(t, t.Context(), ls[0], "readers")
	r1 := startAcquire(t.Context(), ls[1].AcquireRead, "readers")
	waitQueued(t, c, "readers", 1)
	r2 := startAcquire(t.Context(), ls[2].AcquireRead, "readers")
	waitQueued(t, c, "readers", 2)
	mustRelease(t, holder)
	a, b := <-r1, <-r2
	if a.err != nil || b.err != nil {
		t.Fatalf("readers: %v, %v", a.err, b.err)
	}
	if _, err := ls[3].Acquire(t.Context(), "readers", guard.Wait(0)); err == nil {
		t.Fatal("a writer acquired while readers hold the key")
	}
	mustRelease(t, a.le)
	mustRelease(t, b.le)
}

// A waiter that gave up is out of the queue: a later release grants it
// nothing, and the key is free for the next caller at once.
func TestGaveUpWaiterGetsNoGrant(t *testing.T) {
	srv, ls := newLockers(t, 3)
	c := srv.Client(t)
	holder := mustAcquire(t, t.Context(), ls[0], "gave-up")
	r := <-acquireAsync(t.Context(), ls[1], "gave-up", guard.Wait(100*time.Millisecond))
	if r.err == nil {
		t.Fatal("acquired a held key")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := c.ZCard(t.Context(), "guard:{gave-up}:waiters").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the registration of a waiter that gave up stayed queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	mustRelease(t, holder)
	mustRelease(t, mustAcquire(t, t.Context(), ls[2], "gave-up", guard.Wait(0)))
}

// A grant that reaches a waiter long after its registering attempt is not
// trusted to last: the waiter extends the hold with one more attempt, and
// its lease is timed from that.
func TestLateGrantIsExtendedFirst(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	holderL := newLocker(t, srv.Addr(), guard.WithTTL(10*time.Second))
	// TTL 1.2s: the renew interval is 400ms, and the waiter sleeps up to
	// its TTL between attempts while the holder's TTL is longer.
	waiterL, counter := countedLocker(t, srv.Addr(), guard.WithTTL(1200*time.Millisecond))
	holder := mustAcquire(t, t.Context(), holderL, "late")
	got := acquireAsync(t.Context(), waiterL, "late")
	waitQueued(t, c, "late", 1)
	time.Sleep(600 * time.Millisecond) // past the waiter's renew interval
	mustRelease(t, holder)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer mustRelease(t, r.le)
	// Busy; busy again after subscribing; then, woken by the grant 600ms
	// later (before its 1.2s sleep ended), the attempt that extends it.
	if n := counter.n.Load(); n != 3 {
		t.Errorf("waiter sent %d acquire requests, want 3", n)
	}
}

// A grant to an acquisition that died (its process crashed while it
// waited) blocks the key no longer than the registration's TTL, here 300ms
// against the holders' 10s.
func TestGrantToDeadWaiterExpires(t *testing.T) {
	srv, ls := newLockers(t, 2)
	c := srv.Client(t)
	holder := mustAcquire(t, t.Context(), ls[0], "dead")
	now, err := c.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	// What acquire.lua registers for a waiting writer of a Locker that is gone.
	ghost := redis.Z{Score: float64(now.Add(600 * time.Millisecond).UnixMilli()), Member: "ghost-locker ghost-owner g 300 0 0"}
	if err := c.ZAdd(t.Context(), "guard:{dead}:waiters", ghost).Err(); err != nil {
		t.Fatal(err)
	}
	// And, as acquire.lua does when it registers, the holder's key says
	// that somebody waits.
	if err := c.HSet(t.Context(), "guard:{dead}", "q", "1").Err(); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, holder)
	if tok, err := c.HGet(t.Context(), "guard:{dead}", "ghost-owner:t").Int64(); err != nil || tok <= holder.Token() {
		t.Fatalf("the release did not grant the key to the oldest waiter: token %d, %v", tok, err)
	}
	if left, err := c.PTTL(t.Context(), "guard:{dead}").Result(); err != nil || left > 300*time.Millisecond {
		t.Fatalf("granted for %v (%v); want at most the registration's 300ms TTL", left, err)
	}
	mustRelease(t, mustAcquire(t, t.Context(), ls[1], "dead", guard.Wait(2*time.Second)))
}
