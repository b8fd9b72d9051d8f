package guard

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

type valueKey struct{}

// A deadlineCtx behaves as context.WithTimeout(context.WithoutCancel(ctx), d):
// the values of ctx, none of its cancellation, done at the deadline or
// when stopped, with the matching error, and contexts derived from it follow.
func TestDeadlineCtx(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		stop    bool
		want    error
	}{
		{"expires", 20 * time.Millisecond, false, context.DeadlineExceeded},
		{"stopped", time.Hour, true, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancelParent := context.WithCancel(context.WithValue(t.Context(), valueKey{}, "v"))
			cancelParent() // its cancellation does not carry over
			w := new(deadlines)
			t.Cleanup(w.stop)
			d := new(deadlineCtx)
			d.start(w, context.WithoutCancel(parent), tc.timeout)
			t.Cleanup(d.stop)
			if d.Value(valueKey{}) != "v" {
				t.Fatalf("Value = %v, want the parent's", d.Value(valueKey{}))
			}
			if dl, ok := d.Deadline(); !ok || time.Until(dl) > tc.timeout {
				t.Fatalf("Deadline = %v, %v", dl, ok)
			}
			if d.Err() != nil || context.Cause(d) != nil {
				t.Fatalf("done at once: Err %v, Cause %v", d.Err(), context.Cause(d))
			}
			child, cancelChild := context.WithCancel(d)
			defer cancelChild()
			if tc.stop {
				d.stop()
			}
			select {
			case <-d.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("not done")
			}
			<-child.Done()
			for name, err := range map[string]error{"Err": d.Err(), "Cause": context.Cause(d), "child's Err": child.Err()} {
				if !errors.Is(err, tc.want) {
					t.Errorf("%s = %v, want %v", name, err, tc.want)
				}
			}
			d.stop() // again: nothing changes
			if !errors.Is(d.Err(), tc.want) {
				t.Errorf("Err after a second stop = %v, want %v", d.Err(), tc.want)
			}
		})
	}
}

// The deadlineCtxs of a Locker share one timer: it is set for the earliest
// deadline pending, not again for a later one, not stopped when a request
// ends early; when it fires it ends what is due, never what is not, and is
// set for the earliest of the rest.
func TestDeadlinesShareOneTimer(t *testing.T) {
	w := new(deadlines)
	t.Cleanup(w.stop)
	armed := func() time.Time {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.armed
	}
	start := func(timeout time.Duration) *deadlineCtx {
		d := new(deadlineCtx)
		d.start(w, context.Background(), timeout)
		t.Cleanup(d.stop)
		return d
	}
	// Deadlines far enough away that the timer cannot fire meanwhile.
	late := start(time.Hour)
	if armed() != late.deadline {
		t.Fatalf("armed %v, want the only deadline %v", armed(), late.deadline)
	}
	soon := start(30 * time.Minute)
	if armed() != soon.deadline {
		t.Fatalf("armed %v, want the earlier deadline %v", armed(), soon.deadline)
	}
	later := start(2 * time.Hour)
	ended := start(20 * time.Minute)
	ended.stop()
	if armed() != ended.deadline {
		t.Fatalf("armed %v after a start and a stop, want the earliest deadline ever pending %v", armed(), ended.deadline)
	}
	if !errors.Is(ended.Err(), context.Canceled) {
		t.Fatalf("stopped: Err = %v", ended.Err())
	}
	quick := start(150 * time.Millisecond)
	select {
	case <-quick.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the 150ms deadline did not end its context")
	}
	if now := time.Now(); now.Before(quick.deadline) {
		t.Fatalf("ended %v before its deadline", quick.deadline.Sub(now))
	}
	if !errors.Is(quick.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(quick), context.DeadlineExceeded) {
		t.Fatalf("expired: Err = %v, Cause = %v", quick.Err(), context.Cause(quick))
	}
	for _, d := range []*deadlineCtx{soon, late, later} {
		if d.Err() != nil {
			t.Fatalf("a deadline %v away ended: %v", time.Until(d.deadline), d.Err())
		}
	}
	// Once the timer has fired it is set for the earliest pending deadline.
	for stop := time.Now().Add(10 * time.Second); armed() != soon.deadline; time.Sleep(time.Millisecond) {
		if time.Now().After(stop) {
			t.Fatalf("armed %v after firing, want the earliest pending %v", armed(), soon.deadline)
		}
	}
	again := start(30 * time.Millisecond)
	select {
	case <-again.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a deadline started after the timer fired did not end its context")
	}
	if !errors.Is(again.Err(), context.DeadlineExceeded) || time.Now().Before(again.deadline) {
		t.Fatalf("Err = %v, %v before its deadline", again.Err(), time.Until(again.deadline))
	}
}

