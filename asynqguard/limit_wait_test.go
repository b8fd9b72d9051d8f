package asynqguard_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// holdPermits takes n permits of key's n with another Locker on srv, and
// returns a function per permit that releases it (also when the test
// ends).
func holdPermits(t *testing.T, srv *redistest.Server, key string, n int) []func() {
	t.Helper()
	l := newLocker(t, srv)
	var releases []func()
	for range n {
		le, err := l.Acquire(t.Context(), key, guard.Permits(n))
		if err != nil {
			t.Fatalf("hold a permit of %q: %v", key, err)
		}
		var once sync.Once
		release := func() { once.Do(func() { _ = le.Release(context.Background()) }) }
		t.Cleanup(release)
		releases = append(releases, release)
	}
	return releases
}

// TestLimitWaitsForAPermit: with Limit's defaults a task that finds every
// permit taken waits in its worker, and runs as soon as a permit is
// released, without a trip through asynq's retry set: no busy error, no
// retry counted, the task active all along.
func TestLimitWaitsForAPermit(t *testing.T) {
	srv := redistest.Start(t)
	const queue = "limit-wait"
	releases := holdPermits(t, srv, taskPrefix, 2)
	c, in := newClient(t, srv)
	id := enqueue(t, c, taskPrefix+"export", []byte("1"), asynq.Queue(queue), asynq.MaxRetry(3))
	tr, busy := newTracker(), newBusyCounter()
	cfg := testConfig(t, queue)
	cfg.ErrorHandler = busy
	started := make(chan time.Time, 1)
	h := func(ctx context.Context, task *asynq.Task) error {
		defer tr.enter(ctx, string(task.Payload()))()
		started <- time.Now()
		return nil
	}
	startServer(t, srv, cfg, nil, []asynqguard.Option{asynqguard.Limit(2), asynqguard.Pattern(taskPrefix)}, h)

	waitFor(t, 10*time.Second, "the task active", func() bool {
		qi, err := in.GetQueueInfo(queue)
		return err == nil && qi.Active == 1
	})
	// Longer than asynq's retry turnaround in this config (RetryDelay's
	// 0.5-1.5s plus the 100ms check interval would have run it by now had
	// it been busy at once).
	time.Sleep(1600 * time.Millisecond)
	if qi := queueInfo(t, in, queue); qi.Active != 1 || qi.Retry != 0 {
		t.Fatalf("with both permits taken: %d active, %d in the retry set; want 1 waiting in its worker, 0", qi.Active, qi.Retry)
	}
	select {
	case <-started:
		t.Fatal("the handler ran while both permits were taken")
	default:
	}
	released := time.Now()
	releases[0]()
	select {
	case at := <-started:
		t.Logf("the handler started %v after a permit was released", at.Sub(released).Round(time.Millisecond))
		// A busy retry would come 4.5s at the earliest (RetryDelay: the
		// holders' 30s lease caps at 4s, plus 0.5-1.5s); the grant wakes
		// the waiting task within milliseconds, seconds on a loaded machine.
		if d := at.Sub(released); d > 3*time.Second {
			t.Errorf("the handler started %v after a permit was released, want at once (the grant wakes it)", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not run within 5s of a permit's release")
	}
	waitFor(t, 10*time.Second, "the queue drained", func() bool { return drained(t, in, queue) })
	if nbusy, other := busy.total(); nbusy != 0 || len(other) != 0 {
		t.Errorf("%d busy errors and others %v, want none: the task waited for its permit", nbusy, other)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.runs[id] != 1 || len(tr.retried[id]) != 1 || tr.retried[id][0] != 0 {
		t.Errorf("task ran %d times with retry counts %v, want once with 0", tr.runs[id], tr.retried[id])
	}
	if qi := queueInfo(t, in, queue); qi.Processed != 1 || qi.Failed != 0 {
		t.Errorf("queue: %d processed, %d failed; want 1, 0", qi.Processed, qi.Failed)
	}
}

// TestLimitWaitIsBounded: with Limit's defaults a task waits a tenth of the
// time left before its deadline (here 10s: 1s) for a permit, then is busy
// as before: an error matching ErrBusy that spends no retry, long before
// its deadline, the handler not run.
func TestLimitWaitIsBounded(t *testing.T) {
	srv := redistest.Start(t)
	holdPermits(t, srv, "report:export", 2)
	mw := asynqguard.Middleware(newLocker(t, srv), asynqguard.Limit(2), asynqguard.Pattern("report:export"))
	var runs atomic.Int64
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := mw(counting(&runs, nil)).ProcessTask(ctx, asynq.NewTask("report:export", []byte("1")))
	took := time.Since(start)
	t.Logf("busy after %v: %v", took.Round(time.Millisecond), err)
	if !errors.Is(err, asynqguard.ErrBusy) || asynqguard.IsFailure(err) || runs.Load() != 0 {
		t.Fatalf("err = %v, runs = %d; want a busy error that spends no retry, the handler not run", err, runs.Load())
	}
	// Waiting until the deadline's margin would take 9.5s.
	if took < 900*time.Millisecond || took > 5*time.Second {
		t.Errorf("busy after %v, want after the default wait of 1s (a tenth of the 10s left)", took)
	}
	if _, ok := guard.HeldFor(err); !ok {
		t.Errorf("the busy error does not carry Redis's answer about the holders: %v", err)
	}
}

// TestLimitWaitEndsWithTheTask: a task waiting for a permit returns as soon
// as its context ends (asynq's shutdown or timeout), not busy and without
// running, and leaves the queue of waiters, so that the next release grants
// the permit to a live caller.
func TestLimitWaitEndsWithTheTask(t *testing.T) {
	srv := redistest.Start(t)
	const key = "report:export"
	releases := holdPermits(t, srv, key, 2)
	l := newLocker(t, srv)
	mw := asynqguard.Middleware(l, asynqguard.Limit(2), asynqguard.Pattern(key))
	var runs atomic.Int64
	ctx, cancel := context.WithCancel(t.Context()) // no deadline: the default wait is 10s
	defer cancel()
	canceled := make(chan time.Time, 1)
	time.AfterFunc(300*time.Millisecond, func() {
		canceled <- time.Now()
		cancel()
	})
	err := mw(counting(&runs, nil)).ProcessTask(ctx, asynq.NewTask(key, []byte("1")))
	returned := time.Now()
	if !errors.Is(err, context.Canceled) || errors.Is(err, asynqguard.ErrBusy) || runs.Load() != 0 {
		t.Fatalf("err = %v, runs = %d; want the cancellation, not busy, the handler not run", err, runs.Load())
	}
	after := returned.Sub(<-canceled)
	t.Logf("returned %v after the cancel: %v", after.Round(time.Millisecond), err)
	if after > 2*time.Second {
		t.Errorf("returned %v after its context was canceled, want at once (the wait had 10s left)", after)
	}
	waitFor(t, 5*time.Second, "the canceled task out of the waiters", func() bool {
		st, err := l.Inspect(t.Context(), key)
		return err == nil && len(st.Waiters) == 0
	})
	releases[0]()
	err = mw(counting(&runs, nil)).ProcessTask(t.Context(), asynq.NewTask(key, []byte("2")))
	if err != nil || runs.Load() != 1 {
		t.Errorf("after a release: err = %v, runs = %d; want the freed permit taken by a live task", err, runs.Load())
	}
}
