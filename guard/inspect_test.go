package guard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// inspect returns the state of key, failing the test on an error.
func inspect(t *testing.T, l *guard.Locker, key string) guard.LockState {
	t.Helper()
	st, err := l.Inspect(t.Context(), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	if st.Key != key {
		t.Fatalf("Inspect(%q).Key = %q", key, st.Key)
	}
	return st
}

// checkHolder compares the parts of a holder that a test can know exactly,
// and checks that its time left is positive and at most ttl.
func checkHolder(t *testing.T, got guard.Holder, want guard.Holder, ttl time.Duration) {
	t.Helper()
	if got.Identity != want.Identity || got.Write != want.Write || got.Writes != want.Writes ||
		got.Reads != want.Reads || got.Token != want.Token || got.Owner == "" {
		t.Errorf("holder = %+v, want %+v", got, want)
	}
	if got.Left <= 0 || got.Left > ttl {
		t.Errorf("holder %s has %v left; want in (0, %v]", got.Identity, got.Left, ttl)
	}
}

// identityFieldsOwned checks that every identity field of the lock hash
// belongs to an owner that still has a hold there: identities are dropped
// with their holds.
func identityFieldsOwned(t *testing.T, c redis.Cmdable, key string) {
	t.Helper()
	h, err := c.HGetAll(t.Context(), lockKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for f := range h {
		if o, ok := strings.CutSuffix(f, ":i"); ok {
			if _, held := h[o+":t"]; !held {
				t.Errorf("identity %q of %s outlived its hold: %v", h[f], o, h)
			}
		}
	}
}

func TestInspectWriteHold(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv.Addr(), guard.WithIdentity("worker-a/17"), guard.WithTTL(10*time.Second))
	le := mustAcquire(t, t.Context(), l, "report")
	defer mustRelease(t, le)

	st := inspect(t, l, "report")
	if len(st.Holders) != 1 || len(st.Waiters) != 0 {
		t.Fatalf("state = %+v; want one holder, no waiters", st)
	}
	checkHolder(t, st.Holders[0], guard.Holder{Identity: "worker-a/17", Write: true, Writes: 1, Token: le.Token()}, 10*time.Second)
	if st.Holders[0].MinHold != 0 || st.Holders[0].Lingering() {
		t.Errorf("holder = %+v; want no MinHold, not lingering", st.Holders[0])
	}
	if st.Fence != le.Token() {
		t.Errorf("Fence = %d, want the last token %d", st.Fence, le.Token())
	}
}

func TestInspectDefaultIdentity(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv.Addr())
	le := mustAcquire(t, t.Context(), l, "who")
	defer mustRelease(t, le)
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host" // what WithIdentity's default falls back to
	}
	want := fmt.Sprintf("%s/%d", host, os.Getpid())
	if st := inspect(t, l, "who"); len(st.Holders) != 1 || st.Holders[0].Identity != want {
		t.Fatalf("holders = %+v; want identity %q", st.Holders, want)
	}
}

func TestInspectReaders(t *testing.T) {
	srv := redistest.Start(t)
	var leases []*guard.Lease
	for i := range 3 {
		l := newLocker(t, srv.Addr(), guard.WithIdentity(fmt.Sprintf("reader %d", i)), guard.WithTTL(10*time.Second))
		le, err := l.AcquireRead(t.Context(), "catalog", guard.Wait(0))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, le)
	}
	st := inspect(t, newLocker(t, srv.Addr()), "catalog")
	if len(st.Holders) != 3 {
		t.Fatalf("holders = %+v; want 3 readers", st.Holders)
	}
	for i, h := range st.Holders { // oldest token first
		checkHolder(t, h, guard.Holder{Identity: fmt.Sprintf("reader %d", i), Reads: 1, Token: leases[i].Token()}, 10*time.Second)
	}
	if st.Fence != leases[2].Token() {
		t.Errorf("Fence = %d, want %d", st.Fence, leases[2].Token())
	}

	// A reader that leaves takes its identity with it.
	mustRelease(t, leases[1])
	st = inspect(t, newLocker(t, srv.Addr()), "catalog")
	if len(st.Holders) != 2 || st.Holders[0].Identity != "reader 0" || st.Holders[1].Identity != "reader 2" {
		t.Fatalf("holders after one left = %+v", st.Holders)
	}
	identityFieldsOwned(t, srv.Client(t), "catalog")
	mustRelease(t, leases[0])
	mustRelease(t, leases[2])
}