// stop, at the end of Close, leaves the timer to a deadline still pending:
// a request on its caller's goroutine may outlast the runner's.
func TestDeadlinesStopKeepsPendingDeadline(t *testing.T) {
	w := new(deadlines)
	d := new(deadlineCtx)
	d.start(w, context.Background(), 50*time.Millisecond)
	t.Cleanup(d.stop)
	w.stop()
	select {
	case <-d.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a deadline pending at stop never ended its context")
	}
	if !errors.Is(d.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v", d.Err())
	}
	w.stop() // nothing pending now: the timer is stopped
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed.IsZero() {
		t.Fatalf("armed %v after stop with nothing pending", w.armed)
	}
}

// detachedCtx is a context "detached" as before Go 1.21: no Done, no Err,
// no deadline, but the values of a parent, whose cancellation Cause finds
// through Value.
type detachedCtx struct{ context.Context }

func (detachedCtx) Done() <-chan struct{}       { return nil }
func (detachedCtx) Err() error                  { return nil }
func (detachedCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// A deadlineCtx over a detached context reports its own deadline as its
// cause, not the cancellation the detached context hides.
func TestDeadlineCtxHidesDetachedCancellation(t *testing.T) {
	errParent := errors.New("the parent's cause")
	parent, cancel := context.WithCancelCause(context.WithValue(t.Context(), valueKey{}, "v"))
	cancel(errParent)
	w := new(deadlines)
	t.Cleanup(w.stop)
	d := new(deadlineCtx)
	d.start(w, detached(detachedCtx{parent}), 20*time.Millisecond)
	t.Cleanup(d.stop)
	<-d.Done()
	if cause := context.Cause(d); !errors.Is(cause, context.DeadlineExceeded) {
		t.Fatalf("Cause = %v, want DeadlineExceeded", cause)
	}
	if d.Value(valueKey{}) != "v" {
		t.Fatalf("Value = %v, want the parent's", d.Value(valueKey{}))
	}
	if detached(context.Background()) != context.Background() {
		t.Fatal("detached(Background) allocated a context")
	}
}

// workers returns how many workers r runs.
func (r *runner) workers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started
}

// goroutineID returns the calling goroutine's number, as a stack trace
// names it.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}

// burst runs n jobs on r at once, each held until all n have started, and
// returns the goroutines they ran on.
func burst(t *testing.T, r *runner, n int) map[string]bool {
	t.Helper()
	var (
		mu      sync.Mutex
		ids     = make(map[string]bool)
		running sync.WaitGroup
		done    sync.WaitGroup
	)
	running.Add(n)
	done.Add(n)
	release := make(chan struct{})
	for range n {
		if !r.start(func() {
			defer done.Done()
			mu.Lock()
			ids[goroutineID()] = true
			mu.Unlock()
			running.Done()
			<-release
		}) {
			t.Fatal("start refused a job before stop")
		}
	}
	running.Wait() // every job runs at once: none waited for another
	close(release)
	done.Wait()
	if len(ids) != n {
		t.Fatalf("%d jobs held at once ran on %d goroutines", n, len(ids))
	}
	return ids
}

// waitForIdleWorkers waits until n of the runner's goroutines wait for
// work: a job that ended has not yet put its worker back to waiting.
func waitForIdleWorkers(t *testing.T, n int) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for stop := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		idle := 0
		for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			waiting := strings.Contains(g, "[select") || strings.Contains(g, "[chan receive")
			if waiting && strings.Contains(g, "guard.(*runner).") && !strings.Contains(g, "burst") {
				idle++
			}
		}
		if idle >= n {
			return
		}
		if time.Now().After(stop) {
			t.Fatalf("%d workers wait for work after 10s, want %d", idle, n)
		}
	}
}

// Workers started for a burst of requests carry the next burst: its
// requests run on the same goroutines, whose stacks have grown already.
// Once no work comes for the idle time, those beyond the core ones end.
func TestRunnerWorkersCarryTheNextBurst(t *testing.T) {
	r := &runner{idle: time.Hour}
	t.Cleanup(r.stop)
	first := burst(t, r, 10)
	if got := r.workers(); got != 10 {
		t.Fatalf("%d workers after a burst of 10", got)
	}
	waitForIdleWorkers(t, 10)
	second := burst(t, r, 10)
	for id := range second {
		if !first[id] {
			t.Fatalf("the second burst ran on goroutine %s, not one of the first's %v", id, first)
		}
	}

	r.stop() // its workers would count as idle below

	brief := &runner{idle: 20 * time.Millisecond}
	t.Cleanup(brief.stop)
	burst(t, brief, 10)
	for stop := time.Now().Add(10 * time.Second); brief.workers() != runnerCore; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(stop) {
			t.Fatalf("%d workers 10s after the burst, want the %d core ones", brief.workers(), runnerCore)
		}
	}
	waitForIdleWorkers(t, runnerCore)
	burst(t, brief, 10) // the pool grows again
	if got := brief.workers(); got != 10 {
		t.Fatalf("%d workers after a second burst of 10", got)
	}
}

