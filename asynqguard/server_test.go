package asynqguard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// These tests run real asynq servers, two where the fleet matters, each
// with its own Locker and Redis clients, against one real redis-server.

// TestFleet: identical tasks never run at the same time while distinct ones
// do; with the default policy and the hooks wired in, every enqueued task
// runs exactly once and busy retries spend no retry and count no failure.
func TestFleet(t *testing.T) {
	srv := redistest.Start(t)
	const queue = "fleet"
	c, in := newClient(t, srv)
	var ids []string
	for range 3 {
		for _, p := range []string{"a", "b", "c"} {
			ids = append(ids, enqueue(t, c, taskPrefix+"work", []byte(p), asynq.Queue(queue), asynq.MaxRetry(3)))
		}
	}

	tr, busy := newTracker(), newBusyCounter()
	cfg := testConfig(t, queue)
	cfg.ErrorHandler = busy
	h := func(ctx context.Context, task *asynq.Task) error {
		defer tr.enter(ctx, string(task.Payload()))()
		time.Sleep(300 * time.Millisecond)
		return nil
	}
	for range 2 {
		startServer(t, srv, cfg, nil, nil, h)
	}
	waitFor(t, 30*time.Second, "every task processed", func() bool {
		return tr.totalRuns() >= len(ids) && drained(t, in, queue)
	})

	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.overlaps != 0 {
		t.Errorf("%d runs started while an identical task ran, want 0", tr.overlaps)
	}
	if tr.maxKeys < 2 {
		t.Errorf("at most %d distinct tasks ran at once, want >= 2", tr.maxKeys)
	}
	for _, id := range ids {
		if tr.runs[id] != 1 {
			t.Errorf("task %s ran %d times, want 1", id, tr.runs[id])
		}
		if slices.ContainsFunc(tr.retried[id], func(n int) bool { return n != 0 }) {
			t.Errorf("task %s ran with retry counts %v, want 0: a busy retry was counted", id, tr.retried[id])
		}
	}
	nbusy, other := busy.total()
	if nbusy == 0 {
		t.Errorf("no busy retry: identical tasks never contended, the test proves nothing")
	}
	if len(other) > 0 {
		t.Errorf("errors other than busy: %v", other)
	}
	qi := queueInfo(t, in, queue)
	if qi.Failed != 0 || qi.Archived != 0 || qi.Processed != len(ids) {
		t.Errorf("queue: %d processed, %d failed, %d archived; want %d, 0, 0 (busy retries are not processing)",
			qi.Processed, qi.Failed, qi.Archived, len(ids))
	}
	t.Logf("%d tasks, %d busy retries, up to %d distinct tasks at once", len(ids), nbusy, tr.maxKeys)
}

// TestWithoutHooks: without IsFailure in asynq.Config, busy tasks are still
// retried and none is dropped, but each busy attempt spends a retry.
func TestWithoutHooks(t *testing.T) {
	srv := redistest.Start(t)
	const queue = "nohooks"
	c, in := newClient(t, srv)
	var ids []string
	for range 3 {
		ids = append(ids, enqueue(t, c, taskPrefix+"work", []byte("same"), asynq.Queue(queue)))
	}
	tr := newTracker()
	cfg := testConfig(t, queue)
	cfg.IsFailure = nil
	cfg.RetryDelayFunc = func(int, error, *asynq.Task) time.Duration { return 200 * time.Millisecond }
	h := func(ctx context.Context, task *asynq.Task) error {
		defer tr.enter(ctx, string(task.Payload()))()
		time.Sleep(300 * time.Millisecond)
		return nil
	}
	for range 2 {
		startServer(t, srv, cfg, nil, nil, h)
	}
	waitFor(t, 30*time.Second, "every task processed", func() bool {
		return tr.totalRuns() >= len(ids) && drained(t, in, queue)
	})
	tr.mu.Lock()
	defer tr.mu.Unlock()
	spent := 0
	for _, id := range ids {
		if tr.runs[id] != 1 {
			t.Errorf("task %s ran %d times, want 1", id, tr.runs[id])
		}
		spent += tr.retried[id][0]
	}
	if tr.overlaps != 0 {
		t.Errorf("%d overlapping runs, want 0", tr.overlaps)
	}
	if spent == 0 {
		t.Errorf("no retry spent without the IsFailure hook; want asynq to count busy attempts")
	}
	if qi := queueInfo(t, in, queue); qi.Failed == 0 {
		t.Errorf("queue counts no failure without the IsFailure hook")
	}
}

