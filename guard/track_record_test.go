package guard_test

// Regression tests for rows of docs/track-record.md whose fixes went in
// without one. Each fails when its fix is taken out of today's code (the
// lines that do what the fix did, where the code has moved since).

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A server that refuses FUNCTION LOAD for now (a replica answers READONLY
// until a failover promotes it) must not turn functions off for good: once
// it is a master, the Locker loads its library and calls it (7937fb2).
func TestFunctionLoadReadOnlyIsTriedAgain(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	client := replica.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	l, err := guard.New(client, guard.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if le, err := l.Acquire(t.Context(), "readonly", guard.Wait(0)); err == nil {
		mustRelease(t, le)
		t.Fatal("Acquire on a replica succeeded; want READONLY")
	} else if !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("Acquire on a replica: %v, want READONLY", err)
	}
	admin := replica.Client(t)
	if err := admin.ReplicaOf(t.Context(), "NO", "ONE").Err(); err != nil {
		t.Fatalf("promote: %v", err)
	}
	mustRelease(t, mustAcquire(t, t.Context(), l, "readonly", guard.Wait(0)))
	libs, err := admin.FunctionList(t.Context(), redis.FunctionListQuery{}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) == 0 {
		t.Fatal("no function library on the promoted server: a READONLY answer to FUNCTION LOAD turned functions off for good")
	}
}

// gatedHandler blocks the first record that contains msg until open is
// closed, and says on entered that it got there.
type gatedHandler struct {
	msg     string
	once    *sync.Once
	entered chan struct{}
	open    chan struct{}
}

func (h gatedHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h gatedHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h gatedHandler) WithGroup(string) slog.Handler            { return h }

func (h gatedHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.msg) {
		first := false
		h.once.Do(func() { first = true; close(h.entered) })
		if first {
			<-h.open
		}
	}
	return nil
}

// When Close times out, it ends every abandoned lease before it logs any:
// a log handler stuck on the first report must not keep the other leases'
// jobs from seeing the loss (228bdd1).
func TestCloseEndsEveryAbandonedLeaseBeforeLogging(t *testing.T) {
	srv := redistest.Start(t)
	h := gatedHandler{msg: "Close timed out", once: new(sync.Once), entered: make(chan struct{}), open: make(chan struct{})}
	client := srv.Client(t)
	l, err := guard.New(client, guard.WithTTL(5*time.Second), guard.WithCloseTimeout(100*time.Millisecond), guard.WithLogger(slog.New(h)))
	if err != nil {
		t.Fatal(err)
	}
	leases := []*guard.Lease{
		mustAcquire(t, t.Context(), l, "abandoned-1"),
		mustAcquire(t, t.Context(), l, "abandoned-2"),
		mustAcquire(t, t.Context(), l, "abandoned-3"),
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = l.Close()
	}()
	defer func() { <-closed }()
	defer close(h.open)
	select {
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Close logged no abandoned lease within 10s")
	}
	// The handler holds the first report: every lease is already over.
	for _, le := range leases {
		if cause := context.Cause(le.Context()); !errors.Is(cause, guard.ErrLeaseLost) {
			t.Errorf("%s: cause %v while Close logs the first abandoned lease, want ErrLeaseLost", le.Key(), cause)
		}
	}
}

// A WithLock job that returns while Close is giving up on it: its release
// applies in Redis after Close abandoned the hold. No other owner got in,
// so the run is clean, not a lost lease (0dd5cc8).
func TestReleaseAppliedWhileCloseGivesUpIsNotALoss(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	defer client.Close()
	// The request timeout leaves room to dial a connection through the
	// latency (three round trips) and send the release.
	l, err := guard.New(client, guard.WithTTL(10*time.Second), guard.WithRequestTimeout(5*time.Second), guard.WithCloseTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- l.WithLock(context.Background(), "release-in-flight", func(ctx context.Context) error {
			close(started)
			<-ctx.Done() // Close asks the job to stop
			// The release's answer comes back 800ms later at the
			// earliest, after Close gave up at 300ms; the release
			// applies, since the key is still ours in Redis.
			proxy.SetLatency(400 * time.Millisecond)
			return nil
		})
	}()
	<-started
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("WithLock did not return within 10s of Close")
	}
	if runErr != nil {
		t.Errorf("WithLock = %v, want nil: its release applied while the key was still its own", runErr)
	}
	other := newLocker(t, srv.Addr())
	mustRelease(t, mustAcquire(t, t.Context(), other, "release-in-flight", guard.Wait(0)))
}

