package asynqguard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// running counts the handlers running at once: now, and the most seen.
type running struct {
	mu        sync.Mutex
	now, peak int
}

func (r *running) enter() func() {
	r.mu.Lock()
	r.now++
	r.peak = max(r.peak, r.now)
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.now--
		r.mu.Unlock()
	}
}

// TestLimitFleet: three servers with 4 workers each run 30 tasks of one type
// under Limit(2): never more than 2 at once across the fleet, both permits
// used, every task exactly once, and no retry spent and no failure counted.
// With Limit's defaults the tasks that find both permits taken wait for one
// in their workers (none goes to the retry set); with WaitFor(0) they are
// busy at once and retried, as before the default wait.
func TestLimitFleet(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []asynqguard.Option
		wait bool // busy tasks wait for a permit rather than being retried
	}{
		{name: "defaults", wait: true},
		{name: "WaitFor(0)", opts: []asynqguard.Option{asynqguard.WaitFor(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) { testLimitFleet(t, tc.opts, tc.wait) })
	}
}

func testLimitFleet(t *testing.T, opts []asynqguard.Option, wait bool) {
	srv := redistest.Start(t)
	const (
		queue = "limit"
		tasks = 30
		limit = 2
		work  = 150 * time.Millisecond
	)
	c, in := newClient(t, srv)
	var ids []string
	for i := range tasks {
		ids = append(ids, enqueue(t, c, taskPrefix+"export", fmt.Appendf(nil, "%d", i), asynq.Queue(queue), asynq.MaxRetry(3)))
	}
	tr, busy, run, waited := newTracker(), newBusyCounter(), &running{}, &waits{}
	cfg := testConfig(t, queue)
	cfg.ErrorHandler = busy
	h := func(ctx context.Context, task *asynq.Task) error {
		waited.started(ctx)
		defer tr.enter(ctx, string(task.Payload()))()
		defer run.enter()()
		time.Sleep(work)
		return nil
	}
	// A short TTL: a busy task's retry comes after the first holder's
	// lease could end (at most 1s here) plus 0.5-1.5s.
	lopts := []guard.Option{guard.WithTTL(time.Second)}
	mopts := append([]asynqguard.Option{asynqguard.Limit(limit), asynqguard.Pattern(taskPrefix)}, opts...)
	for range 3 {
		startServerWith(t, srv, cfg, lopts, waited.outer, mopts, h)
	}
	start := time.Now()
	waitFor(t, 90*time.Second, "every task processed", func() bool {
		return tr.totalRuns() >= len(ids) && drained(t, in, queue)
	})
	took := time.Since(start)

	run.mu.Lock()
	peak := run.peak
	run.mu.Unlock()
	nbusy, other := busy.total()
	t.Logf("%d tasks of %v on 3 servers × 4 workers with Limit(%d): done in %v, peak %d running, %d busy retries, longest wait in a worker %v",
		tasks, work, limit, took.Round(time.Millisecond), peak, nbusy, waited.max().Round(time.Millisecond))
	if peak > limit {
		t.Errorf("%d tasks ran at once, want at most %d", peak, limit)
	}
	if peak < limit {
		t.Errorf("at most %d task ran at once: the limit of %d was never reached", peak, limit)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, id := range ids {
		if tr.runs[id] != 1 {
			t.Errorf("task %s ran %d times, want 1", id, tr.runs[id])
		}
		if slices.ContainsFunc(tr.retried[id], func(n int) bool { return n != 0 }) {
			t.Errorf("task %s ran with retry counts %v, want 0: a busy retry was counted", id, tr.retried[id])
		}
	}
	switch {
	case wait && nbusy != 0:
		t.Errorf("%d busy retries, want none: with Limit's defaults a busy task waits for a permit", nbusy)
	case wait && waited.max() < work:
		t.Errorf("no task waited in its worker as long as a handler runs (longest %v): the limit was never met, the test proves nothing", waited.max())
	case !wait && nbusy == 0:
		t.Errorf("no busy retry: the limit was never met, the test proves nothing")
	}
	if len(other) > 0 {
		t.Errorf("errors other than busy: %v", other)
	}
	qi := queueInfo(t, in, queue)
	if qi.Failed != 0 || qi.Archived != 0 || qi.Processed != tasks {
		t.Errorf("queue: %d processed, %d failed, %d archived; want %d, 0, 0", qi.Processed, qi.Failed, qi.Archived, tasks)
	}
}

// Limit keys by Pattern, or by KeyFunc when one is given, and takes one of
// n permits of the key.
func TestLimitOptions(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	export := func(p string) *asynq.Task { return asynq.NewTask("report:export", []byte(p)) }
	// Two permits of "report:export" are taken elsewhere: a third task the
	// handler registered under it runs is busy whatever its type suffix
	// and payload.
	holder := newLocker(t, srv)
	for range 2 {
		le, err := holder.Acquire(t.Context(), "report:export", guard.Permits(2))
		if err != nil {
			t.Fatal(err)
		}
		defer le.Release(context.Background())
	}
	var ran []string
	h := asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
		ran = append(ran, string(task.Payload()))
		return nil
	})
	pattern := asynqguard.Pattern("report:export")
	for _, typ := range []string{"report:export", "report:export:1"} {
		// WaitFor(0): busy at once, rather than after Limit's default wait.
		err := asynqguard.Middleware(l, asynqguard.Limit(2), pattern, asynqguard.WaitFor(0))(h).ProcessTask(t.Context(), asynq.NewTask(typ, []byte("a")))
		if !errors.Is(err, asynqguard.ErrBusy) {
			t.Errorf("third %q task of a handler limited to 2: err = %v, want ErrBusy", typ, err)
		}
	}
	// Under another limit the key's holders disagree: not busy, a failure.
	err := asynqguard.Middleware(l, asynqguard.Limit(3), pattern)(h).ProcessTask(t.Context(), export("b"))
	if !errors.Is(err, guard.ErrPermitsDiffer) || errors.Is(err, asynqguard.ErrBusy) || !asynqguard.IsFailure(err) {
		t.Errorf("Limit(3) on a key held under Limit(2): err = %v, want a failure matching guard.ErrPermitsDiffer", err)
	}
	// A KeyFunc key is limited instead.
	byTenant := asynqguard.KeyFunc(func(_ context.Context, task *asynq.Task) (string, error) {
		return "tenant:" + string(task.Payload()), nil
	})
	if err := asynqguard.Middleware(l, asynqguard.Limit(2), byTenant)(h).ProcessTask(t.Context(), export("c")); err != nil {
		t.Errorf("Limit with a KeyFunc key that is free: %v", err)
	}
	if !slices.Equal(ran, []string{"c"}) {
		t.Errorf("handlers ran for %q, want [c]", ran)
	}
	// Without Limit, Pattern leaves the default key, which names one task:
	// the key of another payload is free although "report:export" is full.
	if err := asynqguard.Middleware(l, pattern)(h).ProcessTask(t.Context(), export("d")); err != nil {
		t.Errorf("Pattern without Limit: %v, want the default key, which is free", err)
	}
	if !slices.Equal(ran, []string{"c", "d"}) {
		t.Errorf("handlers ran for %q, want [c d]", ran)
	}
}

