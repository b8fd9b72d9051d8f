package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// sentinelLocker returns a Locker on a failover client of its own
// (redis.NewFailoverClient) for s, both closed when the test ends.
func sentinelLocker(t *testing.T, s *redistest.Sentinel, opts ...guard.Option) *guard.Locker {
	t.Helper()
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    redistest.SentinelMaster,
		SentinelAddrs: s.SentinelAddrs(),
	})
	l, err := guard.New(client, opts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		_ = client.Close()
	})
	return l
}

// Without WithReplicaAck, a hold that reached the replica before the
// master was SIGKILLed is on the promoted replica: the holder's renewals
// go on there and its lease is kept; a rival that waited since before the
// failover gets the key only once it is released, with a higher token.
func TestSentinelFailoverKeepsReplicatedHold(t *testing.T) {
	const ttl = 15 * time.Second // a lease lives 8s or more past the SIGKILL
	s := redistest.StartSentinel(t, 1)
	tl := newTimeline(t)
	holder := sentinelLocker(t, s, guard.WithTTL(ttl), guard.WithObserver(tl.observer("holder")))
	rival := sentinelLocker(t, s, guard.WithTTL(ttl))
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()

	le := mustAcquire(t, ctx, holder, "report")
	held := watchLease(t, tl, "holder", le)
	rivalGot := acquireUntil(ctx, tl, "rival", rival, "report")
	s.WaitSynced(t)
	old := s.Master(t)

	killed := tl.mark("SIGKILL master %s", old.Addr())
	old.Kill(t)
	promoted := s.WaitFailover(t, old)
	moved := tl.mark("failover done: sentinels report %s", promoted.Addr())
	waitRenewed(t, ctx, tl, "holder", moved)

	if at, ended := held.endedBy(time.Now()); ended {
		t.Fatalf("holder's lease ended %v after the SIGKILL although the promoted replica had the hold: %v",
			at.Sub(killed), context.Cause(le.Context()))
	}
	select {
	case a := <-rivalGot:
		t.Fatalf("rival got the key while the holder's lease was live: %v, %v", a.le != nil, a.err)
	default:
	}
	tl.mark("holder releases")
	mustRelease(t, le)
	a := <-rivalGot
	if a.err != nil {
		t.Fatalf("rival after the release: %v", a.err)
	}
	defer mustRelease(t, a.le)
	if a.le.Token() <= le.Token() {
		t.Errorf("rival's token %d not above the holder's %d", a.le.Token(), le.Token())
	}
}

// Without WithReplicaAck, a master SIGKILLed right after an acquisition
// that never reached the replica: the promoted replica has no hold, and a
// rival gets in (the asynchronous replication window). What still holds:
// the rival's fencing token is higher, and the first holder is told to
// stop, with ErrLeaseLost, before its lease could have ended.
func TestSentinelFailoverForgetsUnreplicatedHold(t *testing.T) {
	const ttl = 6 * time.Second
	s := redistest.StartSentinel(t, 1)
	tl := newTimeline(t)
	holder := sentinelLocker(t, s, guard.WithTTL(ttl), guard.WithObserver(tl.observer("holder")))
	rival := sentinelLocker(t, s, guard.WithTTL(ttl))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	old := s.Master(t)

	mustRelease(t, mustAcquire(t, ctx, holder, "report")) // warm up, as on Cluster
	resume := loseReplication(t, old, s.Nodes()[1])
	called := tl.mark("holder acquires, the replica stopped and unlinked")
	le := mustAcquire(t, ctx, holder, "report")
	held := watchLease(t, tl, "holder", le)
	tl.mark("SIGKILL master %s", old.Addr())
	old.Kill(t)
	resume()
	rivalGot := acquireUntil(ctx, tl, "rival", rival, "report")
	promoted := s.WaitFailover(t, old)
	tl.mark("failover done: sentinels report %s", promoted.Addr())

	a := <-rivalGot
	if a.err != nil {
		t.Fatalf("rival: %v", a.err)
	}
	defer mustRelease(t, a.le)
	if a.le.Token() <= le.Token() {
		t.Errorf("rival's token %d not above the forgotten holder's %d", a.le.Token(), le.Token())
	}
	couldEnd := called.Add(ttl - ttl/100 - 2*time.Millisecond)
	select {
	case <-held.done:
	case <-time.After(time.Until(couldEnd)):
	}
	lostAt, ok := held.endedBy(couldEnd)
	if !ok {
		t.Fatalf("holder not told to stop before its lease could end (%v after the acquisition)", couldEnd.Sub(called))
	}
	if cause := context.Cause(le.Context()); !errors.Is(cause, guard.ErrLeaseLost) {
		t.Errorf("holder's lease ended with %v, want ErrLeaseLost", cause)
	}
	if lostAt.After(a.at) {
		t.Logf("two owners: the rival held the key for %v before the holder was told to stop", lostAt.Sub(a.at).Round(time.Millisecond))
	} else {
		t.Logf("the holder was told to stop %v before the rival got in", a.at.Sub(lostAt).Round(time.Millisecond))
	}
}