// Redis counts a hold as one lease of its mode; its re-entries are counted
// in its process. A write hold shows one write lease however often it was
// re-entered, also as a reader, until its last write lease ends: then it
// shows one read lease.
func TestInspectReentered(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv.Addr(), guard.WithIdentity("nested"), guard.WithTTL(10*time.Second))
	outer := mustAcquire(t, t.Context(), l, "nest")
	inner := mustAcquire(t, outer.Context(), l, "nest")
	read, err := l.AcquireRead(inner.Context(), "nest") // a downgrade
	if err != nil {
		t.Fatal(err)
	}
	st := inspect(t, l, "nest")
	if len(st.Holders) != 1 {
		t.Fatalf("holders = %+v; want one hold", st.Holders)
	}
	checkHolder(t, st.Holders[0], guard.Holder{Identity: "nested", Write: true, Writes: 1, Reads: 0, Token: outer.Token()}, 10*time.Second)
	mustRelease(t, inner)
	mustRelease(t, outer)
	if st := inspect(t, l, "nest"); len(st.Holders) != 1 {
		t.Fatalf("after the write leases: %+v; want one hold", st.Holders)
	} else {
		checkHolder(t, st.Holders[0], guard.Holder{Identity: "nested", Write: false, Writes: 0, Reads: 1, Token: outer.Token()}, 10*time.Second)
	}
	mustRelease(t, read)
	if st := inspect(t, l, "nest"); len(st.Holders) != 0 || st.Fence != outer.Token() {
		t.Fatalf("after the last release: %+v; want free, fence %d", st, outer.Token())
	}
}

func TestInspectMinHoldLingering(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv.Addr(), guard.WithIdentity("short job"), guard.WithTTL(10*time.Second))
	le := mustAcquire(t, t.Context(), l, "nightly", guard.MinHold(20*time.Second))
	if h := inspect(t, l, "nightly").Holders; len(h) != 1 || h[0].MinHold <= 15*time.Second || h[0].Lingering() {
		t.Fatalf("held: %+v; want a MinHold of about 20s", h)
	}
	mustRelease(t, le)
	st := inspect(t, l, "nightly")
	if len(st.Holders) != 1 {
		t.Fatalf("holders after release = %+v; want the hold kept for MinHold", st.Holders)
	}
	h := st.Holders[0]
	if !h.Lingering() || !h.Write || h.Identity != "short job" || h.Token != le.Token() {
		t.Errorf("holder = %+v; want a lingering write hold of %q", h, "short job")
	}
	if h.MinHold <= 15*time.Second || h.MinHold > 20*time.Second || h.Left != h.MinHold {
		t.Errorf("MinHold %v, Left %v; want both the ~20s until MinHold ends", h.MinHold, h.Left)
	}
}

