package guard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard/internal/clock"
	"github.com/jobguard/jobguard/guard/internal/redisstore"
	"github.com/jobguard/jobguard/guard/observe"
	"github.com/jobguard/jobguard/internal/redistest"
)

// fakeClock is a clock the test moves by hand. Its timers fire when Advance
// passes them; a timer reset to a time already passed fires at once.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

func newFakeClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) clock.Timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	t.Reset(d)
	return t
}

// AfterFunc runs f on a goroutine of its own when Advance passes d.
func (c *fakeClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &fakeTimer{c: c, fn: f}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	t.Reset(d)
	return t
}

// Advance moves the clock on by d and fires the timers that came due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		t.fireLocked()
	}
}

// waitArmed waits, in real time, until a timer is armed to fire at at: the
// heartbeat arms its timer after it looked at the clock, and a clock moved
// in between would leave the timer counting from the later time.
func (c *fakeClock) waitArmed(t *testing.T, at time.Time) {
	t.Helper()
	eventually(t, "a timer is armed at t0+"+at.Sub(t0).String(), func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, tm := range c.timers {
			if tm.active && tm.at.Equal(at) {
				return true
			}
		}
		return false
	})
}

// advanceTo waits until a timer is armed at at and moves the clock there.
func (c *fakeClock) advanceTo(t *testing.T, at time.Time) {
	t.Helper()
	c.waitArmed(t, at)
	c.Advance(at.Sub(c.Now()))
}

type fakeTimer struct {
	c      *fakeClock
	ch     chan time.Time // nil for an AfterFunc timer
	fn     func()
	at     time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Reset(d time.Duration) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.ch != nil {
		select { // like a time.Timer since Go 1.23: no stale value after Reset
		case <-t.ch:
		default:
		}
	}
	t.at, t.active = t.c.now.Add(d), true
	t.fireLocked()
}

func (t *fakeTimer) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.active = false
}

func (t *fakeTimer) fireLocked() {
	if t.active && !t.at.After(t.c.now) {
		t.active = false
		if t.fn != nil {
			go t.fn()
			return
		}
		select {
		case t.ch <- t.c.now:
		default:
		}
	}
}

