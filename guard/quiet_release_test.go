package guard_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

// A release that nobody waits for neither reads the queue nor publishes;
// one that an acquisition registered for tells it, and the grantee's own
// release, with nobody left waiting, is quiet again.
func TestReleasePublishesOnlyWhenSomebodyWaits(t *testing.T) {
	srv, ls := newLockers(t, 2)
	client := srv.Client(t)
	for range 3 {
		mustRelease(t, mustAcquire(t, t.Context(), ls[0], "quiet", guard.Wait(0)))
	}
	if n := serverCalls(t, client, "publish"); n != 0 {
		t.Fatalf("releases nobody waited for published %d times", n)
	}
	if n := serverCalls(t, client, "type") + serverCalls(t, client, "zrange"); n != 0 {
		t.Fatalf("releases nobody waited for read the queue %d times", n)
	}

	holder := mustAcquire(t, t.Context(), ls[0], "quiet")
	got := make(chan *guard.Lease, 1)
	go func() {
		le, err := ls[1].Acquire(t.Context(), "quiet")
		if err != nil {
			t.Error(err)
		}
		got <- le
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if client.ZCard(t.Context(), "guard:{quiet}:waiters").Val() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not register within 5s")
		}
	}
	mustRelease(t, holder)
	var granted *guard.Lease
	select {
	case granted = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not handed the key within 5s of the release")
	}
	if granted == nil {
		t.FailNow()
	}
	told := serverCalls(t, client, "publish")
	if told == 0 {
		t.Fatal("the release a waiter registered for published nothing")
	}
	mustRelease(t, granted)
	if n := serverCalls(t, client, "publish"); n != told {
		t.Fatalf("the grantee's release, with nobody left waiting, published %d more times", n-told)
	}
}

// serverCalls returns how many times the server ran command, inside
// scripts included, by INFO commandstats.
func serverCalls(t *testing.T, c *redis.Client, command string) int {
	t.Helper()
	stats, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	prefix := "cmdstat_" + command + ":calls="
	for line := range strings.Lines(stats) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			digits, _, _ := strings.Cut(rest, ",")
			n, err := strconv.Atoi(digits)
			if err != nil {
				t.Fatalf("commandstats line %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}
