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

// A lost lease is said once, with the lock's name once, whichever call
// reports it: the job's WithLock (above), the Lease's Release, a re-entry
// after the loss.
func TestLossIsSaidOnceByEveryCall(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv.Addr(), guard.WithTTL(900*time.Millisecond))
	admin := srv.Client(t)
	lose := func(key string) *guard.Lease {
		le := mustAcquire(t, t.Context(), l, key)
		if err := admin.Del(t.Context(), "guard:{"+key+"}").Err(); err != nil {
			t.Fatal(err)
		}
		<-le.Context().Done()
		return le
	}
	once := func(call string, err error, key string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s after the loss: nil error", call)
		}
		msg := err.Error()
		if strings.Count(msg, `"`+key+`"`) != 1 || strings.Count(msg, "lease lost") != 1 || strings.Count(msg, "expired") > 1 {
			t.Errorf("%s: %q: want the lock's name once and the loss once", call, msg)
		}
	}

	le := lose("released")
	err := le.Release(t.Context())
	if !errors.Is(err, guard.ErrNotHeld) || !errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("Release after the loss: %v, want ErrNotHeld and ErrLeaseLost", err)
	}
	once("Release", err, "released")

	le = lose("reentered")
	_, err = l.Acquire(le.Context(), "reentered")
	if !errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("re-entry after the loss: %v, want ErrLeaseLost", err)
	}
	once("re-entry", err, "reentered")
}

// Every request about a lock key, a claim or a queue that holds another
// Redis type is ErrWrongType naming that key and its type, never Redis's
// message about a script's line.
func TestWrongTypeNamesTheKeyEverywhere(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv.Addr(), guard.WithTTL(time.Second))
	admin := srv.Client(t)
	check := func(call string, err error, key, kind string) {
		t.Helper()
		if !errors.Is(err, guard.ErrWrongType) {
			t.Fatalf("%s: %v, want ErrWrongType", call, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, key+" holds a"+kind) || strings.Contains(msg, "@user_function") || strings.Contains(msg, "Operation against") {
			t.Errorf("%s: %q: want %q named with its type, and no script location", call, msg, key)
		}
		if n := strings.Count(msg, "another Redis type"); n > 1 {
			t.Errorf("%s: %q says the wrong type %d times", call, msg, n)
		}
	}

	// A hold whose key became a string: its next renewal finds it, and a
	// re-entry then (it sends nothing) gives the loss's cause.
	le := mustAcquire(t, t.Context(), l, "swapped")
	if err := admin.Set(t.Context(), "guard:{swapped}", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	<-le.Context().Done() // the next renewal finds a string: lost
	check("the lost lease's cause", context.Cause(le.Context()), "guard:{swapped}", " string")
	_, err := l.Acquire(le.Context(), "swapped")
	check("re-entry", err, "guard:{swapped}", " string")

	// A held key whose counter became a hash: the busy answer carries the
	// newest token, and reading it names the counter.
	held := mustAcquire(t, t.Context(), l, "counted")
	admin.Del(t.Context(), "guard:{counted}:fence")
	if err := admin.HSet(t.Context(), "guard:{counted}:fence", "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	other := newLocker(t, srv.Addr(), guard.WithTTL(time.Second))
	_, err = other.Acquire(t.Context(), "counted", guard.Wait(0))
	check("a busy acquisition", err, "guard:{counted}:fence", " hash")
	admin.Del(t.Context(), "guard:{counted}:fence")
	mustRelease(t, held)

	// Claims.
	if err := admin.RPush(t.Context(), "guard:{tick}:claim", "x").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = l.Claim(t.Context(), "tick", []byte("me"), time.Minute)
	check("Claim", err, "guard:{tick}:claim", " list")
	_, _, err = l.Claimed(t.Context(), "tick")
	check("Claimed", err, "guard:{tick}:claim", "nother type")
}

// A quorum that a majority answers "wrong type" says so once.
func TestQuorumWrongTypeSaidOnce(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	// The default TTL gives each master its default request timeout to
	// answer: on a loaded machine a short one turned a wrong type into a
	// missing answer.
	l := newQuorumLocker(t, addrs, nil)
	for _, s := range servers {
		if err := s.Client(t).Set(t.Context(), "guard:{q}", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := l.Acquire(t.Context(), "q", guard.Wait(0))
	if !errors.Is(err, guard.ErrWrongType) {
		t.Fatalf("Acquire: %v, want ErrWrongType", err)
	}
	if n := strings.Count(err.Error(), "another Redis type"); n != 1 || !strings.Contains(err.Error(), "guard:{q} holds a string, not a lock") {
		t.Errorf("%q: want the wrong type said once, naming the key", err)
	}
}
