package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/childproc"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func init() {
	// permit ADDR KEY TTL N: take one of N permits of KEY and hold it,
	// printing "held TOKEN", then "lost CAUSE" if the lease is lost.
	childHelpers["permit"] = func(args []string) error {
		if len(args) != 4 {
			return fmt.Errorf("permit: want ADDR KEY TTL N, got %q", args)
		}
		ttl, err := time.ParseDuration(args[2])
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(args[3])
		if err != nil {
			return err
		}
		client := redis.NewClient(&redis.Options{Addr: args[0]})
		defer client.Close()
		l, err := guard.New(client, guard.WithTTL(ttl))
		if err != nil {
			return err
		}
		defer l.Close()
		le, err := l.Acquire(context.Background(), args[1], guard.Permits(n))
		if err != nil {
			return err
		}
		fmt.Printf("held %d\n", le.Token())
		<-le.Context().Done()
		fmt.Printf("lost %v\n", context.Cause(le.Context()))
		select {} // stay until killed
	}
}

// occupancy measures how many jobs run at once: the peak, and the mean over
// time from the first start to the last end.
type occupancy struct {
	mu          sync.Mutex
	inside      int
	peak        int
	first, last time.Time
	area        time.Duration // inside × time, summed
}

func (o *occupancy) change(d int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	if o.first.IsZero() {
		o.first = now
	} else {
		o.area += time.Duration(o.inside) * now.Sub(o.last)
	}
	o.last = now
	o.inside += d
	o.peak = max(o.peak, o.inside)
}

func (o *occupancy) mean() float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return float64(o.area) / float64(o.last.Sub(o.first))
}

