package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A re-entry through the context, and the release of a lease that is not
// its hold's last, are this process's own business: they send Redis
// nothing. Only the outermost acquisition, the final release, and a
// downgrade that other owners must see (the last write lease ends while
// read leases remain) make a round trip. These tests count the commands
// the Lockers' clients send.

// commandLog is a go-redis hook that records the commands a client sends:
// a script call as "fcall <function>" (or "evalsha"). It leaves out a new
// connection's handshake, the eviction check (INFO memory) that a Locker
// sends once, in the background, after its first acquisition, and a
// quorum's write-back of a fresh token (write_fence), which goes on to the
// last masters after the acquisition returned.
type commandLog struct {
	mu    sync.Mutex
	names []string
}

func (c *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *commandLog) add(cmd redis.Cmder) {
	name := cmd.Name()
	switch name {
	case "hello", "client", "info":
		return
	case "fcall":
		if args := cmd.Args(); len(args) > 1 {
			name = fmt.Sprint("fcall ", args[1])
		}
		if strings.HasSuffix(name, "_write_fence") {
			return
		}
	}
	c.mu.Lock()
	c.names = append(c.names, name)
	c.mu.Unlock()
}

// take returns the commands recorded since the last take.
func (c *commandLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := c.names
	c.names = nil
	return names
}

// await returns the commands recorded since the last take once there are
// at least n and no more came for 50ms, or after a second. A quorum's
// request returns once a majority answered: the other masters' copies may
// come after it.
func (c *commandLog) await(n int) []string {
	last, since := -1, time.Now()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		c.mu.Lock()
		got := len(c.names)
		c.mu.Unlock()
		if got != last {
			last, since = got, time.Now()
		}
		if got >= n && time.Since(since) >= 50*time.Millisecond {
			break
		}
	}
	return c.take()
}

// expectCommands fails t unless log recorded n commands since the last
// take, each a call of the set_counts script when it is a script call.
func expectCommands(t *testing.T, log *commandLog, n int, what string) {
	t.Helper()
	got := log.await(n)
	if len(got) != n {
		t.Errorf("%s sent %d commands %q, want %d", what, len(got), got, n)
		return
	}
	for _, name := range got {
		if !strings.HasSuffix(name, "_set_counts") && name != "evalsha" {
			t.Errorf("%s sent %q, want a count update (set_counts)", what, got)
		}
	}
}

// hookedLocker returns a Locker whose clients log their commands to log:
// New on one address, NewQuorum on several.
func hookedLocker(t *testing.T, addrs []string, log *commandLog, opts ...guard.Option) *guard.Locker {
	t.Helper()
	clients := make([]redis.UniversalClient, len(addrs))
	for i, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		c.AddHook(log)
		clients[i] = c
	}
	var l *guard.Locker
	var err error
	if len(clients) == 1 {
		l, err = guard.New(clients[0], opts...)
	} else {
		l, err = guard.NewQuorum(clients, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for _, c := range clients {
			_ = c.Close()
		}
	})
	return l
}

func TestReentryCostsNoRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	_, quorum := startQuorum(t, 3)
	for _, tp := range []struct {
		name  string
		addrs []string
	}{{"standalone", []string{srv.Addr()}}, {"quorum", quorum}} {
		t.Run(tp.name, func(t *testing.T) {
			log := &commandLog{}
			l := hookedLocker(t, tp.addrs, log)
			other := hookedLocker(t, tp.addrs, &commandLog{})
			acquire := func(ctx context.Context, key string, write bool, opts ...guard.LockOption) *guard.Lease {
				t.Helper()
				acq := l.Acquire
				if !write {
					acq = l.AcquireRead
				}
				le, err := acq(ctx, key, opts...)
				if err != nil {
					t.Fatalf("acquire %q (write %v): %v", key, write, err)
				}
				return le
			}
			for _, c := range []struct {
				name     string
				write    bool // the outer lease's mode
				opts     []guard.LockOption
				reenters func(t *testing.T, outer *guard.Lease)
			}{
				{"write in write", true, nil, func(t *testing.T, outer *guard.Lease) {
					inner := acquire(outer.Context(), outer.Key(), true)
					innermost := acquire(inner.Context(), outer.Key(), true)
					mustRelease(t, innermost)
					mustRelease(t, inner)
				}},
				{"read in read", false, nil, func(t *testing.T, outer *guard.Lease) {
					a := acquire(outer.Context(), outer.Key(), false)
					b := acquire(a.Context(), outer.Key(), false)
					mustRelease(t, a) // out of order
					mustRelease(t, b)
				}},
				{"read in write, ended first", true, nil, func(t *testing.T, outer *guard.Lease) {
					read := acquire(outer.Context(), outer.Key(), false)
					mustRelease(t, read)
				}},
				{"nested WithLock", true, nil, func(t *testing.T, outer *guard.Lease) {
					err := l.WithLock(outer.Context(), outer.Key(), func(ctx context.Context) error {
						return l.WithReadLock(ctx, outer.Key(), func(context.Context) error { return nil })
					})
					if err != nil {
						t.Fatal(err)
					}
				}},
				{"MinHold", true, []guard.LockOption{guard.MinHold(time.Minute)}, func(t *testing.T, outer *guard.Lease) {
					inner := acquire(outer.Context(), outer.Key(), true, guard.MinHold(time.Minute))
					mustRelease(t, inner)
				}},
			} {
				t.Run(c.name, func(t *testing.T) {
					key := strings.ReplaceAll(c.name, " ", "-")
					outer := acquire(t.Context(), key, c.write, c.opts...)
					log.await(len(tp.addrs)) // the acquisition's
					c.reenters(t, outer)
					expectCommands(t, log, 0, "re-entries and their releases")
					if _, err := other.Acquire(t.Context(), key, guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
						t.Fatalf("another Locker while the outer lease is held: %v, want ErrNotAcquired", err)
					}
					mustRelease(t, outer)
					expectCommands(t, log, len(tp.addrs), "the final release")
					le, err := other.Acquire(t.Context(), key, guard.Wait(0))
					switch {
					case c.opts != nil: // MinHold keeps the key after the final release
						if !errors.Is(err, guard.ErrNotAcquired) {
							t.Fatalf("another Locker during MinHold: %v, want ErrNotAcquired", err)
						}
					case err != nil:
						t.Fatalf("another Locker after the final release: %v", err)
					default:
						mustRelease(t, le)
					}
				})
			}
		})
	}
}

// Re-entries that are refused, or whose context is done, are refused at
// once and send nothing; the hold's counts are left as they were, so its
// final release still frees the key.
func TestRefusedReentrySendsNothing(t *testing.T) {
	srv := redistest.Start(t)
	log := &commandLog{}
	l := hookedLocker(t, []string{srv.Addr()}, log)
	other := newLocker(t, srv.Addr())
	read, err := l.AcquireRead(t.Context(), "refused")
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(read.Context())
	cancel()
	log.take()
	for name, call := range map[string]struct {
		acquire func() (*guard.Lease, error)
		want    error
	}{
		"write in read": {func() (*guard.Lease, error) { return l.Acquire(read.Context(), "refused") }, guard.ErrUpgrade},
		"other permits": {func() (*guard.Lease, error) { return l.Acquire(read.Context(), "refused", guard.Permits(2)) }, guard.ErrPermitsDiffer},
		"done context":  {func() (*guard.Lease, error) { return l.AcquireRead(done, "refused") }, context.Canceled},
		"done, WithLock": {func() (*guard.Lease, error) {
			return nil, l.WithReadLock(done, "refused", func(context.Context) error { return nil })
		}, context.Canceled},
		"done, upgrade too": {func() (*guard.Lease, error) { return l.Acquire(done, "refused") }, guard.ErrUpgrade},
	} {
		start := time.Now()
		le, err := call.acquire()
		if took := time.Since(start); le != nil || !errors.Is(err, call.want) || took > 100*time.Millisecond {
			t.Errorf("%s: lease %v, %v after %v; want %v at once", name, le != nil, err, took, call.want)
		}
	}
	expectCommands(t, log, 0, "refused re-entries")
	// A reader of another Locker joins: the hold is still a read hold.
	joined, err := other.AcquireRead(t.Context(), "refused", guard.Wait(0))
	if err != nil {
		t.Fatal(err)
	}
	mustRelease(t, joined)
	mustRelease(t, read)
	expectCommands(t, log, 1, "the final release")
	if st := inspect(t, other, "refused"); len(st.Holders) != 0 {
		t.Fatalf("after the final release: %+v; want the key free", st.Holders)
	}
}

