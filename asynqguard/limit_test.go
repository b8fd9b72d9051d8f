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
// used, every task exactly once, and the busy retries spend no retry and
// count no failure.
func TestLimitFleet(t *testing.T) {
	srv := redistest.Start(t)
	const (
		queue = "limit"
		tasks = 30
		limit = 2
	)
	c, in := newClient(t, srv)
	var ids []string
	for i := range tasks {
		ids = append(ids, enqueue(t, c, taskPrefix+"export", fmt.Appendf(nil, "%d", i), asynq.Queue(queue), asynq.MaxRetry(3)))
	}
	tr, busy, run := newTracker(), newBusyCounter(), &running{}
	cfg := testConfig(t, queue)
	cfg.ErrorHandler = busy
	h := func(ctx context.Context, task *asynq.Task) error {
		defer tr.enter(ctx, string(task.Payload()))()
		defer run.enter()()
		time.Sleep(150 * time.Millisecond)
		return nil
	}
	// A short TTL: a busy task's retry comes after the first holder's
	// lease could end (at most 1s here) plus 0.5-1.5s.
	lopts := []guard.Option{guard.WithTTL(time.Second)}
	for range 3 {
		startServer(t, srv, cfg, lopts, []asynqguard.Option{asynqguard.Limit(limit)}, h)
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
	t.Logf("%d tasks of %v on 3 servers × 4 workers with Limit(%d): done in %v, peak %d running, %d busy retries",
		tasks, 150*time.Millisecond, limit, took.Round(time.Millisecond), peak, nbusy)
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
	if nbusy == 0 {
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

// Limit keys by task type unless KeyFunc says otherwise, takes one of n
// permits of the key, and refuses what it cannot mean.
func TestLimitOptions(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	export := func(p string) *asynq.Task { return asynq.NewTask("report:export", []byte(p)) }
	// Two permits of "report:export" are taken elsewhere: a third task of the
	// type is busy whatever its payload.
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
	err := asynqguard.Middleware(l, asynqguard.Limit(2))(h).ProcessTask(t.Context(), export("a"))
	if !errors.Is(err, asynqguard.ErrBusy) {
		t.Errorf("third task of a type limited to 2: err = %v, want ErrBusy", err)
	}
	// Under another limit the key's holders disagree: not busy, a failure.
	err = asynqguard.Middleware(l, asynqguard.Limit(3))(h).ProcessTask(t.Context(), export("b"))
	if !errors.Is(err, guard.ErrPermitsDiffer) || errors.Is(err, asynqguard.ErrBusy) || !asynqguard.IsFailure(err) {
		t.Errorf("Limit(3) on a key held under Limit(2): err = %v, want a failure matching guard.ErrPermitsDiffer", err)
	}
	// A KeyFunc key is limited instead of the type.
	byTenant := asynqguard.KeyFunc(func(_ context.Context, task *asynq.Task) (string, error) {
		return "tenant:" + string(task.Payload()), nil
	})
	if err := asynqguard.Middleware(l, asynqguard.Limit(2), byTenant)(h).ProcessTask(t.Context(), export("c")); err != nil {
		t.Errorf("Limit with a KeyFunc key that is free: %v", err)
	}
	if !slices.Equal(ran, []string{"c"}) {
		t.Errorf("handlers ran for %q, want [c]", ran)
	}
	for name, opts := range map[string][]asynqguard.Option{
		"Limit(0)":           {asynqguard.Limit(0)},
		"Limit(-1)":          {asynqguard.Limit(-1)},
		"Limit with DoneTTL": {asynqguard.Limit(2), asynqguard.DoneTTL(time.Hour)},
	} {
		if _, err := asynqguard.New(l, opts...); !errors.Is(err, guard.ErrInvalid) {
			t.Errorf("%s: err = %v, want guard.ErrInvalid", name, err)
		}
	}
}
