package failover_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/guard/observe"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Failover tests of guard.New on a Cluster with replicas and on a Sentinel
// set (sentinel_test.go). They assert exclusion and the order of
// events (a holder is told to stop before another owner gets in), never
// speed; each logs a timeline of what happened, relative to the SIGKILL,
// for the maintainers to read.

// timeline records when things happen in a failover test and logs them,
// in order and relative to the first mark, when the test ends. As an
// Observer it also records renewals and lost leases.
type timeline struct {
	mu     sync.Mutex
	zero   time.Time
	events []timedEvent
}

type timedEvent struct {
	at   time.Time
	what string
}

func newTimeline(t *testing.T) *timeline {
	tl := &timeline{}
	t.Cleanup(func() { t.Log("timeline, relative to the first mark:\n" + tl.String()) })
	return tl
}

// mark records what happens now and returns the time.
func (tl *timeline) mark(format string, args ...any) time.Time {
	now := time.Now()
	tl.markAt(now, format, args...)
	return now
}

func (tl *timeline) markAt(at time.Time, format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.zero.IsZero() {
		tl.zero = at
	}
	tl.events = append(tl.events, timedEvent{at, fmt.Sprintf(format, args...)})
}

func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	events := slices.Clone(tl.events)
	// Observer events arrive off the heartbeat's goroutine: sort by time.
	slices.SortStableFunc(events, func(a, b timedEvent) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "\t%+8.3fs  %s\n", e.at.Sub(tl.zero).Seconds(), e.what)
	}
	return b.String()
}

// observer returns an Observer that marks renewal round trips and lost
// leases on the timeline, naming the Locker who.
func (tl *timeline) observer(who string) guard.Observer {
	return &timelineObserver{tl: tl, who: who}
}

type timelineObserver struct {
	tl  *timeline
	who string

	mu     sync.Mutex
	failed int // leases not renewed since the last round trip
}

func (o *timelineObserver) Begin(ctx context.Context, _ observe.Phase, _ observe.Info) context.Context {
	return ctx
}
func (o *timelineObserver) End(context.Context, observe.Phase, observe.Info) {}

// Event marks renewals: guard reports a pipeline's leases that were not
// renewed (RenewFailed: no reply, or not acknowledged by replicas) just
// before the pipeline's round trip. Pipelines to different nodes may
// report at the same time, so the pairing is exact only for a Locker whose
// leases share one node, as the tests that wait on it arrange.
func (o *timelineObserver) Event(_ context.Context, e observe.Event, info observe.Info) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case e == observe.RenewFailed:
		o.failed++
		o.tl.mark("%s: renewal of %s failed: %v", o.who, info.Key, info.Err)
	case e == observe.RoundTrip && info.Op == "renew" && info.Err == nil && o.failed == 0:
		o.tl.mark("%s: %s (%v)", o.who, renewedAll, info.Duration.Round(time.Millisecond))
	case e == observe.RoundTrip && info.Op == "renew":
		o.tl.mark("%s: renewal round trip: %d leases not renewed, err %v", o.who, o.failed, info.Err)
		o.failed = 0
	case e == observe.LeaseLost:
		o.tl.mark("%s: lease on %s lost (observer): %v", o.who, info.Key, info.Err)
	}
}

// renewedAll marks a renewal round trip that renewed every lease in it.
const renewedAll = "renewal round trip renewed all"

// leaseWatch records when a lease's context ends, on the timeline too.
type leaseWatch struct {
	le   *guard.Lease
	done chan struct{}
	at   time.Time // valid once done is closed
}

func watchLease(t *testing.T, tl *timeline, who string, le *guard.Lease) *leaseWatch {
	w := &leaseWatch{le: le, done: make(chan struct{})}
	stop := context.AfterFunc(le.Context(), func() {
		w.at = tl.mark("%s: lease context on %s done: %v", who, le.Key(), context.Cause(le.Context()))
		close(w.done)
	})
	t.Cleanup(func() {
		stop()
		// A test that failed half way must not leave Close waiting a TTL.
		_ = le.Release(context.Background())
	})
	return w
}