// A lease that Close gave up on is over, but its key is still the
// Locker's in Redis: its Release during Close frees it for the next owner
// rather than leave it for a TTL (0dd5cc8). Close is held in its report of
// the abandoned lease, so the Release comes while Close still runs.
func TestReleaseDuringCloseFreesAbandonedKey(t *testing.T) {
	srv := redistest.Start(t)
	h := gatedHandler{msg: "Close timed out", once: new(sync.Once), entered: make(chan struct{}), open: make(chan struct{})}
	client := srv.Client(t)
	l, err := guard.New(client, guard.WithTTL(10*time.Second), guard.WithCloseTimeout(100*time.Millisecond), guard.WithLogger(slog.New(h)))
	if err != nil {
		t.Fatal(err)
	}
	le := mustAcquire(t, t.Context(), l, "abandoned")
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = l.Close()
	}()
	defer func() { <-closed }()
	defer close(h.open)
	select {
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Close logged no abandoned lease within 10s")
	}
	if cause := context.Cause(le.Context()); !errors.Is(cause, guard.ErrLeaseLost) {
		t.Fatalf("cause after Close gave up = %v, want ErrLeaseLost", cause)
	}
	if err := le.Release(t.Context()); !errors.Is(err, guard.ErrNotHeld) {
		t.Errorf("Release of an abandoned lease = %v, want ErrNotHeld", err)
	}
	other := newLocker(t, srv.Addr())
	mustRelease(t, mustAcquire(t, t.Context(), other, "abandoned", guard.Wait(0)))
}

// An acquisition whose reply is lost (a read timeout) may still have taken
// the key in Redis. The Locker drops that hold, so the next owner gets the
// key at once rather than after its TTL (a6f8dfe).
func TestAcquireWithLostReplyLeavesNoHold(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ReadTimeout: 800 * time.Millisecond})
	defer client.Close()
	l, err := guard.New(client, guard.WithTTL(10*time.Second), guard.WithRequestTimeout(2*time.Second)) // the read times out first
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mustRelease(t, mustAcquire(t, t.Context(), l, "warm-up")) // loads the scripts
	proxy.SetLatency(500 * time.Millisecond)                  // the script runs at 500ms; its reply would come at 1s
	le, err := l.Acquire(t.Context(), "lost-reply", guard.Wait(0))
	proxy.SetLatency(0)
	if err == nil {
		mustRelease(t, le)
		t.Fatal("Acquire succeeded; want its reply lost to the read timeout")
	}
	t.Logf("Acquire with its reply lost: %v", err)
	admin := srv.Client(t)
	if n, err := admin.Exists(t.Context(), "guard:{lost-reply}:fence").Result(); err != nil || n != 1 {
		t.Fatalf("fencing counter: %d, %v; want the acquisition to have run in Redis", n, err)
	}
	other := newLocker(t, srv.Addr())
	deadline := time.Now().Add(3 * time.Second) // well short of the 10s TTL
	for {
		le, err := other.Acquire(t.Context(), "lost-reply", guard.Wait(0))
		if err == nil {
			mustRelease(t, le)
			return
		}
		if !errors.Is(err, guard.ErrNotAcquired) || time.Now().After(deadline) {
			t.Fatalf("next owner's Acquire: %v; the lost reply's hold was left for its TTL", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A final release whose first tries are lost (a partition) and whose retry
// reaches Redis only after the hold expired there must report the key as
// not held: the answer is about the expiry, not an earlier try of its own.
// Before 1479828 a release begun before the lease's safe end took any "not
// held" for its own doing and reported a clean release. (Since 72d3a21 a
// release marker, not timing, tells the two apart.)
func TestReleaseRetriedPastExpiryIsNotClean(t *testing.T) {
	const ttl = 5 * time.Second
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer client.Close()
	// No stop grace: the job may run to the lease's safe end (~4.95s);
	// the release retries for 2.4s, past the expiry in Redis (5s).
	l, err := guard.New(client, guard.WithTTL(ttl), guard.WithRenewInterval(2500*time.Millisecond),
		guard.WithRequestTimeout(2400*time.Millisecond), guard.WithStopGrace(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	le := mustAcquire(t, t.Context(), l, "retried-release", guard.Wait(0))
	proxy.Blackhole(true) // no renewal gets through
	time.Sleep(time.Until(start.Add(4 * time.Second)))
	if cause := context.Cause(le.Context()); cause != nil {
		t.Fatalf("lease over before its safe end: %v", cause)
	}
	released := make(chan error, 1)
	go func() { released <- le.Release(context.Background()) }()
	admin := srv.Client(t)
	for {
		n, err := admin.Exists(t.Context(), "guard:{retried-release}").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Since(start) > 2*ttl {
			t.Fatalf("key still in Redis %v after its acquisition", time.Since(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
	proxy.Blackhole(false) // the next retry of the release gets through
	select {
	case err := <-released:
		t.Logf("Release: %v", err)
		if !errors.Is(err, guard.ErrNotHeld) {
			t.Fatalf("Release answered after the key expired in Redis = %v, want ErrNotHeld", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Release did not return within 10s")
	}
}