// A reader that stopped renewing (its Locker gave up on it) keeps its fields
// in the hash until a script sweeps them; Inspect leaves it out as soon as
// its expiry has passed.
func TestInspectExpiredNotSwept(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	live := newLocker(t, srv.Addr(), guard.WithIdentity("live"), guard.WithTTL(10*time.Second))
	keep, err := live.AcquireRead(t.Context(), "shared", guard.Wait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer mustRelease(t, keep)

	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	gone, err := guard.New(client, guard.WithIdentity("gone"), guard.WithTTL(300*time.Millisecond), guard.WithCloseTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gone.AcquireRead(t.Context(), "shared", guard.Wait(0)); err != nil {
		t.Fatal(err)
	}
	st := inspect(t, live, "shared")
	if len(st.Holders) != 2 {
		t.Fatalf("holders = %+v; want two readers", st.Holders)
	}
	owner := st.Holders[1].Owner
	_ = gone.Close() // stops renewing the read lease and leaves it to expire

	deadline := time.Now().Add(5 * time.Second)
	for {
		st = inspect(t, live, "shared")
		if len(st.Holders) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(st.Holders) != 1 || st.Holders[0].Identity != "live" {
		t.Fatalf("holders = %+v; want only the live reader", st.Holders)
	}
	if n, err := c.HExists(t.Context(), lockKey("shared"), owner+":t").Result(); err != nil || !n {
		t.Fatalf("the expired reader's fields were swept already (%v): the test proves nothing", err)
	}
}

func TestInspectWaitersAndGrant(t *testing.T) {
	srv := redistest.Start(t)
	holder := newLocker(t, srv.Addr(), guard.WithIdentity("holder"), guard.WithTTL(10*time.Second))
	waiter := newLocker(t, srv.Addr(), guard.WithIdentity("worker b/42 (blue)"), guard.WithTTL(10*time.Second))
	le := mustAcquire(t, t.Context(), holder, "queue")

	got := make(chan *guard.Lease, 1)
	go func() {
		w, err := waiter.Acquire(t.Context(), "queue", guard.Wait(20*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	var st guard.LockState
	deadline := time.Now().Add(10 * time.Second)
	for len(st.Waiters) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		st = inspect(t, holder, "queue")
	}
	if len(st.Waiters) != 1 {
		t.Fatalf("waiters = %+v; want the waiting writer", st.Waiters)
	}
	w := st.Waiters[0]
	if w.Identity != "worker b/42 (blue)" || !w.Write || w.Locker == "" || w.Owner == "" || w.Left <= 0 || w.Left > 20*time.Second {
		t.Errorf("waiter = %+v", w)
	}

	mustRelease(t, le) // grants the key to the waiter (set_counts.lua)
	granted := <-got
	if granted == nil {
		t.FailNow()
	}
	defer mustRelease(t, granted)
	st = inspect(t, holder, "queue")
	if len(st.Holders) != 1 || len(st.Waiters) != 0 {
		t.Fatalf("state after the grant = %+v; want the grantee alone", st)
	}
	checkHolder(t, st.Holders[0], guard.Holder{Identity: "worker b/42 (blue)", Write: true, Writes: 1, Token: granted.Token()}, 10*time.Second)
	if st.Holders[0].Owner != w.Owner || granted.Token() <= le.Token() {
		t.Errorf("granted hold %+v, token %d after %d; want the waiter's owner %s and a higher token", st.Holders[0], granted.Token(), le.Token(), w.Owner)
	}
	identityFieldsOwned(t, srv.Client(t), "queue")
}

func TestInspectFreeKey(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv.Addr())
	if st := inspect(t, l, "never"); len(st.Holders) != 0 || len(st.Waiters) != 0 || st.Fence != 0 {
		t.Fatalf("never acquired: %+v; want the zero state", st)
	}
	le := mustAcquire(t, t.Context(), l, "was")
	mustRelease(t, le)
	if st := inspect(t, l, "was"); len(st.Holders) != 0 || st.Fence != le.Token() {
		t.Fatalf("released: %+v; want no holders and fence %d", st, le.Token())
	}
}

func TestInspectWrongType(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l := newLocker(t, srv.Addr())
	for _, tc := range []struct {
		name string
		set  func(key string) error
	}{
		{"lock", func(k string) error { return c.Set(t.Context(), lockKey(k), "x", 0).Err() }},
		{"fence", func(k string) error { return c.LPush(t.Context(), lockKey(k)+":fence", "x").Err() }},
		{"fence-not-digits", func(k string) error { return c.Set(t.Context(), lockKey(k)+":fence", "inf", 0).Err() }},
		{"waiters", func(k string) error { return c.Set(t.Context(), lockKey(k)+":waiters", "x", 0).Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.set(tc.name); err != nil {
				t.Fatal(err)
			}
			_, err := l.Inspect(t.Context(), tc.name)
			if !errors.Is(err, guard.ErrWrongType) {
				t.Fatalf("Inspect = %v; want ErrWrongType", err)
			}
			if _, err := l.ForceRelease(t.Context(), tc.name); !errors.Is(err, guard.ErrWrongType) {
				t.Fatalf("ForceRelease = %v; want ErrWrongType", err)
			}
		})
	}
}

func TestInspectBadInput(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	l, err := guard.New(client)
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := l.Inspect(nil, "k"); !errors.Is(err, guard.ErrInvalid) {
		t.Errorf("nil ctx: %v", err)
	}
	for _, key := range []string{"", "a}b"} {
		if _, err := l.Inspect(t.Context(), key); !errors.Is(err, guard.ErrInvalid) {
			t.Errorf("Inspect(%q): %v; want ErrInvalid", key, err)
		}
		if _, err := l.ForceRelease(t.Context(), key); !errors.Is(err, guard.ErrInvalid) {
			t.Errorf("ForceRelease(%q): %v; want ErrInvalid", key, err)
		}
	}
	if err := l.Scan(t.Context(), "a}", func(guard.LockState) error { return nil }); !errors.Is(err, guard.ErrInvalid) {
		t.Errorf("Scan with '}': %v; want ErrInvalid", err)
	}
	if err := l.Scan(t.Context(), "*", nil); !errors.Is(err, guard.ErrInvalid) {
		t.Errorf("Scan with nil fn: %v; want ErrInvalid", err)
	}
	_ = l.Close()
	if _, err := l.Inspect(t.Context(), "k"); !errors.Is(err, guard.ErrClosed) {
		t.Errorf("after Close: %v; want ErrClosed", err)
	}
}

// ForceRelease ends the hold under a running job: the job's context is
// canceled with ErrLeaseLost at the holder's next renewal, the waiter gets
// the key, and the fencing counter goes on from where it was.
func TestForceRelease(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	holder := newLocker(t, srv.Addr(), guard.WithIdentity("stuck"), guard.WithTTL(time.Second))
	waiter := newLocker(t, srv.Addr(), guard.WithIdentity("next"), guard.WithTTL(10*time.Second))
	operator := newLocker(t, srv.Addr(), guard.WithIdentity("operator"))

	started := make(chan int64)
	jobErr := make(chan error, 1)
	go func() {
		jobErr <- holder.WithLock(context.Background(), "stuck-job", func(ctx context.Context) error {
			token, _ := guard.TokenFrom(ctx, "stuck-job")
			started <- token
			<-ctx.Done() // a job that runs until it is told to stop
			return context.Cause(ctx)
		})
	}()
	token := <-started
	fenceBefore, err := c.Get(t.Context(), lockKey("stuck-job")+":fence").Int64()
	if err != nil {
		t.Fatal(err)
	}

	got := make(chan *guard.Lease, 1)
	go func() {
		le, err := waiter.Acquire(t.Context(), "stuck-job", guard.Wait(30*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- le
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(inspect(t, operator, "stuck-job").Waiters) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never registered")
		}
		time.Sleep(10 * time.Millisecond)
	}

	released, err := operator.ForceRelease(t.Context(), "stuck-job")
	if err != nil {
		t.Fatal(err)
	}
	if len(released.Holders) != 1 || released.Holders[0].Identity != "stuck" || released.Holders[0].Token != token ||
		len(released.Waiters) != 1 || released.Waiters[0].Identity != "next" || released.Fence != fenceBefore {
		t.Fatalf("released %+v; want the stuck holder (token %d), the waiter, fence %d", released, token, fenceBefore)
	}
	if fence, err := c.Get(t.Context(), lockKey("stuck-job")+":fence").Int64(); err != nil || fence < fenceBefore {
		t.Fatalf("fence after ForceRelease = %d, %v; want it left at %d or above", fence, err, fenceBefore)
	}

	// The holder's next renewal (every TTL/3) finds its hold gone.
	select {
	case err := <-jobErr:
		if !errors.Is(err, guard.ErrLeaseLost) {
			t.Fatalf("WithLock = %v; want ErrLeaseLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the job was not told its lease was lost")
	}
	next := <-got
	if next == nil {
		t.FailNow()
	}
	defer mustRelease(t, next)
	if next.Token() <= token {
		t.Fatalf("token after ForceRelease %d <= the released hold's %d", next.Token(), token)
	}

	if st, err := operator.ForceRelease(t.Context(), "never-held"); err != nil || len(st.Holders) != 0 || st.Key != "never-held" {
		t.Fatalf("ForceRelease of a free key = %+v, %v; want an empty state", st, err)
	}
}

func TestScan(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l := newLocker(t, srv.Addr(), guard.WithIdentity("scanner"), guard.WithTTL(10*time.Second))
	var leases []*guard.Lease
	for _, name := range []string{"job-a", "job-b", "report:daily", "we*ird[1]"} {
		leases = append(leases, mustAcquire(t, t.Context(), l, name))
	}
	r, err := l.AcquireRead(t.Context(), "job-read")
	if err != nil {
		t.Fatal(err)
	}
	leases = append(leases, r)
	mustRelease(t, mustAcquire(t, t.Context(), l, "job-free")) // leaves a counter only
	if _, err := l.Claim(t.Context(), "job-claimed", []byte("x"), time.Minute); err != nil {
		t.Fatal(err)
	}
	// Keys under the prefix that are not locks.
	for _, k := range []string{"guard:{job-x}:extra", "guard:job-nobrace", "other:{job-c}", "guard:{}"} {
		if err := c.HSet(t.Context(), k, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Set(t.Context(), "guard:{job-string}", "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// A different prefix with glob characters of its own.
	other := newLocker(t, srv.Addr(), guard.WithPrefix("team[1]*:"))
	defer mustRelease(t, mustAcquire(t, t.Context(), other, "job-z"))

	scan := func(l *guard.Locker, match string) []string {
		t.Helper()
		var names []string
		err := l.Scan(t.Context(), match, func(st guard.LockState) error {
			if len(st.Holders) == 0 {
				t.Errorf("Scan gave %q with no holders", st.Key)
			}
			names = append(names, st.Key)
			return nil
		})
		if err != nil {
			t.Fatalf("Scan(%q): %v", match, err)
		}
		slices.Sort(names)
		return names
	}
	for _, tc := range []struct {
		match string
		want  []string
	}{
		{"*", []string{"job-a", "job-b", "job-read", "report:daily", "we*ird[1]"}},
		{"", []string{"job-a", "job-b", "job-read", "report:daily", "we*ird[1]"}},
		{"job-*", []string{"job-a", "job-b", "job-read"}},
		{"report:*", []string{"report:daily"}},
		{"nothing*", nil},
	} {
		if got := scan(l, tc.match); !slices.Equal(got, tc.want) {
			t.Errorf("Scan(%q) = %q, want %q", tc.match, got, tc.want)
		}
	}
	if got := scan(other, "*"); !slices.Equal(got, []string{"job-z"}) {
		t.Errorf("Scan under prefix %q = %q", "team[1]*:", got)
	}

	stop := errors.New("stop")
	calls := 0
	if err := l.Scan(t.Context(), "*", func(guard.LockState) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Errorf("Scan with fn failing = %v after %d calls; want fn's error after 1", err, calls)
	}
	for _, le := range leases {
		mustRelease(t, le)
	}
}

// A walk over more keys than one SCAN page sees each lock once.
func TestScanPages(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l := newLocker(t, srv.Addr())
	const n = 350
	pipe := c.Pipeline()
	for i := range n {
		// What acquire.lua writes for a lone write holder.
		k := lockKey(fmt.Sprintf("bulk-%03d", i))
		pipe.HSet(t.Context(), k, "o:t", i+1, "writer", "o", "o", 1, "o:i", "bulk")
		pipe.PExpire(t.Context(), k, time.Minute)
		pipe.Set(t.Context(), k+":fence", i+1, 0)
	}
	if _, err := pipe.Exec(t.Context()); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	err := l.Scan(t.Context(), "bulk-*", func(st guard.LockState) error {
		seen[st.Key]++
		if len(st.Holders) != 1 || st.Holders[0].Identity != "bulk" {
			t.Errorf("%s: %+v", st.Key, st.Holders)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("Scan saw %d locks, want %d", len(seen), n)
	}
	for k, times := range seen {
		if times != 1 {
			t.Errorf("%s seen %d times", k, times)
		}
	}
}

func TestInspectCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	holder, cc := newClusterLocker(t, cl, guard.WithIdentity("cluster-holder"), guard.WithTTL(10*time.Second))
	waiter, _ := newClusterLocker(t, cl, guard.WithIdentity("cluster-waiter"), guard.WithTTL(10*time.Second))

	// Keys on every master.
	masters := map[string]bool{}
	var names []string
	for i := 0; len(masters) < 3 && i < 1000; i++ {
		name := fmt.Sprintf("c-%d", i)
		m, err := cc.MasterForKey(t.Context(), lockKey(name))
		if err != nil {
			t.Fatal(err)
		}
		if addr := m.Options().Addr; !masters[addr] {
			masters[addr] = true
			names = append(names, name)
		}
	}
	if len(masters) != 3 {
		t.Fatalf("keys found on %d masters", len(masters))
	}
	var leases []*guard.Lease
	for _, name := range names {
		leases = append(leases, mustAcquire(t, t.Context(), holder, name))
	}
	for i, name := range names {
		st := inspect(t, waiter, name)
		if len(st.Holders) != 1 {
			t.Fatalf("%s: %+v", name, st)
		}
		checkHolder(t, st.Holders[0], guard.Holder{Identity: "cluster-holder", Write: true, Writes: 1, Token: leases[i].Token()}, 10*time.Second)
	}
	var scanned []string
	if err := waiter.Scan(t.Context(), "c-*", func(st guard.LockState) error {
		scanned = append(scanned, st.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(scanned)
	want := slices.Sorted(slices.Values(names))
	if !slices.Equal(scanned, want) {
		t.Fatalf("Scan on Cluster = %q, want %q (one per master)", scanned, want)
	}

	// ForceRelease wakes a waiter on sharded pub/sub.
	got := make(chan *guard.Lease, 1)
	go func() {
		le, err := waiter.Acquire(t.Context(), names[0], guard.Wait(30*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- le
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(inspect(t, holder, names[0]).Waiters) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never registered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	released, err := holder.ForceRelease(t.Context(), names[0])
	if err != nil || len(released.Holders) != 1 || len(released.Waiters) != 1 {
		t.Fatalf("ForceRelease = %+v, %v", released, err)
	}
	le := <-got
	if le == nil {
		t.FailNow()
	}
	// Woken by the message, not by its fallback timer (the holder's 10s TTL).
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("the waiter took %v to get the key", waited)
	}
	if le.Token() <= leases[0].Token() {
		t.Errorf("token %d after a force release of %d", le.Token(), leases[0].Token())
	}
	mustRelease(t, le)
	<-leases[0].Context().Done()
	if !errors.Is(context.Cause(leases[0].Context()), guard.ErrLeaseLost) {
		t.Errorf("the released holder's cause: %v", context.Cause(leases[0].Context()))
	}
	for _, le := range leases[1:] {
		mustRelease(t, le)
	}
}
