package guard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Permits meet WithIdentity and Inspect: each permit holder is a write hold
// with its identity, the state names the key's number of permits, a permit
// waiter ('g2' in the queue) is listed with its identity, and the permit a
// release grants it carries that identity.
func TestInspectPermits(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	two := guard.Permits(2)
	a := newLocker(t, srv.Addr(), guard.WithIdentity("worker a/1"), guard.WithTTL(10*time.Second))
	b := newLocker(t, srv.Addr(), guard.WithIdentity("worker b/2"), guard.WithTTL(10*time.Second))
	w := newLocker(t, srv.Addr(), guard.WithIdentity("waiter c/3 (blue)"), guard.WithTTL(10*time.Second))

	st := inspect(t, a, "api")
	if st.Permits != 0 || len(st.Holders) != 0 {
		t.Fatalf("free key: %+v; want no holders, Permits 0", st)
	}
	ha := mustAcquire(t, t.Context(), a, "api", two)
	st = inspect(t, a, "api")
	if st.Permits != 2 || len(st.Holders) != 1 {
		t.Fatalf("one permit taken: %+v; want one holder, Permits 2", st)
	}
	checkHolder(t, st.Holders[0], guard.Holder{Identity: "worker a/1", Write: true, Writes: 1, Token: ha.Token()}, 10*time.Second)
	hb := mustAcquire(t, t.Context(), b, "api", two)
	st = inspect(t, a, "api")
	if st.Permits != 2 || len(st.Holders) != 2 {
		t.Fatalf("two permits taken: %+v; want two holders, Permits 2", st)
	}
	checkHolder(t, st.Holders[0], guard.Holder{Identity: "worker a/1", Write: true, Writes: 1, Token: ha.Token()}, 10*time.Second)
	checkHolder(t, st.Holders[1], guard.Holder{Identity: "worker b/2", Write: true, Writes: 1, Token: hb.Token()}, 10*time.Second)

	got := acquireAsync(t.Context(), w, "api", two, guard.Wait(20*time.Second))
	waitQueued(t, c, "api", 1)
	queue, err := c.ZRange(t.Context(), lockKey("api")+":waiters", 0, -1).Result()
	if err != nil || len(queue) != 1 || !strings.Contains(queue[0], " g2 ") || !strings.HasSuffix(queue[0], " waiter c/3 (blue)") {
		t.Fatalf("queue = %q, %v; want one 'g2' registration ending in the identity", queue, err)
	}
	st = inspect(t, a, "api")
	if len(st.Waiters) != 1 {
		t.Fatalf("waiters = %+v; want the permit waiter", st.Waiters)
	}
	if wt := st.Waiters[0]; wt.Identity != "waiter c/3 (blue)" || !wt.Write || wt.Locker == "" || wt.Owner == "" {
		t.Errorf("waiter = %+v", wt)
	}
	owner := st.Waiters[0].Owner

	mustRelease(t, ha) // grants the freed permit to the waiter (set_counts.lua)
	r := receive(t, got, 5*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer mustRelease(t, r.le)
	defer mustRelease(t, hb)
	if r.le.Token() <= hb.Token() {
		t.Errorf("granted token %d not above %d", r.le.Token(), hb.Token())
	}
	st = inspect(t, a, "api")
	if st.Permits != 2 || len(st.Holders) != 2 || len(st.Waiters) != 0 {
		t.Fatalf("after the grant: %+v; want two holders, no waiters", st)
	}
	checkHolder(t, st.Holders[1], guard.Holder{Identity: "waiter c/3 (blue)", Write: true, Writes: 1, Token: r.le.Token()}, 10*time.Second)
	if st.Holders[1].Owner != owner {
		t.Errorf("grantee %s, want the waiter's owner %s", st.Holders[1].Owner, owner)
	}
	identityFieldsOwned(t, c, "api")
}

// A permit released while another is held drops its identity with it, and
// a key whose last permit is released leaves nothing behind.
func TestPermitIdentityDroppedWithHold(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l := newLocker(t, srv.Addr(), guard.WithIdentity("w"))
	three := guard.Permits(3)
	var les []*guard.Lease
	for range 3 {
		les = append(les, mustAcquire(t, t.Context(), l, "ids", three, guard.MinHold(0)))
	}
	for _, le := range les {
		mustRelease(t, le)
		identityFieldsOwned(t, c, "ids")
	}
	if n, _ := c.Exists(t.Context(), lockKey("ids")).Result(); n != 0 {
		h, _ := c.HGetAll(t.Context(), lockKey("ids")).Result()
		t.Fatalf("lock hash left behind: %v", h)
	}
}

// acquire.lua called directly: identity is ARGV[5], permits ARGV[8]; a busy
// permit answer carries the newest token minted (the grant-age rule), and a
// permit's HSET records the identity.
func TestAcquireScriptPermitArgs(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	script := redis.NewScript(readScript(t, "prelude.lua") + readScript(t, "acquire.lua"))
	keys := []string{"guard:{argv}", "guard:{argv}:fence", "guard:{argv}:waiters"}
	run := func(owner string) []int64 {
		t.Helper()
		v, err := script.Run(t.Context(), client, keys, owner, 10000, "w", "", "id "+owner, 0, 0, 2).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	first, second := run("OWNERA"), run("OWNERB")
	if first[0] != 1 || second[0] != 1 || second[1] <= first[1] {
		t.Fatalf("first %v, second %v: want two permits", first, second)
	}
	busy := run("OWNERC")
	if len(busy) != 3 || busy[0] != 0 || busy[1] <= 0 || busy[2] != second[1] {
		t.Fatalf("third = %v; want {0, ms > 0, newest token %d}", busy, second[1])
	}
	h, err := client.HGetAll(t.Context(), keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if h["OWNERA:i"] != "id OWNERA" || h["OWNERB:i"] != "id OWNERB" || h["permits"] != "2" {
		t.Fatalf("hash = %v; want both identities and permits 2", h)
	}
	// A plain acquisition (ARGV[8] absent) is refused: holders hold 2.
	plain, err := script.Run(t.Context(), client, keys, "OWNERD", 10000, "w", "", "id").Int64Slice()
	if err != nil || plain[0] != -1 || plain[1] != 2 {
		t.Fatalf("plain = %v, %v; want {-1, 2}", plain, err)
	}
}

// A quorum refuses Permits: masters that each admit n holders do not bound
// the fleet by n under majority votes (n+1 holders can each hold a
// majority), so the option fails with ErrInvalid, when adapters validate
// it and at every acquisition, and nothing reaches the masters.
func TestQuorumRefusesPermits(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	l := newQuorumLocker(t, addrs, nil)
	if err := l.ValidateLockOptions(guard.Permits(2)); !errors.Is(err, guard.ErrInvalid) {
		t.Errorf("ValidateLockOptions(Permits(2)) = %v, want ErrInvalid", err)
	}
	if err := l.ValidateLockOptions(guard.Permits(1)); err != nil {
		t.Errorf("ValidateLockOptions(Permits(1)) = %v, want nil (a plain lock)", err)
	}
	if le, err := l.Acquire(t.Context(), "q", guard.Permits(2)); !errors.Is(err, guard.ErrInvalid) {
		t.Errorf("Acquire(Permits(2)) = %v, %v; want ErrInvalid", le, err)
	}
	ran := false
	if err := l.WithLock(t.Context(), "q", func(ctx context.Context) error { ran = true; return nil }, guard.Permits(3)); !errors.Is(err, guard.ErrInvalid) || ran {
		t.Errorf("WithLock(Permits(3)) = %v (ran %v); want ErrInvalid, not run", err, ran)
	}
	for i, s := range servers {
		if n, _ := s.Client(t).Exists(t.Context(), lockKey("q"), lockKey("q")+":fence").Result(); n != 0 {
			t.Errorf("master %d has keys of q", i)
		}
	}
	le := mustAcquire(t, t.Context(), l, "q", guard.Permits(1))
	mustRelease(t, le)
}