// endedBy reports whether the lease's context ended at or before at, and
// when.
func (w *leaseWatch) endedBy(at time.Time) (time.Time, bool) {
	select {
	case <-w.done:
		return w.at, !w.at.After(at)
	default:
		return time.Time{}, false
	}
}

// acquisition is the outcome of an Acquire that ran in the background.
type acquisition struct {
	le  *guard.Lease
	err error
	at  time.Time
}

// acquireUntil acquires key with l in the background, as an application
// would: it tries again after a transport error (the Cluster or Sentinel
// still failing over) until ctx is done, and sends the outcome on the
// returned channel. ErrNotAcquired, ErrNotReplicated and ErrClosed end it.
func acquireUntil(ctx context.Context, tl *timeline, who string, l *guard.Locker, key string) <-chan acquisition {
	got := make(chan acquisition, 1)
	go func() {
		for {
			le, err := l.Acquire(ctx, key)
			if err == nil {
				got <- acquisition{le: le, at: tl.mark("%s: acquired %s, token %d", who, key, le.Token())}
				return
			}
			if ctx.Err() != nil || errors.Is(err, guard.ErrNotAcquired) || errors.Is(err, guard.ErrNotReplicated) || errors.Is(err, guard.ErrClosed) {
				got <- acquisition{err: err, at: tl.mark("%s: Acquire %s: %v", who, key, err)}
				return
			}
			tl.mark("%s: Acquire %s: %v; trying again", who, key, err)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return got
}

// drain stops an acquisition that lost a race and releases what it got.
func drain(t *testing.T, got <-chan acquisition, stop context.CancelFunc) {
	t.Helper()
	stop()
	if a := <-got; a.le != nil {
		mustRelease(t, a.le)
	}
}

// clusterLocker returns a Locker on a ClusterClient of its own, both closed
// when the test ends; client options go through setClient, if not nil.
func clusterLocker(t *testing.T, c *redistest.Cluster, setClient func(*redis.ClusterOptions), opts ...guard.Option) *guard.Locker {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs()}
	if setClient != nil {
		setClient(o)
	}
	client := redis.NewClusterClient(o)
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

// followSlots makes a ClusterClient reload its slot map at least every
// 200ms while it is used. go-redis reloads it on a MOVED reply, but not
// when the master of a slot stops answering (go-redis issue #3979): by
// default a client keeps dialing a dead master until its state is a
// minute old, even after a replica took its slots.
func followSlots(o *redis.ClusterOptions) { o.ClusterStateReloadInterval = 200 * time.Millisecond }

// namesOn returns a lock name whose key the master m serves, and one on
// another master.
func namesOn(t *testing.T, c *redistest.Cluster, m *redistest.Server) (on, off string) {
	t.Helper()
	for i := 0; on == "" || off == ""; i++ {
		if i == 1000 {
			t.Fatalf("no names on and off %s among 1000", m.Addr())
		}
		name := fmt.Sprintf("job-%d", i)
		if c.MasterOf(t, lockKey(name)) == m {
			on = orElse(on, name)
		} else {
			off = orElse(off, name)
		}
	}
	return on, off
}

// orElse returns a if it is set, else b.
func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// A master SIGKILLed under a lease whose hold was replicated, with Lockers
// on go-redis's default ClusterClient: another Locker never acquires the
// key while the holder's lease context is live. Either the holder keeps
// the lease on the promoted replica and the others wait until it is
// released, or it is told to stop (ErrLeaseLost) before another gets in:
// with go-redis v9.23, which keeps dialing a dead master until its slot
// map is a minute old, it is the second (see followSlots). Whoever
// acquires next gets a higher fencing token, and a lease on another master
// is untouched.
func TestClusterFailoverNeverTwoOwners(t *testing.T) {
	const ttl = 5 * time.Second // stop grace 500ms: the holder's margin
	c := redistest.StartReplicatedCluster(t)
	tl := newTimeline(t)
	holder := clusterLocker(t, c, nil, guard.WithTTL(ttl), guard.WithObserver(tl.observer("holder")))
	// The bystander holds a key on another master; the holder's renewals
	// are those of its one lease alone.
	bystander := clusterLocker(t, c, nil, guard.WithTTL(ttl), guard.WithObserver(tl.observer("bystander")))
	rival := clusterLocker(t, c, nil) // created before the failover: its slot map is the old one
	m := c.Nodes()[0]
	name, otherName := namesOn(t, c, m)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	le := mustAcquire(t, ctx, holder, name)
	other := mustAcquire(t, ctx, bystander, otherName)
	held := watchLease(t, tl, "holder", le)
	otherHeld := watchLease(t, tl, "bystander", other)
	c.WaitSynced(t) // the replica has the hold
	if _, err := rival.Acquire(ctx, name, guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("rival before the failover: err = %v, want ErrNotAcquired", err)
	}

	killed := tl.mark("SIGKILL master %s of %s", m.Addr(), name)
	m.Kill(t)
	raceCtx, stopRace := context.WithCancel(ctx)
	defer stopRace()
	rivalGot := acquireUntil(raceCtx, tl, "rival (old slot map)", rival, name)
	promoted := c.WaitFailover(t, lockKey(name), m)
	moved := tl.mark("failover done: %s serves %s", promoted.Addr(), name)
	// A process that starts now sees the new slot map at once.
	late := clusterLocker(t, c, nil)
	lateGot := acquireUntil(raceCtx, tl, "late Locker", late, name)
	kept := renewedAfter(ctx, tl, "holder", moved, held)

	var first acquisition
	var releasedAt time.Time // when the holder began its release, if it kept the lease
	select {
	case first = <-rivalGot:
		defer drain(t, lateGot, stopRace)
	case first = <-lateGot:
		defer drain(t, rivalGot, stopRace)
	case <-kept:
		if _, ended := held.endedBy(time.Now()); !ended {
			// Kept on the promoted replica: the others wait for the release.
			tl.mark("holder kept its lease; releases it")
			releasedAt = time.Now()
			mustRelease(t, le)
		}
		select {
		case first = <-rivalGot:
			defer drain(t, lateGot, stopRace)
		case first = <-lateGot:
			defer drain(t, rivalGot, stopRace)
		}
	}
	if first.err != nil {
		t.Fatalf("after the failover no Locker acquired %s: %v", name, first.err)
	}
	defer mustRelease(t, first.le)
	// An acquisition after the holder began to release is a hand-off: the
	// lease watcher may record the end a moment after the release let the
	// next owner in.
	if endedAt, ok := held.endedBy(first.at); !ok && (releasedAt.IsZero() || !first.at.After(releasedAt)) {
		t.Fatalf("another Locker acquired %s %v after the SIGKILL while the holder's lease was live (ended: %v)",
			name, first.at.Sub(killed), endedAt)
	}
	if cause := context.Cause(le.Context()); !errors.Is(cause, guard.ErrLeaseLost) && !errors.Is(cause, guard.ErrReleased) {
		t.Errorf("holder's lease ended with %v, want ErrLeaseLost (or its release)", cause)
	}
	if first.le.Token() <= le.Token() {
		t.Errorf("token %d after the failover, not above the holder's %d", first.le.Token(), le.Token())
	}
	if _, ok := otherHeld.endedBy(time.Now()); ok {
		t.Fatalf("lease on %s, on a healthy master, ended: %v", otherName, context.Cause(other.Context()))
	}
	mustRelease(t, other)
}

// renewedAfter returns a channel that is closed once the timeline shows a
// renewal round trip of who after since that renewed all its leases, or
// the lease watched by w ends, or ctx is done.
func renewedAfter(ctx context.Context, tl *timeline, who string, since time.Time, w *leaseWatch) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		prefix := who + ": " + renewedAll
		for {
			tl.mu.Lock()
			for _, e := range tl.events {
				if e.at.After(since) && strings.HasPrefix(e.what, prefix) {
					tl.mu.Unlock()
					return
				}
			}
			tl.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-w.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return done
}

// A master SIGKILLed under a replicated hold, with Lockers whose clients
// follow the new slot map (followSlots): the holder keeps its lease, now
// renewed on the promoted replica, and a Locker that was waiting for the
// key since before the SIGKILL, on sharded pub/sub, neither gets in while
// the lease is held nor waits for its fallback timer once it is released:
// its subscription followed the slot to the promoted replica.
func TestClusterFailoverKeepsLeaseAndWakesWaiter(t *testing.T) {
	const ttl = 15 * time.Second // renewed every 5s: a lease lives 8s or more past the SIGKILL
	c := redistest.StartReplicatedCluster(t)
	tl := newTimeline(t)
	holder := clusterLocker(t, c, followSlots, guard.WithTTL(ttl), guard.WithObserver(tl.observer("holder")))
	waiter := clusterLocker(t, c, followSlots, guard.WithTTL(ttl))
	m := c.Nodes()[0]
	name, _ := namesOn(t, c, m)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()

	le := mustAcquire(t, ctx, holder, name)
	held := watchLease(t, tl, "holder", le)
	waited := acquireUntil(ctx, tl, "waiter", waiter, name)
	waitShardSubscribed(t, m.Client(t), 5*time.Second, releasedChannel(name))
	c.WaitSynced(t)

	killed := tl.mark("SIGKILL master %s of %s", m.Addr(), name)
	m.Kill(t)
	promoted := c.WaitFailover(t, lockKey(name), m)
	tl.mark("failover done: %s serves %s", promoted.Addr(), name)
	waitShardSubscribed(t, promoted.Client(t), 10*time.Second, releasedChannel(name))
	tl.mark("waiter subscribed on %s", promoted.Addr())
	// A renewal that lands on the promoted replica proves the lease there.
	renewedAfter := time.Now()
	waitRenewed(t, ctx, tl, "holder", renewedAfter)

	if at, ended := held.endedBy(time.Now()); ended {
		t.Fatalf("holder's lease ended %v after the SIGKILL although the promoted replica had the hold: %v",
			at.Sub(killed), context.Cause(le.Context()))
	}
	select {
	case a := <-waited:
		t.Fatalf("waiter got %s while the holder's lease was live: %v, %v", name, a.le != nil, a.err)
	default:
	}
	released := tl.mark("holder releases %s", name)
	mustRelease(t, le)
	select {
	case a := <-waited:
		if a.err != nil {
			t.Fatalf("waiter: %v", a.err)
		}
		defer mustRelease(t, a.le)
		// Its fallback timer is the holder's remaining TTL, over 5s.
		if d := a.at.Sub(released); d > 4*time.Second {
			t.Errorf("waiter took %s %v after the release: woken by its fallback timer, not the notification", name, d)
		}
		if a.le.Token() <= le.Token() {
			t.Errorf("waiter's token %d not above the holder's %d", a.le.Token(), le.Token())
		}
	case <-ctx.Done():
		t.Fatalf("waiter did not get %s after the release", name)
	}
}

// waitRenewed waits until the timeline shows a renewal round trip of who
// after since that renewed every lease it carried.
func waitRenewed(t *testing.T, ctx context.Context, tl *timeline, who string, since time.Time) time.Time {
	t.Helper()
	prefix := who + ": " + renewedAll
	for {
		tl.mu.Lock()
		for _, e := range tl.events {
			if e.at.After(since) && strings.HasPrefix(e.what, prefix) {
				tl.mu.Unlock()
				return e.at
			}
		}
		tl.mu.Unlock()
		select {
		case <-ctx.Done():
			t.Fatalf("no renewal by %s succeeded after %v", who, since.Sub(tl.zero))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A manual CLUSTER FAILOVER under many leases spread over every master,
// with go-redis's default ClusterClient: the renewal pipelines, one per
// node, that reach the demoted master are answered MOVED, followed to the
// promoted replica, and every lease survives a whole TTL after the
// failover, so each was renewed there; another Locker gets none of the
// keys meanwhile.
func TestClusterManualFailoverRenewsThroughMoved(t *testing.T) {
	const (
		ttl    = 4 * time.Second // renewed every 1.33s
		leases = 60
	)
	c := redistest.StartReplicatedCluster(t)
	tl := newTimeline(t)
	holder := clusterLocker(t, c, nil, guard.WithTTL(ttl), guard.WithObserver(tl.observer("holder")))
	rival := clusterLocker(t, c, nil)
	m := c.Nodes()[0]
	names := make([]string, leases)
	onM := ""
	for i := range names {
		names[i] = fmt.Sprintf("lease-%d", i)
		if onM == "" && c.MasterOf(t, lockKey(names[i])) == m {
			onM = names[i]
		}
	}
	if onM == "" {
		t.Fatalf("none of %d names on %s", leases, m.Addr())
	}
	replica := c.ReplicaOf(t, lockKey(onM))
	ctx := t.Context()
	held := make([]*leaseWatch, leases)
	for i, name := range names {
		held[i] = watchLease(t, tl, "holder", mustAcquire(t, ctx, holder, name))
	}
	c.WaitSynced(t)

	tl.mark("CLUSTER FAILOVER on %s, replica of %s", replica.Addr(), m.Addr())
	if err := replica.Client(t).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER: %v", err)
	}
	c.WaitFailover(t, lockKey(onM), m)
	done := tl.mark("failover done: %s serves the slots of %s", replica.Addr(), m.Addr())
	time.Sleep(ttl) // every lease must be renewed after the failover to live through this

	for i, w := range held {
		if at, ended := w.endedBy(time.Now()); ended {
			t.Errorf("lease on %s ended %v after the manual failover: %v", names[i], at.Sub(done), context.Cause(w.le.Context()))
		}
	}
	for _, name := range names {
		if _, err := rival.Acquire(ctx, name, guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
			t.Fatalf("rival on %s after the failover: err = %v, want ErrNotAcquired", name, err)
		}
	}
	// The renewals did go through the demoted master's redirection.
	stats, err := m.Client(t).Info(ctx, "errorstats").Result()
	if err != nil {
		t.Fatalf("INFO errorstats: %v", err)
	}
	if !strings.Contains(stats, "errorstat_MOVED:count=") {
		t.Errorf("the demoted master answered no MOVED:\n%s", stats)
	}
	for _, w := range held {
		mustRelease(t, w.le)
	}
}

// A master SIGKILLed, failed over, restarted (it comes back as a replica
// at its old address) and given its slots back with CLUSTER FAILOVER: a
// lease held throughout survives both moves, renewed first on the promoted
// replica and then on the restarted process; a rival Locker whose pooled
// connections to the old master died with it reconnects, is refused the
// key while the lease is held, and takes it once it is released.
func TestClusterFailoverAndBackReconnects(t *testing.T) {
	const ttl = 15 * time.Second // a lease lives 8s or more past the SIGKILL
	c := redistest.StartReplicatedCluster(t)
	tl := newTimeline(t)
	holder := clusterLocker(t, c, followSlots, guard.WithTTL(ttl), guard.WithObserver(tl.observer("holder")))
	rival := clusterLocker(t, c, followSlots)
	m := c.Nodes()[0]
	name, _ := namesOn(t, c, m)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	le := mustAcquire(t, ctx, holder, name)
	held := watchLease(t, tl, "holder", le)
	if _, err := rival.Acquire(ctx, name, guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("rival before the failover: err = %v, want ErrNotAcquired", err)
	}
	c.WaitSynced(t)

	tl.mark("SIGKILL master %s of %s", m.Addr(), name)
	m.Kill(t)
	promoted := c.WaitFailover(t, lockKey(name), m)
	moved := tl.mark("failover done: %s serves %s", promoted.Addr(), name)
	waitRenewed(t, ctx, tl, "holder", moved)
	m.Restart(t)
	c.WaitHealthy(t)
	tl.mark("%s restarted, a replica of %s and in sync", m.Addr(), promoted.Addr())
	if err := m.Client(t).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER on the restarted %s: %v", m.Addr(), err)
	}
	c.WaitFailover(t, lockKey(name), promoted)
	back := tl.mark("failback done: %s serves %s again", m.Addr(), name)
	waitRenewed(t, ctx, tl, "holder", back)

	if _, ended := held.endedBy(time.Now()); ended {
		t.Fatalf("holder's lease ended: %v", context.Cause(le.Context()))
	}
	pttl, err := m.Client(t).PTTL(ctx, lockKey(name)).Result()
	if err != nil || pttl <= 0 {
		t.Fatalf("PTTL %s on the restarted %s = %v, %v; want the hold there", lockKey(name), m.Addr(), pttl, err)
	}
	if _, err := rival.Acquire(ctx, name, guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("rival after the failback: err = %v, want ErrNotAcquired", err)
	}
	mustRelease(t, le)
	got, err := rival.Acquire(ctx, name, guard.Wait(0))
	if err != nil {
		t.Fatalf("rival after the release: %v", err)
	}
	if got.Token() <= le.Token() {
		t.Errorf("rival's token %d not above the holder's %d", got.Token(), le.Token())
	}
	mustRelease(t, got)
}

// loseReplication makes sure the next writes on master reach none of its
// replicas before master dies: each replica is stopped (SIGSTOP) and its
// replication link closed on the master's side, so that nothing written
// afterwards is on the wire to it. It returns a func that resumes them; a
// resumed replica finds its link dead and reconnects to master, or, once
// master is killed, takes part in the failover with what it had. Use each
// client once before: a ClusterClient that loads its slot map from the
// stopped replica waits for its read timeout.
func loseReplication(t *testing.T, master *redistest.Server, replicas ...*redistest.Server) (resume func()) {
	t.Helper()
	for _, r := range replicas {
		r.Pause(t)
	}
	if err := master.Client(t).Do(t.Context(), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		for _, r := range replicas {
			r.Resume(t)
		}
		t.Fatalf("CLIENT KILL TYPE replica: %v", err)
	}
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			for _, r := range replicas {
				r.Resume(t)
			}
		}
	}
	t.Cleanup(resume)
	return resume
}

// A master SIGKILLed right after an acquisition that never reached its
// replica: the promoted replica has no hold, so another Locker can get in
// while the first holder still believes it holds the key. That is the
// asynchronous replication window Cluster cannot close (WithReplicaAck is
// refused there). What still holds: the second owner's fencing token is
// higher, and the first holder is told to stop, with ErrLeaseLost, before
// its lease could have ended.
func TestClusterFailoverForgetsUnreplicatedHold(t *testing.T) {
	const ttl = 6 * time.Second
	c := redistest.StartReplicatedCluster(t)
	tl := newTimeline(t)
	holder := clusterLocker(t, c, followSlots, guard.WithTTL(ttl), guard.WithObserver(tl.observer("holder")))
	rival := clusterLocker(t, c, followSlots)
	m := c.Nodes()[0]
	name, _ := namesOn(t, c, m)
	replica := c.ReplicaOf(t, lockKey(name))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	// Warm up: the holder's client loads the slot map and the guard
	// library while every node answers.
	mustRelease(t, mustAcquire(t, ctx, holder, name))
	resume := loseReplication(t, m, replica)
	called := tl.mark("holder acquires %s, its replica stopped and unlinked", name)
	le := mustAcquire(t, ctx, holder, name)
	held := watchLease(t, tl, "holder", le)
	tl.mark("SIGKILL master %s", m.Addr())
	m.Kill(t)
	resume()
	rivalGot := acquireUntil(ctx, tl, "rival", rival, name)
	promoted := c.WaitFailover(t, lockKey(name), m)
	tl.mark("failover done: %s serves %s", promoted.Addr(), name)

	a := <-rivalGot
	if a.err != nil {
		t.Fatalf("rival: %v", a.err)
	}
	defer mustRelease(t, a.le)
	if a.le.Token() <= le.Token() {
		t.Errorf("rival's token %d not above the forgotten holder's %d", a.le.Token(), le.Token())
	}
	// The lease could not end before called + TTL - drift: the acquisition
	// was sent after called.
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
		t.Logf("two owners: the rival held %s for %v before the holder was told to stop", name, lostAt.Sub(a.at).Round(time.Millisecond))
	} else {
		t.Logf("the holder was told to stop %v before the rival got in", a.at.Sub(lostAt).Round(time.Millisecond))
	}
}
