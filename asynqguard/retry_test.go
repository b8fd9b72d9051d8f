package asynqguard_test

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

// RetryDelay reads how long Redis said the holder keeps the key: a busy
// task is retried about when a crashed holder's lease ends (just after it,
// when that is near), and never waits more than a few seconds for a live
// holder, which renews.
func TestRetryDelayFollowsTheHolder(t *testing.T) {
	srv := redistest.Start(t)
	holder := newLocker(t, srv)
	mw := asynqguard.Middleware(newLocker(t, srv))
	tests := []struct {
		name     string
		ttl      time.Duration // the holder's lease TTL
		min, max time.Duration // bounds of the delay, relative to HeldFor when rel
		rel      bool
	}{
		{"lease ends soon: just after it", 2 * time.Second, 500 * time.Millisecond, 1500 * time.Millisecond, true},
		{"lease ends late: bounded", 30 * time.Second, 4500 * time.Millisecond, 5500 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task := asynq.NewTask("report", []byte(tt.name))
			le, err := holder.Acquire(t.Context(), keyOf(task.Type(), task.Payload()), guard.TTL(tt.ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer le.Release(context.Background())
			var runs atomic.Int64
			busy := mw(counting(&runs, nil)).ProcessTask(t.Context(), task)
			if !errors.Is(busy, asynqguard.ErrBusy) {
				t.Fatalf("err = %v, want ErrBusy", busy)
			}
			held, ok := guard.HeldFor(busy)
			if !ok || held <= 0 || held > tt.ttl {
				t.Fatalf("guard.HeldFor(busy error) = %v, %v; want the holder's remaining time, up to %v", held, ok, tt.ttl)
			}
			lo, hi := tt.min, tt.max
			if tt.rel {
				lo, hi = held+lo, held+hi
			}
			for range 50 {
				if d := asynqguard.RetryDelay(0, busy, task); d < lo || d >= hi {
					t.Fatalf("RetryDelay = %v with the key held for %v more; want [%v, %v)", d, held, lo, hi)
				}
			}
		})
	}
}