// A write hold that took read leases stays a write hold on the server until
// its last write lease ends; that end makes it a read hold there, in one
// round trip, so other owners' readers may join. Redis counts a hold as
// one lease of its mode, whatever the re-entries.
func TestDowngradeKeepsItsRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	log := &commandLog{}
	l := hookedLocker(t, []string{srv.Addr()}, log, guard.WithIdentity("downgrading"))
	other := newLocker(t, srv.Addr())
	outer := mustAcquire(t, t.Context(), l, "downgrade")
	inner := mustAcquire(t, outer.Context(), l, "downgrade")
	read, err := l.AcquireRead(inner.Context(), "downgrade")
	if err != nil {
		t.Fatal(err)
	}
	log.take()
	checkHolders := func(what string, write bool) {
		t.Helper()
		want := guard.Holder{Identity: "downgrading", Write: write, Writes: 1, Token: outer.Token()}
		if !write {
			want.Writes, want.Reads = 0, 1
		}
		st := inspect(t, other, "downgrade")
		if len(st.Holders) == 0 {
			t.Fatalf("%s: no holder", what)
		}
		checkHolder(t, st.Holders[0], want, 30*time.Second)
	}
	checkHolders("two write leases and a read lease", true)
	if _, err := other.AcquireRead(t.Context(), "downgrade", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("another reader beside a write lease: %v, want ErrNotAcquired", err)
	}
	mustRelease(t, inner)
	expectCommands(t, log, 0, "a write lease that is not the last")
	mustRelease(t, outer)
	expectCommands(t, log, 1, "the last write lease beside a read lease")
	checkHolders("a read lease left", false)
	joined, err := other.AcquireRead(t.Context(), "downgrade", guard.Wait(0))
	if err != nil {
		t.Fatalf("another reader after the downgrade: %v", err)
	}
	if _, err := l.Acquire(read.Context(), "downgrade"); !errors.Is(err, guard.ErrUpgrade) {
		t.Fatalf("write re-entry after the downgrade: %v, want ErrUpgrade", err)
	}
	again, err := l.AcquireRead(read.Context(), "downgrade")
	if err != nil {
		t.Fatal(err)
	}
	mustRelease(t, again)
	expectCommands(t, log, 0, "a read re-entry into the downgraded hold")
	mustRelease(t, read)
	expectCommands(t, log, 1, "the final release")
	if st := inspect(t, other, "downgrade"); len(st.Holders) != 1 || st.Holders[0].Identity == "downgrading" {
		t.Fatalf("after the final release: %+v; want the other reader alone", st.Holders)
	}
	mustRelease(t, joined)
}

// A hold that was lost answers its re-entries and the releases of its
// leases that are not the last from what this process knows, with the
// loss's cause said once, and sends nothing. Its last lease's release
// still asks Redis, in case the hold is there to free.
func TestLostHoldAnswersWithoutRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	log := &commandLog{}
	l := hookedLocker(t, []string{srv.Addr()}, log, guard.WithTTL(time.Second))
	outer := mustAcquire(t, t.Context(), l, "lost")
	inner := mustAcquire(t, outer.Context(), l, "lost")
	if err := srv.Client(t).Del(t.Context(), "guard:{lost}").Err(); err != nil {
		t.Fatal(err)
	}
	<-outer.Context().Done() // the next renewal finds the key gone
	log.take()
	_, err := l.Acquire(inner.Context(), "lost")
	if !errors.Is(err, guard.ErrLeaseLost) || strings.Count(err.Error(), "lease lost") != 1 || strings.Count(err.Error(), `"lost"`) != 1 {
		t.Errorf("re-entry of the lost hold: %v; want ErrLeaseLost, the cause and the key once", err)
	}
	err = inner.Release(t.Context())
	if !errors.Is(err, guard.ErrNotHeld) || !errors.Is(err, guard.ErrLeaseLost) || strings.Count(err.Error(), "lease lost") != 1 {
		t.Errorf("release of an inner lease: %v; want ErrNotHeld naming the loss once", err)
	}
	expectCommands(t, log, 0, "a re-entry and an inner release of a lost hold")
	if err := outer.Release(t.Context()); !errors.Is(err, guard.ErrNotHeld) || !errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("release of the outer lease: %v; want ErrNotHeld naming the loss", err)
	}
	expectCommands(t, log, 1, "the final release of a lost hold")
}

// Re-entries and releases of one hold from many goroutines at once keep the
// key until the last lease ends, and send nothing but the final release.
func TestConcurrentReentries(t *testing.T) {
	srv := redistest.Start(t)
	log := &commandLog{}
	l := hookedLocker(t, []string{srv.Addr()}, log)
	other := newLocker(t, srv.Addr())
	outer := mustAcquire(t, t.Context(), l, "busy")
	log.take()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			for range 50 {
				acq := l.Acquire
				if i%2 == 1 {
					acq = l.AcquireRead
				}
				le, err := acq(outer.Context(), "busy")
				if err == nil {
					err = le.Release(t.Context())
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	expectCommands(t, log, 0, "3200 re-entries and releases")
	if _, err := other.AcquireRead(t.Context(), "busy", guard.Wait(0)); !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("a reader beside the write hold: %v, want ErrNotAcquired", err)
	}
	mustRelease(t, outer)
	expectCommands(t, log, 1, "the final release")
	mustRelease(t, mustAcquire(t, t.Context(), other, "busy", guard.Wait(0)))
}