// New accepts Limit with one key source, Pattern or KeyFunc, and refuses
// what it cannot mean, saying why; Middleware panics with the same error.
func TestLimitValidation(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	byTenant := asynqguard.KeyFunc(func(context.Context, *asynq.Task) (string, error) { return "tenant:1", nil })
	for _, c := range []struct {
		name string
		opts []asynqguard.Option
		want string // in the error; "" when accepted
	}{
		{"Limit with Pattern", []asynqguard.Option{asynqguard.Limit(2), asynqguard.Pattern("report:export")}, ""},
		{"Limit with KeyFunc", []asynqguard.Option{asynqguard.Limit(2), byTenant}, ""},
		{"Pattern alone", []asynqguard.Option{asynqguard.Pattern("report:export")}, ""},
		{"Pattern and KeyFunc without Limit", []asynqguard.Option{asynqguard.Pattern("report:export"), byTenant}, ""},
		{"Pattern with '%'", []asynqguard.Option{asynqguard.Limit(1), asynqguard.Pattern("100%")}, ""},
		{"Limit alone", []asynqguard.Option{asynqguard.Limit(1)}, "needs Pattern or KeyFunc"},
		{"Limit(0)", []asynqguard.Option{asynqguard.Limit(0), asynqguard.Pattern("report:export")}, "must be >= 1"},
		{"Limit(-1)", []asynqguard.Option{asynqguard.Limit(-1), asynqguard.Pattern("report:export")}, "must be >= 1"},
		{"Limit with DoneTTL", []asynqguard.Option{asynqguard.Limit(2), asynqguard.Pattern("report:export"), asynqguard.DoneTTL(time.Hour)}, "DoneTTL with Limit"},
		{"Limit with Pattern and KeyFunc", []asynqguard.Option{asynqguard.Limit(2), asynqguard.Pattern("report:export"), byTenant}, "both would set the limited key"},
		{"empty Pattern", []asynqguard.Option{asynqguard.Limit(1), asynqguard.Pattern("")}, "must not be empty"},
		{"blank Pattern", []asynqguard.Option{asynqguard.Pattern("  ")}, "must not be empty"},
		{"Pattern with '}'", []asynqguard.Option{asynqguard.Limit(1), asynqguard.Pattern("report}")}, "must not contain '}'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := asynqguard.New(l, c.opts...)
			if c.want == "" {
				if err != nil {
					t.Fatalf("New: %v, want accepted", err)
				}
				return
			}
			if !errors.Is(err, guard.ErrInvalid) || !contains(err.Error(), c.want) {
				t.Fatalf("New: err = %v, want guard.ErrInvalid saying %q", err, c.want)
			}
			defer func() {
				if p, _ := recover().(error); !errors.Is(p, guard.ErrInvalid) || p.Error() != err.Error() {
					t.Errorf("Middleware panicked with %v, want %v", p, err)
				}
			}()
			asynqguard.Middleware(l, c.opts...)
		})
	}
}