// TestSkipPolicy: duplicates of a running task succeed without running,
// each logged with its task id.
func TestSkipPolicy(t *testing.T) {
	srv := redistest.Start(t)
	const queue = "skip"
	c, in := newClient(t, srv)
	var ids []string
	for range 3 {
		ids = append(ids, enqueue(t, c, taskPrefix+"report", []byte("daily"), asynq.Queue(queue)))
	}
	tr, busy := newTracker(), newBusyCounter()
	cfg := testConfig(t, queue)
	cfg.ErrorHandler = busy
	log, buf := newLogger()
	h := func(ctx context.Context, task *asynq.Task) error {
		defer tr.enter(ctx, string(task.Payload()))()
		time.Sleep(time.Second)
		return nil
	}
	for range 2 {
		startServer(t, srv, cfg, nil, []asynqguard.Option{asynqguard.Skip(), asynqguard.Logger(log)}, h)
	}
	skipped := func() []string { return buf.lines("skipped duplicate: key busy") }
	waitFor(t, 20*time.Second, "one run and two skips", func() bool {
		return tr.totalRuns() == 1 && len(skipped()) == 2 && drained(t, in, queue)
	})
	time.Sleep(200 * time.Millisecond) // nothing more happens
	if n := tr.totalRuns(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
	logged := skipped()
	if len(logged) != 2 {
		t.Fatalf("%d skips logged, want 2:\n%s", len(logged), buf)
	}
	tr.mu.Lock()
	for _, id := range ids {
		want := 0
		if tr.runs[id] == 0 {
			want = 1
		}
		if got := len(slices.DeleteFunc(slices.Clone(logged), func(l string) bool { return !contains(l, "task_id="+id) })); got != want {
			t.Errorf("task %s: %d skip lines, want %d", id, got, want)
		}
	}
	tr.mu.Unlock()
	if n, other := busy.total(); n != 0 || len(other) != 0 {
		t.Errorf("skipped tasks returned errors: %d busy, others %v", n, other)
	}
	if qi := queueInfo(t, in, queue); qi.Processed != 3 || qi.Failed != 0 || qi.Archived != 0 {
		t.Errorf("queue: %d processed, %d failed, %d archived; want 3, 0, 0", qi.Processed, qi.Failed, qi.Archived)
	}
}

// TestLeaseLossRetries: a lease lost mid-handler cancels the handler's
// context with guard.ErrLeaseLost, and asynq retries the task.
func TestLeaseLossRetries(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	const queue = "loss"
	c, in := newClient(t, srv)
	payload := []byte("order-7")
	id := enqueue(t, c, taskPrefix+"charge", payload, asynq.Queue(queue))

	started := make(chan struct{})
	causes := make(chan error, 1)
	tr := newTracker()
	h := func(ctx context.Context, task *asynq.Task) error {
		defer tr.enter(ctx, "charge")()
		if n, _ := asynq.GetRetryCount(ctx); n > 0 {
			return nil
		}
		close(started)
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	}
	log, buf := newLogger()
	startServer(t, srv, testConfig(t, queue), []guard.Option{guard.WithTTL(900 * time.Millisecond)},
		[]asynqguard.Option{asynqguard.Logger(log)}, h)

	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not start")
	}
	if err := admin.Del(t.Context(), lockKey(keyOf(taskPrefix+"charge", payload))).Err(); err != nil {
		t.Fatal(err)
	}
	if cause := <-causes; !errors.Is(cause, guard.ErrLeaseLost) {
		t.Errorf("handler context ended with %v, want guard.ErrLeaseLost", cause)
	}
	waitFor(t, 10*time.Second, "the task runs again", func() bool { return tr.totalRuns() == 2 && drained(t, in, queue) })
	tr.mu.Lock()
	if got := tr.retried[id]; !slices.Equal(got, []int{0, 1}) {
		t.Errorf("retry counts of the runs %v, want [0 1]: a lost lease is a failure", got)
	}
	tr.mu.Unlock()
	// guard logs the loss itself at Error; the adapter adds the task, once, at Warn.
	if len(buf.lines("level=WARN", "lease lost", "task_id="+id)) != 1 {
		t.Errorf("lease loss not logged once at Warn:\n%s", buf)
	}
}

