package asynqguard_test

// Regressions found in review.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// Lease lost mid-handler; handler stops on ctx.Done and returns nil (work not
// done). The task fails (ErrLeaseLost) so asynq retries -- but DoneTTL
// already recorded the key, so the retry is skipped: work dropped.
func TestLeaseLostIsNotRecordedDone(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	l := newLocker(t, srv, guard.WithTTL(600*time.Millisecond))
	mw := asynqguard.Middleware(l, asynqguard.DoneTTL(time.Minute))
	task := asynq.NewTask("charge", []byte("o-1"))
	key := keyOf(task.Type(), task.Payload())
	err := mw(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		admin.Del(context.Background(), lockKey(key))
		<-ctx.Done() // stop: work abandoned
		return nil
	})).ProcessTask(t.Context(), task)
	t.Logf("first attempt: %v (lease lost: %v)", err, errors.Is(err, guard.ErrLeaseLost))
	var runs atomic.Int64
	err = mw(counting(&runs, nil)).ProcessTask(t.Context(), task)
	t.Logf("retry: err=%v runs=%d", err, runs.Load())
	if runs.Load() != 1 {
		t.Error("retry after lease loss was skipped as already done")
	}
}

// A WaitFor longer than the task's deadline ends busy before the deadline,
// so the task spends no retry.
func TestWaitForEndsBeforeTheDeadline(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	task := asynq.NewTask("charge", []byte("o-2"))
	held, err := l.Acquire(t.Context(), keyOf(task.Type(), task.Payload()))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	mw := asynqguard.Middleware(l, asynqguard.WaitFor(time.Minute))
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	var runs atomic.Int64
	err = mw(counting(&runs, nil)).ProcessTask(ctx, task)
	if !errors.Is(err, asynqguard.ErrBusy) || ctx.Err() != nil {
		t.Fatalf("err = %v (ctx %v), want ErrBusy before the deadline", err, ctx.Err())
	}
	if asynqguard.IsFailure(err) || runs.Load() != 0 {
		t.Fatalf("IsFailure = %v, runs = %d; want a busy retry that spends nothing", asynqguard.IsFailure(err), runs.Load())
	}
}