// eventually waits, in real time, for what the heartbeat does on its own
// goroutines after the clock moved: a renewal's round trip to Redis.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// newClockedLocker is a Locker on a real Redis whose heartbeat and
// acquisitions run on clk.
func newClockedLocker(t *testing.T, srv *redistest.Server, clk clock.Clock, opts ...Option) *Locker {
	t.Helper()
	// A failed test may leave a lease held; Close need not wait the TTL for it.
	cfg, err := newConfig(append([]Option{WithCloseTimeout(time.Second)}, opts...))
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(redisstore.New(srv.Client(t), redisstore.Options{}), clk, cfg)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// The schedule runs on the Locker's clock: a 30s lease is renewed when the
// clock reaches its renewal window, not before, and with Redis unable to
// answer its job is told to stop at sent + TTL - drift - StopGrace of the
// last confirmed renewal. No test time passes beyond Redis's round trips.
func TestHeartbeatRunsOnItsClock(t *testing.T) {
	srv := redistest.Start(t)
	clk := newFakeClock()
	l := newClockedLocker(t, srv, clk, WithTTL(30*time.Second))
	le, err := l.Acquire(t.Context(), "clocked")
	if err != nil {
		t.Fatal(err)
	}
	h := le.h
	renewals := func() int { return l.hb.renewals(h) }

	clk.waitArmed(t, t0.Add(10*time.Second)) // the renewal's time; its window opens at 9s
	clk.Advance(8 * time.Second)
	if n := renewals(); n != 0 {
		t.Fatalf("renewed %d times before the renewal window opened", n)
	}
	clk.advanceTo(t, t0.Add(10*time.Second))
	eventually(t, "the first renewal is confirmed", func() bool { return renewals() == 1 })
	sent := t0.Add(10 * time.Second) // the clock did not move while it was on the wire

	// Redis stops answering: the next renewal (due at t0+20s) stays on the
	// wire, and the job must be told at the stop time of the one confirmed
	// at t0+10s.
	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	clk.advanceTo(t, t0.Add(20*time.Second))
	eventually(t, "the second renewal is on the wire", func() bool {
		l.hb.mu.Lock()
		defer l.hb.mu.Unlock()
		return h.inFlight
	})
	stop := h.timing.stopAt(h.timing.safeEnd(sent))
	if want := sent.Add(30*time.Second - 302*time.Millisecond - 3*time.Second); !stop.Equal(want) {
		t.Fatalf("stop time %v after t0, want %v", stop.Sub(t0), want.Sub(t0))
	}
	clk.waitArmed(t, stop)
	clk.Advance(stop.Sub(clk.Now()) - time.Millisecond)
	select {
	case <-le.Context().Done():
		t.Fatalf("told to stop a millisecond early: %v", context.Cause(le.Context()))
	case <-time.After(20 * time.Millisecond):
	}
	clk.Advance(time.Millisecond)
	select {
	case <-le.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not told to stop at the stop time")
	}
	cause := context.Cause(le.Context())
	if !errors.Is(cause, ErrLeaseLost) || !strings.Contains(cause.Error(), "no renewal confirmed in time") {
		t.Fatalf("cause = %v, want ErrLeaseLost: no renewal confirmed in time", cause)
	}
	srv.Resume(t)
	resumed = true
	if err := le.Release(t.Context()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release after the loss: %v, want ErrNotHeld", err)
	}
}

// renewCounter counts renewal round trips.
type renewCounter struct {
	nopObserver
	mu sync.Mutex
	n  int
}

func (c *renewCounter) Event(_ context.Context, e observe.Event, info observe.Info) {
	if e == observe.RoundTrip && info.Op == "renew" {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
}

func (c *renewCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// A renewal that Redis refuses at once (here: an ACL denies scripts) is
// retried when the clock has moved on by retryEvery, and not before: with
// the default schedule (interval 10s, retry 1s, batch window 1s) a retry
// used to be sent again at once, in a loop for as long as the server kept
// refusing.
func TestRefusedRenewalIsRetriedOnSchedule(t *testing.T) {
	srv := redistest.Start(t)
	clk := newFakeClock()
	counter := &renewCounter{}
	l := newClockedLocker(t, srv, clk, WithTTL(30*time.Second), WithObserver(counter))
	le, err := l.Acquire(t.Context(), "refused")
	if err != nil {
		t.Fatal(err)
	}
	admin := srv.Client(t)
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "default", "-fcall", "-evalsha", "-eval").Err(); err != nil {
		t.Fatal(err)
	}
	clk.advanceTo(t, t0.Add(10*time.Second))
	eventually(t, "the renewal was refused", func() bool { return counter.count() >= 1 })
	time.Sleep(100 * time.Millisecond) // real time for a retry loop to show; the clock stands still
	if n := counter.count(); n != 1 {
		t.Fatalf("%d renewal round trips with the clock standing still, want 1", n)
	}
	retry := h(le).timing.retryEvery()
	clk.advanceTo(t, t0.Add(10*time.Second+retry))
	eventually(t, "the retry was refused", func() bool { return counter.count() >= 2 })
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "default", "+fcall", "+evalsha", "+eval").Err(); err != nil {
		t.Fatal(err)
	}
	clk.advanceTo(t, t0.Add(10*time.Second+2*retry))
	eventually(t, "the next retry renewed the lease", func() bool { return l.hb.renewals(h(le)) == 1 })
	if err := le.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func h(le *Lease) *hold { return le.h }

// heldTime records how long the holds it is told about lasted.
type heldTime struct {
	nopObserver
	mu sync.Mutex
	d  []time.Duration
}

func (o *heldTime) Event(_ context.Context, e observe.Event, info observe.Info) {
	if e == observe.Held && info.Delta < 0 {
		o.mu.Lock()
		o.d = append(o.d, info.Duration)
		o.mu.Unlock()
	}
}

// A hold's duration is measured on the Locker's clock, like its schedule.
func TestHoldDurationOnLockerClock(t *testing.T) {
	srv := redistest.Start(t)
	clk := newFakeClock()
	obs := &heldTime{}
	l := newClockedLocker(t, srv, clk, WithTTL(30*time.Second), WithObserver(obs))
	le, err := l.Acquire(t.Context(), "dur")
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second) // before any renewal is due
	if err := le.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.d) != 1 || obs.d[0] != 5*time.Second {
		t.Fatalf("Held(-1).Duration = %v, want [5s]", obs.d)
	}
}
