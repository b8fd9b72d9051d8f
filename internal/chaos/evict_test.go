package chaos_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/chaos"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Lock keys evicted under memory pressure (issue 28): a server with a
// small maxmemory and an allkeys-* policy, the misconfiguration guard
// warns about, filled by another client until guard's keys go.
const (
	kindEvict = "lock keys evicted (maxmemory, allkeys-random)"
	whyEvict  = "an evicted lock is free at once and nobody is notified: an acquisition can take it before the holder's next renewal finds it gone"
)

// The lock server's memory: evictMaxMemory leaves a few megabytes above
// an idle server's (under 1MB), so that guard's keys and the workers'
// connections never reach it without the filler; fillerValue is the size
// of each filler value, and fillerBound bounds one fault's filler (ten
// times maxmemory).
const (
	evictMaxMemory = 4 << 20
	fillerValue    = 8 << 10
	fillerBatch    = 64
	fillerBound    = 10 * evictMaxMemory / fillerValue
)

// runEvict: one server with maxmemory and allkeys-random; at each fault
// another client writes filler keys until the lock's hash and its fencing
// counter have both been evicted (Redis's keyspace notifications say so),
// keeps the memory full for the fault's duration, and deletes the filler.
// allkeys-random, not allkeys-lru: LRU would evict guard's keys too, but
// only the idle ones (the fencing counter between acquisitions, a
// registration), and rarely a lock hash renewed every TTL/3, so the fault
// would hit the holder by chance. The fencing counter has no TTL (no
// FenceTTL), so a volatile-* policy would leave it alone; allkeys-* does
// not.
func runEvict(t *testing.T, p profile, seed uint64) []*chaos.Result {
	server := redistest.Start(t, "--maxmemory", fmt.Sprint(evictMaxMemory), "--maxmemory-policy", "allkeys-random",
		"--notify-keyspace-events", "Ke")
	r := newRun(t, p, "standalone-evict", chaos.Standalone)
	r.lockAddr = server.Addr()
	g := &group{name: "g", fencingOnly: map[string]string{kindEvict: whyEvict}}
	r.groups = []*group{g}
	r.startWorkers(g, p.workers)
	insp := inspector(t, server.Client(t, fastOptions))
	lockKey := "guard:{" + r.lockKey(g) + "}"
	ev := watchEvictions(t, server, lockKey)
	filler := server.Client(t)
	for i, s := range plan(p, seed, r.name, kindEvict) {
		if r.over() {
			break
		}
		time.Sleep(s.Gap)
		w := r.holder(g, insp)
		before := fenceOf(t, insp, r.lockKey(g))
		var names []string
		r.inject(s.Kind, s.Duration, func() string {
			names = fill(t, filler, ev, fmt.Sprintf("filler:%d:", i), lockKey, lockKey+":fence")
			// The server is the target: an evicted lock is free to every
			// worker, not only to its holder.
			return fmt.Sprintf("%s (holder %s; evicted: %s)", server.Addr(), w.id, strings.Join(ev.take(), ", "))
		}, func() {
			unlink(t, filler, names)
			// With its counter evicted, the next token is the server's
			// clock in microseconds, as every token is unless minted
			// twice within one: still above every token before, so the
			// resource's fence refuses none of the new holders.
			after := fenceOf(t, insp, r.lockKey(g))
			t.Logf("%s: fencing counter %d before the fault, %d after; evicted while full: %s",
				r.name, before, after, strings.Join(ev.take(), ", "))
			if after > 0 && after <= before {
				t.Errorf("%s: the fencing counter went from %d to %d across its eviction", r.name, before, after)
			}
		})
	}
	return r.finish()
}

// evictions reads Redis's keyspace notifications of evicted keys under
// one lock's keys.
type evictions struct {
	ch   <-chan *redis.Message
	seen []string // evicted, not taken yet
}

// watchEvictions subscribes to the evictions of lockKey and the keys
// named after it (fence, waiters, markers); the server must notify
// keyspace events of evictions (notify-keyspace-events Ke).
func watchEvictions(t *testing.T, s *redistest.Server, lockKey string) *evictions {
	t.Helper()
	ps := s.Client(t).PSubscribe(t.Context(), "__keyspace@0__:"+escapeGlob(lockKey)+"*")
	if _, err := ps.Receive(t.Context()); err != nil { // the subscription's confirmation
		t.Fatalf("subscribe to evictions: %v", err)
	}
	t.Cleanup(func() { _ = ps.Close() })
	return &evictions{ch: ps.Channel(redis.WithChannelSize(1000))}
}

// drain moves the notices that have arrived to seen, without waiting.
func (e *evictions) drain() {
	for {
		select {
		case m := <-e.ch:
			if m.Payload == "evicted" {
				e.seen = append(e.seen, strings.TrimPrefix(m.Channel, "__keyspace@0__:"))
			}
		default:
			return
		}
	}
}

// take returns the keys evicted since the last take, in order.
func (e *evictions) take() []string {
	e.drain()
	keys := e.seen
	e.seen = nil
	return keys
}

// fill writes filler keys named prefix+n until each of want has been
// evicted, or fillerBound keys were written, and returns their names.
func fill(t *testing.T, c *redis.Client, ev *evictions, prefix string, want ...string) []string {
	t.Helper()
	value := strings.Repeat("x", fillerValue)
	missing := func() []string {
		ev.drain()
		return slices.DeleteFunc(slices.Clone(want), func(k string) bool { return slices.Contains(ev.seen, k) })
	}
	var names []string
	for len(names) < fillerBound && len(missing()) > 0 {
		pipe := c.Pipeline()
		for range fillerBatch {
			names = append(names, fmt.Sprintf("%s%d", prefix, len(names)))
			pipe.Set(t.Context(), names[len(names)-1], value, 0)
		}
		if _, err := pipe.Exec(t.Context()); err != nil {
			t.Fatalf("fill: %v", err)
		}
	}
	if m := missing(); len(m) > 0 {
		t.Errorf("fill: %d filler keys of %dB did not evict %s", len(names), fillerValue, strings.Join(m, ", "))
	}
	return names
}

// unlink deletes the filler keys that are left.
func unlink(t *testing.T, c *redis.Client, names []string) {
	t.Helper()
	for chunk := range slices.Chunk(names, 500) {
		if err := c.Unlink(t.Context(), chunk...).Err(); err != nil {
			t.Fatalf("unlink the filler: %v", err)
		}
	}
}

// fenceOf returns key's fencing counter as Inspect reads it (0: none;
// -1: Inspect failed, which is logged).
func fenceOf(t *testing.T, insp *guard.Locker, key string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	st, err := insp.Inspect(ctx, key)
	if err != nil {
		t.Logf("inspect %q: %v", key, err)
		return -1
	}
	return st.Fence
}

// escapeGlob escapes the characters PSUBSCRIBE's pattern treats as glob.
func escapeGlob(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}