// A fleet of 4 Lockers with 8 goroutines each loops WithLock on one key with
// Permits(3): never more than 3 jobs inside at once, all 3 permits used
// (the peak is 3 and the mean close to it), every acquisition a token of
// its own.
func TestPermitsHoldFleetToN(t *testing.T) {
	const (
		lockers    = 4
		goroutines = 8
		permits    = 3
		rounds     = 300
		job        = 10 * time.Millisecond
	)
	_, ls := newLockers(t, lockers)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var occ occupancy
	var tickets atomic.Int64
	tickets.Store(rounds)
	var mu sync.Mutex
	tokens := map[int64]bool{}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range lockers * goroutines {
		l := ls[i%lockers]
		wg.Go(func() {
			for tickets.Add(-1) >= 0 {
				err := l.WithLock(ctx, "limited", func(ctx context.Context) error {
					occ.change(+1)
					defer occ.change(-1)
					token, _ := guard.TokenFrom(ctx, "limited")
					mu.Lock()
					dup := tokens[token]
					tokens[token] = true
					mu.Unlock()
					if dup {
						return fmt.Errorf("token %d handed out twice", token)
					}
					time.Sleep(job)
					return ctx.Err()
				}, guard.Permits(permits))
				if err != nil {
					t.Errorf("WithLock: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	mean := occ.mean()
	t.Logf("%d runs of %v in %v by %d goroutines on %d Lockers: peak %d inside, mean %.2f (ideal %d)",
		rounds, job, took.Round(time.Millisecond), lockers*goroutines, lockers, occ.peak, mean, permits)
	if occ.peak > permits {
		t.Fatalf("%d jobs inside at once with Permits(%d)", occ.peak, permits)
	}
	if occ.peak < permits {
		t.Errorf("at most %d jobs inside at once: not all %d permits were used", occ.peak, permits)
	}
	if mean < 2 {
		t.Errorf("mean %.2f jobs inside, want >= 2 of %d: freed permits are left idle", mean, permits)
	}
	if len(tokens) != rounds {
		t.Errorf("%d distinct tokens for %d runs", len(tokens), rounds)
	}
}

// Every permit is a full lease: holders of several permits of one key are
// renewed past their TTL, each with a token of its own, and a holder of
// each Locker keeps its permit while another Locker's acquisition finds
// the key full.
func TestPermitsAreRenewedLeases(t *testing.T) {
	_, ls := newLockers(t, 3, guard.WithTTL(time.Second))
	a := mustAcquire(t, t.Context(), ls[0], "renewed", guard.Permits(2))
	b := mustAcquire(t, t.Context(), ls[1], "renewed", guard.Permits(2))
	if a.Token() == b.Token() {
		t.Fatalf("two permits with one token %d", a.Token())
	}
	time.Sleep(2500 * time.Millisecond) // 2.5 TTLs
	for _, le := range []*guard.Lease{a, b} {
		if err := le.Context().Err(); err != nil {
			t.Fatalf("permit lost while held: %v", context.Cause(le.Context()))
		}
	}
	_, err := ls[2].Acquire(t.Context(), "renewed", guard.Permits(2), guard.Wait(0))
	if !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("third acquisition of 2 permits: err = %v, want ErrNotAcquired", err)
	}
	if held, ok := guard.HeldFor(err); !ok || held <= 0 || held > time.Second {
		t.Errorf("HeldFor = %v, %v; want the first holder's time left, within its 1s TTL", held, ok)
	}
	mustRelease(t, a)
	c := mustAcquire(t, t.Context(), ls[2], "renewed", guard.Permits(2), guard.Wait(0))
	if c.Token() <= b.Token() {
		t.Errorf("token %d not above the earlier ones", c.Token())
	}
	mustRelease(t, b)
	mustRelease(t, c)
}

// A re-entry through the context takes no second permit and keeps its
// token; one that asks for another number of permits, or for a read lease,
// is refused.
func TestPermitReentryTakesNoSecondPermit(t *testing.T) {
	srv, ls := newLockers(t, 2)
	c := srv.Client(t)
	two := guard.Permits(2)
	outer := mustAcquire(t, t.Context(), ls[0], "reenter", two)
	inner := mustAcquire(t, outer.Context(), ls[0], "reenter", two, guard.Wait(0))
	if inner.Token() != outer.Token() {
		t.Errorf("re-entry token %d, want the outer %d", inner.Token(), outer.Token())
	}
	// The second permit is still free: another owner takes it.
	other := mustAcquire(t, t.Context(), ls[1], "reenter", two, guard.Wait(0))
	if _, err := ls[1].Acquire(t.Context(), "reenter", two, guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("third permit of 2: err = %v, want ErrNotAcquired", err)
	}
	for name, acquire := range map[string]func() (*guard.Lease, error){
		"plain write": func() (*guard.Lease, error) { return ls[0].Acquire(outer.Context(), "reenter") },
		"3 permits":   func() (*guard.Lease, error) { return ls[0].Acquire(outer.Context(), "reenter", guard.Permits(3)) },
		"read":        func() (*guard.Lease, error) { return ls[0].AcquireRead(outer.Context(), "reenter") },
	} {
		if le, err := acquire(); !errors.Is(err, guard.ErrPermitsDiffer) {
			t.Errorf("re-entry as %s: lease %v, err = %v; want ErrPermitsDiffer", name, le != nil, err)
		}
	}
	mustRelease(t, inner)
	if n, err := c.HGet(t.Context(), lockKey("reenter"), "permits").Result(); err != nil || n != "2" {
		t.Errorf("permits field %q, %v after the inner release; want 2", n, err)
	}
	mustRelease(t, outer)
	mustRelease(t, other)
	if n, _ := c.Exists(t.Context(), lockKey("reenter")).Result(); n != 0 {
		t.Errorf("the lock key is left after every permit was released")
	}
}

// Holders that disagree on a key's number of permits get ErrPermitsDiffer
// at once, never a larger limit and never contention; once the key is
// free, it takes the next holder's number.
func TestPermitsDisagreeing(t *testing.T) {
	_, ls := newLockers(t, 2)
	ctx := t.Context()
	type attempt struct {
		name    string
		acquire func() (*guard.Lease, error)
	}
	plain := attempt{"plain write", func() (*guard.Lease, error) { return ls[1].Acquire(ctx, "n", guard.Wait(time.Second)) }}
	read := attempt{"read", func() (*guard.Lease, error) { return ls[1].AcquireRead(ctx, "n", guard.Wait(time.Second)) }}
	permits := func(n int) attempt {
		return attempt{fmt.Sprintf("Permits(%d)", n), func() (*guard.Lease, error) {
			return ls[1].Acquire(ctx, "n", guard.Permits(n), guard.Wait(time.Second))
		}}
	}
	for _, tc := range []struct {
		held    string
		hold    func() (*guard.Lease, error)
		refused []attempt
		joins   *attempt // agrees, and is let in beside the holder
	}{
		{"Permits(3)", func() (*guard.Lease, error) { return ls[0].Acquire(ctx, "n", guard.Permits(3)) },
			[]attempt{plain, read, permits(2), permits(4)}, &[]attempt{permits(3)}[0]},
		{"a plain write", func() (*guard.Lease, error) { return ls[0].Acquire(ctx, "n") },
			[]attempt{permits(2)}, nil},
		{"a read", func() (*guard.Lease, error) { return ls[0].AcquireRead(ctx, "n") },
			[]attempt{permits(2)}, &read},
	} {
		t.Run(tc.held, func(t *testing.T) {
			held, err := tc.hold()
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range tc.refused {
				start := time.Now()
				le, err := a.acquire()
				if le != nil {
					mustRelease(t, le)
				}
				if !errors.Is(err, guard.ErrPermitsDiffer) || errors.Is(err, guard.ErrNotAcquired) {
					t.Errorf("%s while %s is held: err = %v; want ErrPermitsDiffer", a.name, tc.held, err)
				} else if took := time.Since(start); took > 500*time.Millisecond {
					t.Errorf("%s refused after %v, want at once", a.name, took)
				}
			}
			if tc.joins != nil {
				le, err := tc.joins.acquire()
				if err != nil {
					t.Fatalf("%s while %s is held: %v", tc.joins.name, tc.held, err)
				}
				mustRelease(t, le)
			}
			mustRelease(t, held)
			// Free again: any number of permits takes it.
			le := mustAcquire(t, ctx, ls[1], "n", guard.Permits(5), guard.Wait(0))
			mustRelease(t, le)
		})
	}
}

// Bad input is refused before any request: n < 1, or Permits on a read lease.
func TestPermitsInvalid(t *testing.T) {
	_, ls := newLockers(t, 1)
	l, ctx := ls[0], t.Context()
	noop := func(context.Context) error { return nil }
	for name, err := range map[string]error{
		"Acquire Permits(0)":          func() error { _, err := l.Acquire(ctx, "bad", guard.Permits(0)); return err }(),
		"Acquire Permits(-1)":         func() error { _, err := l.Acquire(ctx, "bad", guard.Permits(-1)); return err }(),
		"WithLock Permits(0)":         l.WithLock(ctx, "bad", noop, guard.Permits(0)),
		"AcquireRead Permits(2)":      func() error { _, err := l.AcquireRead(ctx, "bad", guard.Permits(2)); return err }(),
		"AcquireRead Permits(1)":      func() error { _, err := l.AcquireRead(ctx, "bad", guard.Permits(1)); return err }(),
		"WithReadLock Permits(2)":     l.WithReadLock(ctx, "bad", noop, guard.Permits(2)),
		"ValidateLockOptions Permits": l.ValidateLockOptions(guard.Permits(0)),
	} {
		if !errors.Is(err, guard.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if err := l.ValidateLockOptions(guard.Permits(4)); err != nil {
		t.Errorf("ValidateLockOptions(Permits(4)): %v", err)
	}
}

// receive returns what r delivers, failing the test if it does not within d.
func receive(t *testing.T, r <-chan acquired, d time.Duration) acquired {
	t.Helper()
	select {
	case a := <-r:
		return a
	case <-time.After(d):
		t.Fatalf("no acquisition within %v", d)
		return acquired{}
	}
}

// nothingFrom fails the test if any of results delivers within d.
func nothingFrom(t *testing.T, d time.Duration, why string, results ...<-chan acquired) {
	t.Helper()
	time.Sleep(d)
	for i, r := range results {
		select {
		case a := <-r:
			t.Fatalf("%s: waiter %d got (%v, %v)", why, i, a.le != nil, a.err)
		default:
		}
	}
}

// A release of one permit grants that permit to the oldest waiting writer,
// and to no one else: one wake-up per freed permit, no acquire request
// from any waiter. A release that frees no permit (the end of a re-entry)
// grants nothing.
func TestPermitReleaseGrantsOneWaiter(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	two := guard.Permits(2)
	holderL := newLocker(t, srv.Addr())
	h1 := mustAcquire(t, t.Context(), holderL, "one", two)
	h2 := mustAcquire(t, t.Context(), holderL, "one", two)
	var lockers [2]*guard.Locker
	var logs [2]*attemptLog
	for i := range lockers {
		lockers[i], logs[i] = loggedLocker(t, srv.Addr())
	}
	const n = 4
	results := make([]<-chan acquired, n)
	for i := range n {
		results[i] = acquireAsync(t.Context(), lockers[i%2], "one", two)
		logs[i%2].waitAnswered(t, int64(2+i/2)) // its Locker's first waiter tries twice
		waitQueued(t, c, "one", int64(i+1))
		queueApart()
	}
	answered := func() int64 { return logs[0].answered.Load() + logs[1].answered.Load() }
	before := answered()

	inner := mustAcquire(t, h2.Context(), holderL, "one", two)
	mustRelease(t, inner)
	nothingFrom(t, 150*time.Millisecond, "the end of a re-entry freed no permit", results...)

	holders := []*guard.Lease{h1, h2}
	last := h2.Token()
	for i := range n {
		mustRelease(t, holders[0])
		holders = holders[1:]
		r := receive(t, results[i], 5*time.Second)
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		if r.le.Token() <= last {
			t.Errorf("waiter %d token %d not above %d", i, r.le.Token(), last)
		}
		last = r.le.Token()
		holders = append(holders, r.le)
		nothingFrom(t, 100*time.Millisecond, fmt.Sprintf("one permit freed and granted to waiter %d", i), results[i+1:]...)
		if got := answered(); got != before {
			t.Fatalf("after release %d: %d acquire requests from waiters, want 0: a freed permit woke them", i+1, got-before)
		}
	}
	for _, le := range holders {
		mustRelease(t, le)
	}
	if q, _ := c.Exists(t.Context(), lockKey("one")+":waiters").Result(); q != 0 {
		t.Errorf("grants left registrations queued")
	}
}

// A permit released before its MinHold stays taken until MinHold has
// passed, and its release grants nothing; the waiter then takes it on its
// own, woken by the first holder's expiry.
func TestPermitKeptForMinHold(t *testing.T) {
	srv, ls := newLockers(t, 2)
	c := srv.Client(t)
	two := guard.Permits(2)
	kept := mustAcquire(t, t.Context(), ls[0], "min", two, guard.MinHold(700*time.Millisecond))
	acquiredAt := time.Now()
	other := mustAcquire(t, t.Context(), ls[0], "min", two)
	got := acquireAsync(t.Context(), ls[1], "min", two)
	waitQueued(t, c, "min", 1)
	mustRelease(t, kept)
	nothingFrom(t, 200*time.Millisecond, "a release kept for MinHold freed a permit", got)
	r := receive(t, got, 5*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if held := r.at.Sub(acquiredAt); held < 650*time.Millisecond || held > 2*time.Second {
		t.Errorf("permit taken %v after the MinHold(700ms) acquisition", held)
	}
	mustRelease(t, r.le)
	mustRelease(t, other)
}

// A holder process that is SIGKILLed never releases its permit: the permit
// frees within its TTL and goes to the next acquisition, while the other
// holder keeps its own.
func TestKilledPermitHolderFreesItsPermitWithinTTL(t *testing.T) {
	const ttl = 2 * time.Second
	for _, tc := range []struct {
		name         string
		waitingFirst bool
	}{
		{"acquire after crash", false},
		{"waiter wakes on its fallback timer", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			l := newLocker(t, srv.Addr())
			two := guard.Permits(2)
			child := childproc.Start(t, "permit", srv.Addr(), "crash", ttl.String(), "2")
			token, err := strconv.ParseInt(child.WaitLine(t, "held ", 10*time.Second), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			live := mustAcquire(t, t.Context(), l, "crash", two)
			got := make(chan acquired, 1)
			acquire := func() {
				le, err := l.Acquire(t.Context(), "crash", two, guard.Wait(10*time.Second))
				got <- acquired{le, err, time.Now()}
			}
			if tc.waitingFirst {
				go acquire()
				time.Sleep(200 * time.Millisecond)
			}
			child.Kill(t)
			killed := time.Now()
			if !tc.waitingFirst {
				go acquire()
			}
			r := <-got
			if r.err != nil {
				t.Fatalf("Acquire after the permit holder was killed: %v", r.err)
			}
			took := r.at.Sub(killed)
			t.Logf("permit taken over %v after SIGKILL (TTL %v)", took, ttl)
			if took > ttl+1500*time.Millisecond {
				t.Errorf("takeover took %v, want <= TTL + 1.5s", took)
			}
			if r.le.Token() <= token || r.le.Token() <= live.Token() {
				t.Errorf("new token %d not above the crashed holder's %d and the live one's %d", r.le.Token(), token, live.Token())
			}
			if err := live.Context().Err(); err != nil {
				t.Errorf("the live holder lost its permit: %v", context.Cause(live.Context()))
			}
			mustRelease(t, r.le)
			mustRelease(t, live)
		})
	}
}

// A holder cut off from Redis is told to stop before anyone can take its
// permit, while the other permit stays with its holder.
func TestPartitionedPermitHolderStopsFirst(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	two := guard.Permits(2)
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	partitioned := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: time.Second, MaxRetries: -1})
	defer partitioned.Close()
	a, err := guard.New(partitioned, guard.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newLocker(t, srv.Addr())

	cut := mustAcquire(t, t.Context(), a, "partition", two)
	live := mustAcquire(t, t.Context(), b, "partition", two)
	time.Sleep(ttl / 2) // some renewals go through
	proxy.Blackhole(true)
	cutAt := time.Now()

	acquiredAt := make(chan time.Time, 1)
	go func() {
		le, err := b.Acquire(t.Context(), "partition", two, guard.Wait(10*time.Second))
		if err != nil {
			t.Errorf("waiter: %v", err)
			acquiredAt <- time.Time{}
			return
		}
		acquiredAt <- time.Now()
		mustRelease(t, le)
	}()

	<-cut.Context().Done()
	lost := time.Now()
	if cause := context.Cause(cut.Context()); !errors.Is(cause, guard.ErrLeaseLost) {
		t.Fatalf("cut holder's cause = %v, want ErrLeaseLost", cause)
	}
	other := <-acquiredAt
	if other.IsZero() {
		t.FailNow()
	}
	t.Logf("after the cut: holder told to stop at %v, its permit taken at %v (margin %v)",
		lost.Sub(cutAt).Round(time.Millisecond), other.Sub(cutAt).Round(time.Millisecond), other.Sub(lost).Round(time.Millisecond))
	if !lost.Before(other) {
		t.Fatalf("holder told to stop %v after the cut, but its permit was taken at %v", lost.Sub(cutAt), other.Sub(cutAt))
	}
	if err := live.Context().Err(); err != nil {
		t.Errorf("the other holder lost its permit: %v", context.Cause(live.Context()))
	}
	mustRelease(t, live)
	if err := cut.Release(t.Context()); !errors.Is(err, guard.ErrNotHeld) {
		t.Fatalf("Release of the lost permit: err = %v, want ErrNotHeld", err)
	}
	proxy.Blackhole(false)
}

// Permits work on Cluster: Lockers on ClusterClients hold a key to its
// permits, a release grants the freed permit to the waiter, and a
// disagreeing number is refused.
func TestPermitsCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	var ls [3]*guard.Locker
	for i := range ls {
		ls[i], _ = newClusterLocker(t, cl)
	}
	two := guard.Permits(2)
	a := mustAcquire(t, t.Context(), ls[0], "cluster-permits", two)
	b := mustAcquire(t, t.Context(), ls[1], "cluster-permits", two)
	if _, err := ls[2].Acquire(t.Context(), "cluster-permits", two, guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("third of 2 permits: err = %v, want ErrNotAcquired", err)
	}
	if _, err := ls[2].Acquire(t.Context(), "cluster-permits", guard.Wait(0)); !errors.Is(err, guard.ErrPermitsDiffer) {
		t.Fatalf("plain lock on a key of 2 permits: err = %v, want ErrPermitsDiffer", err)
	}
	got := acquireAsync(t.Context(), ls[2], "cluster-permits", two, guard.Wait(10*time.Second))
	waitQueued(t, cl.MasterOf(t, lockKey("cluster-permits")).Client(t), "cluster-permits", 1)
	mustRelease(t, a)
	r := receive(t, got, 5*time.Second)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if r.le.Token() <= b.Token() {
		t.Errorf("token %d not above %d", r.le.Token(), b.Token())
	}
	mustRelease(t, b)
	mustRelease(t, r.le)

	// And the limit holds under load: 3 Lockers × 4 goroutines, 60 runs.
	var occ occupancy
	var tickets atomic.Int64
	tickets.Store(60)
	var wg sync.WaitGroup
	for i := range 12 {
		l := ls[i%len(ls)]
		wg.Go(func() {
			for tickets.Add(-1) >= 0 {
				err := l.WithLock(t.Context(), "cluster-permits", func(ctx context.Context) error {
					occ.change(+1)
					defer occ.change(-1)
					time.Sleep(5 * time.Millisecond)
					return nil
				}, two, guard.Wait(30*time.Second))
				if err != nil {
					t.Errorf("WithLock: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("Cluster: peak %d inside, mean %.2f, with Permits(2)", occ.peak, occ.mean())
	if occ.peak != 2 {
		t.Errorf("peak %d inside, want 2", occ.peak)
	}
}
