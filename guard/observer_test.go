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

// phaseRec records phases, events and the context each round trip came with.
type phaseRec struct {
	mu     sync.Mutex
	begun  map[observe.Phase]int
	ended  map[observe.Phase][]observe.Info
	events map[observe.Event][]observe.Info
	rtCtx  map[string][]observe.Phase // Op -> phase found in the round trip's ctx (0: none)
}

type phaseRecKey struct{}

func newPhaseRec() *phaseRec {
	return &phaseRec{begun: map[observe.Phase]int{}, ended: map[observe.Phase][]observe.Info{},
		events: map[observe.Event][]observe.Info{}, rtCtx: map[string][]observe.Phase{}}
}
func (r *phaseRec) Begin(ctx context.Context, p observe.Phase, _ observe.Info) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.begun[p]++
	return context.WithValue(ctx, phaseRecKey{}, p)
}
func (r *phaseRec) End(_ context.Context, p observe.Phase, info observe.Info) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended[p] = append(r.ended[p], info)
}
func (r *phaseRec) Event(ctx context.Context, k observe.Event, info observe.Info) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[k] = append(r.events[k], info)
	if k == observe.RoundTrip {
		p, _ := ctx.Value(phaseRecKey{}).(observe.Phase)
		r.rtCtx[info.Op] = append(r.rtCtx[info.Op], p)
	}
}

// A job that panics after its lease was lost: the Run phase's End must
// still carry the loss (old code: errors.Join(cause, errPanicked)).
func TestRunPhaseKeepsLossWhenJobPanics(t *testing.T) {
	srv, _ := newLockers(t, 0)
	rec := newPhaseRec()
	l := newLocker(t, srv.Addr(), guard.WithObserver(rec))
	admin := srv.Client(t)
	func() {
		defer func() { _ = recover() }()
		_ = l.WithLock(t.Context(), "pl", func(context.Context) error {
			if err := admin.Del(t.Context(), "guard:{pl}").Err(); err != nil {
				t.Error(err)
			}
			panic("boom")
		})
	}()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	run := rec.ended[observe.Run][0]
	t.Logf("Run End: Result=%q Err=%v", run.Result, run.Err)
	if run.Result != "lost" || !errors.Is(run.Err, guard.ErrLeaseLost) {
		t.Fatalf("Run End after a panic with a lost lease: Result %q, Err %v; want lost and an Err matching ErrLeaseLost", run.Result, run.Err)
	}
}

// Acquire with the context of a released lease is one fresh acquisition:
// one Acquire phase (before the refactor the observer saw an empty
// re-entry phase and then the fresh one).
func TestAcquireWithReleasedContextIsOnePhase(t *testing.T) {
	srv, _ := newLockers(t, 0)
	rec := newPhaseRec()
	l := newLocker(t, srv.Addr(), guard.WithObserver(rec))
	le := mustAcquire(t, t.Context(), l, "rr")
	mustRelease(t, le)
	le2 := mustAcquire(t, context.WithoutCancel(le.Context()), l, "rr")
	mustRelease(t, le2)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if n := rec.begun[observe.Acquire]; n != 2 || len(rec.ended[observe.Acquire]) != 2 {
		t.Fatalf("Acquire phases begun %d, ended %d; want 2 each", n, len(rec.ended[observe.Acquire]))
	}
	if second := rec.ended[observe.Acquire][1]; second.Reentrant || second.Result != "acquired" || second.Attempts != 1 {
		t.Fatalf("second Acquire = %+v; want a fresh acquisition in one attempt", second)
	}
}

// Round trips name the key as the caller gave it (Info.Key) and come with
// the context of the phase they belong to.
func TestRoundTripInfo(t *testing.T) {
	srv, _ := newLockers(t, 0)
	rec := newPhaseRec()
	l := newLocker(t, srv.Addr(), guard.WithObserver(rec))
	if err := l.WithLock(t.Context(), "rt", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.events[observe.RoundTrip] {
		if e.Key != "rt" {
			t.Errorf("%s round trip Key = %q, want %q", e.Op, e.Key, "rt")
		}
	}
	want := map[string]observe.Phase{"acquire": observe.Acquire, "release": observe.Release}
	for op, phase := range want {
		if got := rec.rtCtx[op]; len(got) != 1 || got[0] != phase {
			t.Errorf("%s round trips came with phases %v, want [%v]", op, got, phase)
		}
	}
}