// Beyond runnerMax workers, requests still run at once, each on a
// goroutine of its own that ends with it; stop waits for all of them.
func TestRunnerBeyondItsWorkers(t *testing.T) {
	r := &runner{idle: time.Hour}
	burst(t, r, runnerMax+6)
	if got := r.workers(); got != runnerMax {
		t.Fatalf("%d workers, want at most %d", got, runnerMax)
	}
	r.stop()
	if r.start(func() { t.Error("ran after stop") }) {
		t.Fatal("start after stop reported that it ran the job")
	}
}

// go-redis bounds a request past its context's deadline by nothing with
// ContextTimeoutEnabled, by twice its write and read timeouts otherwise (a
// handshake, then the command), and not at all when a timeout is off and
// the context does not stand in.
func TestOverrunOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    redis.Options
		want time.Duration
	}{
		{"defaults", redis.Options{}, 20 * time.Second},
		{"read timeout", redis.Options{ReadTimeout: time.Second}, 4 * time.Second},
		{"both", redis.Options{ReadTimeout: time.Second, WriteTimeout: 300 * time.Millisecond}, 2600 * time.Millisecond},
		{"context deadline", redis.Options{ContextTimeoutEnabled: true}, 0},
		{"no timeouts, context deadline", redis.Options{ReadTimeout: -1, WriteTimeout: -1, ContextTimeoutEnabled: true}, 0},
		{"no read timeout", redis.Options{ReadTimeout: -1}, -1},
		{"no write timeout", redis.Options{WriteTimeout: -1}, -1},
		{"no socket deadline", redis.Options{ReadTimeout: -2, ContextTimeoutEnabled: true}, -1},
	} {
		c := redis.NewClient(&tc.o)
		if got := overrunOf(c); got != tc.want {
			t.Errorf("%s: overrunOf = %v, want %v", tc.name, got, tc.want)
		}
		_ = c.Close()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ReadTimeout: time.Second})
	defer cc.Close()
	if got := overrunOf(cc); got != 4*time.Second {
		t.Errorf("overrunOf a Cluster client with a 1s read timeout = %v, want 4s", got)
	}
}

// A hold's update runs on its sender's goroutine only if go-redis ends it
// before Close would stop waiting for the hold; an answer that comes after
// the deadline is not taken, as await would not take it.
func TestTryEndsInTime(t *testing.T) {
	l := &Locker{overrun: 2 * time.Second, cfg: config{closeTimeout: 5 * time.Second}}
	in := func(d time.Duration) context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		t.Cleanup(cancel)
		return ctx
	}
	if !l.endsInTime(in(time.Second)) {
		t.Error("a 1s deadline and a 2s overrun do not end within a 5s close timeout")
	}
	if l.endsInTime(in(4 * time.Second)) {
		t.Error("a 4s deadline and a 2s overrun end within a 5s close timeout")
	}
	if l.endsInTime(t.Context()) {
		t.Error("a context without a deadline ends in time")
	}
	l.closeBy.Store(time.Now().Add(2 * time.Second).UnixNano())
	if l.endsInTime(in(time.Second)) {
		t.Error("a 1s deadline and a 2s overrun end before Close gives up in 2s")
	}
	unbounded := &Locker{overrun: -1, cfg: config{closeTimeout: time.Hour}}
	if unbounded.endsInTime(in(time.Second)) {
		t.Error("a client without socket deadlines ends in time")
	}

	inline := &Locker{overrun: 0, cfg: config{closeTimeout: time.Hour}}
	ctx := in(20 * time.Millisecond)
	v, err := try(ctx, inline, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		time.Sleep(10 * time.Millisecond)
		return 1, nil // an answer after the deadline
	})
	if v != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("try = %d, %v after its deadline, want 0 and its context's error", v, err)
	}
	v, err = try(in(time.Minute), inline, func(context.Context) (int, error) { return 1, nil })
	if v != 1 || err != nil {
		t.Errorf("try = %d, %v, want the answer", v, err)
	}
}