// TestLimitHoldsForEveryTypeTheHandlerRuns: asynq's ServeMux routes every
// task whose type starts with a pattern to the handler registered under it,
// so tasks of "report:export:1" run the "report:export" handler. Under
// Limit(1) with Pattern, two servers with 4 workers each never run two of
// them at once, whatever their type suffix; the tasks that find the key
// taken wait for it (Limit's default) rather than being retried.
func TestLimitHoldsForEveryTypeTheHandlerRuns(t *testing.T) {
	srv := redistest.Start(t)
	const (
		queue   = "pattern"
		pattern = "report:export"
	)
	c, in := newClient(t, srv)
	var ids []string
	for i := range 2 {
		for _, typ := range []string{pattern, pattern + ":1", pattern + ":2", pattern + ":3"} {
			ids = append(ids, enqueue(t, c, typ, fmt.Appendf(nil, "%d", i), asynq.Queue(queue), asynq.MaxRetry(3)))
		}
	}
	tr, busy, run, waited := newTracker(), newBusyCounter(), &running{}, &waits{}
	cfg := testConfig(t, queue)
	cfg.ErrorHandler = busy
	h := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		waited.started(ctx)
		defer tr.enter(ctx, task.Type())()
		defer run.enter()()
		time.Sleep(150 * time.Millisecond)
		return nil
	})
	for range 2 {
		l := newLocker(t, srv, guard.WithTTL(time.Second))
		mux := asynq.NewServeMux()
		mux.Handle(pattern, waited.outer(asynqguard.Middleware(l, asynqguard.Limit(1), asynqguard.Pattern(pattern))(h)))
		s := asynq.NewServer(asynq.RedisClientOpt{Addr: srv.Addr()}, cfg)
		if err := s.Start(mux); err != nil {
			t.Fatalf("asynq server start: %v", err)
		}
		t.Cleanup(s.Shutdown)
	}
	waitFor(t, 90*time.Second, "every task processed", func() bool {
		return tr.totalRuns() >= len(ids) && drained(t, in, queue)
	})
	run.mu.Lock()
	peak := run.peak
	run.mu.Unlock()
	nbusy, other := busy.total()
	t.Logf("%d tasks of 4 types under pattern %q: peak %d running, %d busy retries, longest wait in a worker %v",
		len(ids), pattern, peak, nbusy, waited.max().Round(time.Millisecond))
	if peak != 1 {
		t.Errorf("%d tasks routed to the %q handler ran at once, want 1 under Limit(1)", peak, pattern)
	}
	if waited.max() < 150*time.Millisecond {
		t.Errorf("no task waited in its worker as long as a handler runs (longest %v): the limit was never met, the test proves nothing", waited.max())
	}
	if nbusy != 0 {
		t.Errorf("%d busy retries, want none: with Limit's defaults a busy task waits for the key", nbusy)
	}
	if len(other) > 0 {
		t.Errorf("errors other than busy: %v", other)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, id := range ids {
		if tr.runs[id] != 1 {
			t.Errorf("task %s ran %d times, want 1", id, tr.runs[id])
		}
	}
}
