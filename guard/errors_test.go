package guard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// An error names the lock once, by the name it was given, and says its
// cause once: a job that returns context.Cause(ctx) after losing its
// lease, even through a re-entry, gets the loss once.
func TestErrorsSayEachThingOnce(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv.Addr(), guard.WithTTL(900*time.Millisecond))
	admin := srv.Client(t)
	for _, reenter := range []bool{false, true} {
		key := "report"
		if reenter {
			key = "report-reentered"
		}
		err := l.WithLock(t.Context(), key, func(ctx context.Context) error {
			job := func(ctx context.Context) error {
				if err := admin.Del(t.Context(), "guard:{"+key+"}").Err(); err != nil {
					t.Fatal(err)
				}
				<-ctx.Done()
				return context.Cause(ctx)
			}
			if reenter {
				return l.WithLock(ctx, key, job)
			}
			return job(ctx)
		})
		if !errors.Is(err, guard.ErrLeaseLost) {
			t.Fatalf("WithLock: %v, want ErrLeaseLost", err)
		}
		if n := strings.Count(err.Error(), "lease lost"); n != 1 {
			t.Errorf("re-entered %v: %q says the loss %d times, want once", reenter, err, n)
		}
	}
}

// A Redis outage on a quorum names the lock as it was given, not its Redis key.
func TestErrorsNameTheLockNotItsRedisKey(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	l := newQuorumLocker(t, addrs, nil, guard.WithTTL(time.Second))
	servers[1].Kill(t)
	servers[2].Kill(t)
	_, err := l.Acquire(t.Context(), "redlock-job", guard.Wait(0))
	if err == nil {
		t.Fatal("acquired with a majority down")
	}
	msg := err.Error()
	if strings.Contains(msg, "guard:{") || strings.Count(msg, `"redlock-job"`) != 1 {
		t.Errorf("error %q: want the lock's name once and no Redis key", msg)
	}
}

// A waiters queue of another Redis type is reported as the lock key's own
// check reports it: ErrWrongType, naming the key.
func TestWrongTypeQueueNamesTheKey(t *testing.T) {
	srv, ls := newLockers(t, 2)
	le := mustAcquire(t, t.Context(), ls[0], "queued", guard.Wait(0))
	defer mustRelease(t, le)
	if err := srv.Client(t).Set(t.Context(), "guard:{queued}:waiters", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := ls[1].Acquire(t.Context(), "queued", guard.Wait(0))
	if !errors.Is(err, guard.ErrWrongType) || !strings.Contains(err.Error(), "guard:{queued}:waiters holds a string, not a queue of waiters") {
		t.Fatalf("Acquire with a queue of another type: %v, want ErrWrongType naming the queue", err)
	}
	if strings.Contains(err.Error(), "@user_function") || strings.Contains(err.Error(), "Operation against") {
		t.Errorf("the error shows Redis's script location: %v", err)
	}
}
