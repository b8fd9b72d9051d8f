package guard_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/guard/observe"
	"github.com/jobguard/jobguard/internal/redistest"
)

// recorder is an Observer that counts what it is told.
type recorder struct {
	mu     sync.Mutex
	begun  map[observe.Phase]int
	ended  map[observe.Phase][]observe.Info
	events map[observe.Event][]observe.Info
}

func newRecorder() *recorder {
	return &recorder{begun: map[observe.Phase]int{}, ended: map[observe.Phase][]observe.Info{}, events: map[observe.Event][]observe.Info{}}
}

type phaseKey struct{}

func (r *recorder) Begin(ctx context.Context, p observe.Phase, _ observe.Info) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.begun[p]++
	return context.WithValue(ctx, phaseKey{}, p)
}

func (r *recorder) End(ctx context.Context, p observe.Phase, info observe.Info) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if got, _ := ctx.Value(phaseKey{}).(observe.Phase); got != p {
		panic("End got a context that was not Begin's")
	}
	r.ended[p] = append(r.ended[p], info)
}

func (r *recorder) Event(_ context.Context, k observe.Event, info observe.Info) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[k] = append(r.events[k], info)
}

func TestObserverSeesEveryPhaseOnce(t *testing.T) {
	srv := redistest.Start(t).Addr()
	rec := newRecorder()
	l := newLocker(t, srv, guard.WithObserver(rec), guard.WithTTL(300*time.Millisecond))
	err := l.WithLock(t.Context(), "observed", func(ctx context.Context) error {
		time.Sleep(time.Second) // about 10 renewals
		return l.WithLock(ctx, "observed", func(context.Context) error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// Outer and inner run: two runs, two acquires, two releases, however many renewals.
	for _, p := range []observe.Phase{observe.Run, observe.Acquire, observe.Release} {
		if rec.begun[p] != 2 || len(rec.ended[p]) != 2 {
			t.Errorf("phase %d: begun %d, ended %d; want 2 each", p, rec.begun[p], len(rec.ended[p]))
		}
	}
	outer := rec.ended[observe.Run][1]
	if outer.Result != "released" || outer.Token == 0 || outer.Renewals < 2 || outer.Reentrant {
		t.Errorf("outer run info = %+v; want released, a token, >= 2 renewals, not reentrant", outer)
	}
	if inner := rec.ended[observe.Run][0]; !inner.Reentrant || inner.Token != outer.Token {
		t.Errorf("inner run info = %+v; want reentrant with the outer token %d", inner, outer.Token)
	}
	if got := rec.ended[observe.Acquire][0].Result; got != "acquired" {
		t.Errorf("acquire result = %q, want acquired", got)
	}
	held := 0
	for _, e := range rec.events[observe.Held] {
		held += e.Delta
	}
	if held != 0 || len(rec.events[observe.Held]) != 2 {
		t.Errorf("held events %+v; want +1 then -1", rec.events[observe.Held])
	}
	renewTrips := 0
	for _, e := range rec.events[observe.RoundTrip] {
		if e.Op == "renew" {
			renewTrips++
		}
	}
	if renewTrips < 2 {
		t.Errorf("%d renew round trips reported, want >= 2", renewTrips)
	}
}

func TestObserverResults(t *testing.T) {
	srv := redistest.Start(t).Addr()
	rec := newRecorder()
	l := newLocker(t, srv, guard.WithObserver(rec))
	other := newLocker(t, srv)
	held := mustAcquire(t, t.Context(), other, "busy")
	defer mustRelease(t, held)

	_ = l.WithLock(t.Context(), "busy", func(context.Context) error { return nil }, guard.Wait(0))
	_ = l.WithLock(t.Context(), "busy", func(context.Context) error { return nil }, guard.Wait(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := l.WithLock(ctx, "busy", func(context.Context) error { return nil })
	if !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("err = %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var results []string
	for _, e := range rec.ended[observe.Acquire] {
		results = append(results, e.Result)
	}
	want := []string{"busy", "timeout", "canceled"}
	if len(results) != len(want) || results[0] != want[0] || results[1] != want[1] || results[2] != want[2] {
		t.Fatalf("acquire results %q, want %q", results, want)
	}
	if n := len(rec.events[observe.Held]); n != 0 {
		t.Fatalf("%d held events after failed acquisitions, want 0", n)
	}
}
