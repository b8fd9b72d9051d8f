package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// keyOnEachMaster returns one lock name served by each master of c.
func keyOnEachMaster(t *testing.T, c *redistest.Cluster) []string {
	t.Helper()
	seen := map[*redistest.Server]bool{}
	var names []string
	for i := 0; i < 1000 && len(names) < 3; i++ {
		name := fmt.Sprintf("rw-%d", i)
		if m := c.MasterOf(t, lockKey(name)); !seen[m] {
			seen[m] = true
			names = append(names, name)
		}
	}
	if len(names) < 3 {
		t.Fatalf("1000 names cover only %d masters", len(names))
	}
	return names
}

// notYet fails the test if a result arrives within d: the acquisition
// must still be waiting.
func notYet(t *testing.T, what string, ch <-chan acquired, d time.Duration) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned while it should wait: lease %v, err %v", what, r.le != nil, r.err)
	case <-time.After(d):
	}
}

// within waits for a result for up to d and fails the test on an error or
// a timeout.
func within(t *testing.T, what string, ch <-chan acquired, d time.Duration) *guard.Lease {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.le
	case <-time.After(d):
		t.Fatalf("%s not done within %v (the TTL is 20s: only a release notification is that fast)", what, d)
		return nil
	}
}

// Read-write leases on a Cluster, on a key of each master, with three
// Lockers on clients of their own: readers share a key; a writer waits
// behind them and is woken by the last reader's release, through the
// sharded pub/sub channel of the key's slot, far sooner than the 20s TTL
// that its fallback timer waits for; readers wait behind a writer and are
// woken by its release; a read holder asking for a write lease gets
// ErrUpgrade at once.
func TestClusterReadWriteLock(t *testing.T) {
	const (
		ttl  = 20 * time.Second // a wake-up by the fallback timer would take this long
		wake = 2 * time.Second  // a notification's worth on a loaded machine
	)
	c := redistest.StartCluster(t)
	var ls []*guard.Locker
	for range 3 {
		l, _ := newClusterLocker(t, c, guard.WithTTL(ttl))
		ls = append(ls, l)
	}
	for _, name := range keyOnEachMaster(t, c) {
		master := c.MasterOf(t, lockKey(name))
		t.Run(master.Addr(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			node := master.Client(t)

			// Readers share.
			r1, err := ls[0].AcquireRead(ctx, name, guard.Wait(0))
			if err != nil {
				t.Fatalf("first reader: %v", err)
			}
			r2, err := ls[1].AcquireRead(ctx, name, guard.Wait(0))
			if err != nil {
				t.Fatalf("second reader: %v", err)
			}
			if _, err := ls[2].Acquire(ctx, name, guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
				t.Fatalf("writer while read-held: err = %v, want ErrNotAcquired", err)
			}

			// A read holder cannot upgrade; WithReadLock's job context neither.
			start := time.Now()
			if _, err := ls[0].Acquire(r1.Context(), name); !errors.Is(err, guard.ErrUpgrade) {
				t.Fatalf("write under read: err = %v, want ErrUpgrade", err)
			}
			err = ls[1].WithReadLock(ctx, name, func(ctx context.Context) error {
				_, err := ls[1].Acquire(ctx, name)
				return err
			})
			if !errors.Is(err, guard.ErrUpgrade) {
				t.Fatalf("write under WithReadLock: err = %v, want ErrUpgrade", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("ErrUpgrade took %v", d)
			}

			// A writer waits for the last reader and is woken by its release.
			writer := startAcquire(ctx, ls[2].Acquire, name)
			waitShardSubscribed(t, node, 5*time.Second, releasedChannel(name))
			mustRelease(t, r1)
			notYet(t, "writer with one reader left", writer, 300*time.Millisecond)
			released := time.Now()
			mustRelease(t, r2)
			w := within(t, "writer after the last reader's release", writer, wake)
			t.Logf("writer in %v after the last reader's release", time.Since(released))

			// Readers wait behind the writer and are woken by its release.
			readers := []<-chan acquired{
				startAcquire(ctx, ls[0].AcquireRead, name),
				startAcquire(ctx, ls[1].AcquireRead, name),
			}
			if _, err := ls[0].AcquireRead(ctx, name, guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
				t.Fatalf("reader while write-held: err = %v, want ErrNotAcquired", err)
			}
			waitShardSubscribed(t, node, 5*time.Second, releasedChannel(name))
			for i, r := range readers {
				notYet(t, fmt.Sprintf("reader %d behind the writer", i), r, 200*time.Millisecond)
			}
			released = time.Now()
			mustRelease(t, w)
			var got []*guard.Lease
			for i, r := range readers {
				got = append(got, within(t, fmt.Sprintf("reader %d after the writer's release", i), r, wake))
			}
			t.Logf("both readers in %v after the writer's release", time.Since(released))
			for _, le := range got {
				if err := le.Context().Err(); err != nil {
					t.Fatalf("reader's lease ended while both should share the key: %v", context.Cause(le.Context()))
				}
			}
			for _, le := range got {
				mustRelease(t, le)
			}
			mustRelease(t, mustAcquire(t, ctx, ls[2], name, guard.Wait(0)))
		})
	}
}

// pubsubClients returns how many subscription connections node has
// (CLIENT LIST TYPE pubsub).
func pubsubClients(t *testing.T, node *redis.Client) int {
	t.Helper()
	list, err := node.Do(t.Context(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	if list = strings.TrimSpace(list); list == "" {
		return 0
	}
	return len(strings.Split(list, "\n"))
}

// On Cluster a Locker waits through one subscription connection per hash
// slot it waits on, not one in all (as the package doc says of one server)
// nor one per master: waiters on three keys in three slots of one master
// hold three connections to it, closed when the waiting ends.
func TestClusterWaitingSubscribesPerSlot(t *testing.T) {
	c := redistest.StartCluster(t)
	holder, cc := newClusterLocker(t, c, guard.WithTTL(20*time.Second))
	waiter, _ := newClusterLocker(t, c, guard.WithTTL(20*time.Second))
	names := keysOnOneMaster(t, cc, 3)
	node := c.MasterOf(t, lockKey(names[0])).Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	var held []*guard.Lease
	var waiting []<-chan acquired
	var channels []string
	for _, name := range names {
		held = append(held, mustAcquire(t, ctx, holder, name))
		waiting = append(waiting, startAcquire(ctx, waiter.Acquire, name))
		channels = append(channels, releasedChannel(name))
	}
	waitShardSubscribed(t, node, 5*time.Second, channels...)
	if n := pubsubClients(t, node); n != len(names) {
		t.Errorf("%d subscription connections on the master for waiters on %d slots, want one per slot", n, len(names))
	}
	for i, le := range held {
		mustRelease(t, le)
		mustRelease(t, within(t, "waiter after the release", waiting[i], 2*time.Second))
	}
	waitNoPubSubClients(t, node, 5*time.Second)
}