// With WithReplicaAck(1, …) and one replica, the acknowledged hold is on
// the promoted replica, so a rival cannot get in; but the new master has
// no replica left to acknowledge renewals, so the holder's renewals fail
// (ErrNotReplicated) and its lease context is canceled at its stop time
// (TTL - drift - StopGrace after its last acknowledged renewal), while
// the hold, still renewed on the master without acknowledgement, stays
// there until it expires. After that a rival finds the key free but cannot
// have an acquisition acknowledged either: ErrNotReplicated, not
// contention. The timeline shows when each happens; whether a renewal
// should need fewer acknowledgements than an acquisition is the
// maintainers' call.
func TestSentinelReplicaAckWithOneReplica(t *testing.T) {
	const ttl = 6 * time.Second // renew every 2s, each try bounded by 600ms
	ack := guard.WithReplicaAck(1, 300*time.Millisecond)
	s := redistest.StartSentinel(t, 1)
	tl := newTimeline(t)
	holder := sentinelLocker(t, s, guard.WithTTL(ttl), ack, guard.WithObserver(tl.observer("holder")))
	rival := sentinelLocker(t, s, guard.WithTTL(ttl), ack)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()

	tl.mark("holder acquires")
	le := mustAcquire(t, ctx, holder, "report")
	tl.mark("holder acquired, acknowledged by the replica; token %d", le.Token())
	held := watchLease(t, tl, "holder", le)
	old := s.Master(t)
	tl.mark("SIGKILL master %s", old.Addr())
	old.Kill(t)
	rivalGot := acquireUntil(ctx, tl, "rival", rival, "report")
	promoted := s.WaitFailover(t, old)
	tl.mark("failover done: sentinels report %s", promoted.Addr())

	select {
	case <-held.done:
	case a := <-rivalGot:
		t.Fatalf("rival's acquisition ended while the holder's lease was live: %v, %v", a.le != nil, a.err)
	case <-ctx.Done():
		t.Fatal("holder's lease still live with no replica to acknowledge its renewals")
	}
	if cause := context.Cause(le.Context()); !errors.Is(cause, guard.ErrLeaseLost) {
		t.Errorf("holder's lease ended with %v, want ErrLeaseLost", cause)
	}
	a := <-rivalGot
	if a.le != nil {
		mustRelease(t, a.le)
		t.Fatalf("rival acquired with no replica left to acknowledge it (token %d)", a.le.Token())
	}
	if !errors.Is(a.err, guard.ErrNotReplicated) || errors.Is(a.err, guard.ErrNotAcquired) {
		t.Fatalf("rival: %v, want ErrNotReplicated once the hold expired", a.err)
	}
}

// With WithReplicaAck(1, …) and two replicas, the Sentinels promote one
// and point the other at it, which then acknowledges the holder's
// renewals: the lease is kept through the failover, a rival waits, and
// gets the key, acknowledged, with a higher token once it is released.
func TestSentinelReplicaAckWithTwoReplicas(t *testing.T) {
	const ttl = 15 * time.Second // a lease lives 8s or more past the SIGKILL
	ack := guard.WithReplicaAck(1, 500*time.Millisecond)
	s := redistest.StartSentinel(t, 2)
	tl := newTimeline(t)
	holder := sentinelLocker(t, s, guard.WithTTL(ttl), ack, guard.WithObserver(tl.observer("holder")))
	rival := sentinelLocker(t, s, guard.WithTTL(ttl), ack)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()

	le := mustAcquire(t, ctx, holder, "report")
	held := watchLease(t, tl, "holder", le)
	rivalGot := acquireUntil(ctx, tl, "rival", rival, "report")
	old := s.Master(t)
	killed := tl.mark("SIGKILL master %s", old.Addr())
	old.Kill(t)
	promoted := s.WaitFailover(t, old)
	moved := tl.mark("failover done: sentinels report %s", promoted.Addr())
	s.WaitSynced(t)
	tl.mark("the other replica follows %s and is in sync", promoted.Addr())
	waitRenewed(t, ctx, tl, "holder", moved)

	if at, ended := held.endedBy(time.Now()); ended {
		t.Fatalf("holder's lease ended %v after the SIGKILL: %v", at.Sub(killed), context.Cause(le.Context()))
	}
	select {
	case a := <-rivalGot:
		t.Fatalf("rival's acquisition ended while the holder's lease was live: %v, %v", a.le != nil, a.err)
	default:
	}
	tl.mark("holder releases")
	mustRelease(t, le)
	a := <-rivalGot
	if a.err != nil {
		t.Fatalf("rival after the release: %v", a.err)
	}
	defer mustRelease(t, a.le)
	if a.le.Token() <= le.Token() {
		t.Errorf("rival's token %d not above the holder's %d", a.le.Token(), le.Token())
	}
}