// TestAsynqCancelKeepsLease: when asynq cancels the handler (Timeout), it
// retries the task at once without waiting for the handler; the lease is
// kept and renewed until the handler returns, so the retried copy finds the
// key busy and runs only after.
func TestAsynqCancelKeepsLease(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	const queue = "timeout"
	c, in := newClient(t, srv)
	payload := []byte("slow")
	lk := lockKey(keyOf(taskPrefix+"slow", payload))
	id := enqueue(t, c, taskPrefix+"slow", payload, asynq.Queue(queue), asynq.Timeout(time.Second))

	tr, busy := newTracker(), newBusyCounter()
	var held atomic.Int64 // the first run's checks that the lock is still in Redis
	var heldErr atomic.Value
	returned := make(chan struct{})
	h := func(ctx context.Context, task *asynq.Task) error {
		defer tr.enter(ctx, "slow")()
		if n, _ := asynq.GetRetryCount(ctx); n > 0 {
			return nil
		}
		defer close(returned)
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			return errors.New("asynq did not cancel the handler")
		}
		if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			heldErr.Store(fmt.Errorf("cause %v, want the deadline", context.Cause(ctx)))
		}
		// Keep running past the lease TTL, after asynq has given up on us.
		for range 10 {
			n, err := admin.Exists(context.Background(), lk).Result()
			if err != nil || n != 1 {
				heldErr.Store(fmt.Errorf("lock key exists = %d, %v; want 1", n, err))
			}
			held.Add(1)
			time.Sleep(200 * time.Millisecond)
		}
		return nil
	}
	cfg := testConfig(t, queue)
	cfg.ErrorHandler = busy
	lopts := []guard.Option{guard.WithTTL(900 * time.Millisecond)}
	for range 2 {
		startServer(t, srv, cfg, lopts, nil, h)
	}
	select {
	case <-returned:
	case <-time.After(20 * time.Second):
		t.Fatal("first run did not return")
	}
	waitFor(t, 10*time.Second, "the retried copy runs", func() bool { return tr.totalRuns() == 2 && drained(t, in, queue) })
	if err, _ := heldErr.Load().(error); err != nil {
		t.Error(err)
	}
	if held.Load() != 10 {
		t.Errorf("%d lock checks, want 10", held.Load())
	}
	tr.mu.Lock()
	if tr.overlaps != 0 {
		t.Errorf("the retried copy ran while the canceled handler still ran")
	}
	tr.mu.Unlock()
	if busy.of(id) == 0 {
		t.Errorf("the retried copy never found the key busy while the canceled handler ran")
	}
}

// TestNoRetryLeftWaits: asynq archives a task with no retry left on any
// error, so under the default policy such a task waits for the key instead
// of failing busy.
func TestNoRetryLeftWaits(t *testing.T) {
	srv := redistest.Start(t)
	const queue = "noretry"
	c, in := newClient(t, srv)
	var ids []string
	for range 2 {
		ids = append(ids, enqueue(t, c, taskPrefix+"once", []byte("x"), asynq.Queue(queue), asynq.MaxRetry(0)))
	}
	tr, busy := newTracker(), newBusyCounter()
	cfg := testConfig(t, queue)
	cfg.ErrorHandler = busy
	h := func(ctx context.Context, task *asynq.Task) error {
		defer tr.enter(ctx, "once")()
		time.Sleep(500 * time.Millisecond)
		return nil
	}
	for range 2 {
		startServer(t, srv, cfg, nil, nil, h)
	}
	waitFor(t, 20*time.Second, "both tasks processed", func() bool { return tr.totalRuns() >= 2 && drained(t, in, queue) })
	tr.mu.Lock()
	for _, id := range ids {
		if tr.runs[id] != 1 {
			t.Errorf("task %s ran %d times, want 1", id, tr.runs[id])
		}
	}
	if tr.overlaps != 0 {
		t.Errorf("%d overlapping runs, want 0", tr.overlaps)
	}
	tr.mu.Unlock()
	if n, other := busy.total(); n != 0 || len(other) != 0 {
		t.Errorf("errors: %d busy, others %v; want none", n, other)
	}
	if qi := queueInfo(t, in, queue); qi.Archived != 0 {
		t.Errorf("%d archived, want 0", qi.Archived)
	}
}
