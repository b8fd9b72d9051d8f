package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"

	"github.com/redis/go-redis/v9"
)

// scanCount is the COUNT of each SCAN: about how many keys a server looks
// at for one page of a walk over the locks, so no call blocks it for long.
const scanCount = 100

func (s *Store) Inspect(ctx context.Context, k store.Keys) (store.LockState, error) {
	return s.runInspect(ctx, k, "read")
}

func (s *Store) ForceRelease(ctx context.Context, k store.Keys) (store.LockState, error) {
	return s.runInspect(ctx, k, "release")
}

// runInspect is the one call of inspect.lua; mode is "read" or "release".
func (s *Store) runInspect(ctx context.Context, k store.Keys, mode string) (store.LockState, error) {
	v := newArgv()
	v.key(k.Lock)
	v.key(k.Fence)
	v.key(k.Waiters)
	v.str(mode)
	reply, _, err := s.runOne(ctx, &s.scripts.inspect, k.Lock, v.call(), false)
	if err != nil {
		return store.LockState{}, classify(err)
	}
	vals, err := reply.Slice()
	if err != nil {
		return store.LockState{}, classify(err)
	}
	st, err := parseInspect(vals)
	if err != nil {
		return store.LockState{}, fmt.Errorf("guard: unexpected inspect reply: %w", err)
	}
	return st, nil
}

// parseInspect reads inspect.lua's flat reply (the script's header says
// what it holds).
func parseInspect(vals []any) (store.LockState, error) {
	r := reply{vals: vals}
	var st store.LockState
	if fence := r.str(); fence != "" {
		st.Fence = r.parseInt(fence)
	}
	st.Permits = int(r.int())
	for n := r.int(); n > 0 && r.err == nil; n-- {
		st.Holders = append(st.Holders, store.Holder{
			Owner: r.str(), Identity: r.str(), Write: r.int() == 1,
			Writes: int(r.int()), Reads: int(r.int()), Token: r.parseInt(r.str()),
			Left: r.ms(), MinHold: r.ms(),
		})
	}
	slices.SortFunc(st.Holders, func(a, b store.Holder) int { return cmp.Compare(a.Token, b.Token) })
	for n := r.int(); n > 0 && r.err == nil; n-- {
		w, ok := parseRegistration(r.str())
		w.Left = r.ms()
		if ok {
			st.Waiters = append(st.Waiters, w)
		}
	}
	if r.err == nil && r.i != len(vals) {
		r.err = fmt.Errorf("%d values left over", len(vals)-r.i)
	}
	return st, r.err
}

// reply reads a flat array of integers and strings in order; the first
// value of the wrong type sets err, and reads after it return zero values.
type reply struct {
	vals []any
	i    int
	err  error
}

func (r *reply) next() any {
	if r.err != nil {
		return nil
	}
	if r.i >= len(r.vals) {
		r.err = errors.New("reply too short")
		return nil
	}
	r.i++
	return r.vals[r.i-1]
}

func (r *reply) str() string {
	v := r.next()
	s, ok := v.(string)
	if !ok && r.err == nil {
		r.err = fmt.Errorf("value %d: %T, want a string", r.i, v)
	}
	return s
}

func (r *reply) int() int64 {
	v := r.next()
	n, ok := v.(int64)
	if !ok && r.err == nil {
		r.err = fmt.Errorf("value %d: %T, want an integer", r.i, v)
	}
	return n
}

func (r *reply) ms() time.Duration { return time.Duration(r.int()) * time.Millisecond }

func (r *reply) parseInt(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("value %d: %w", r.i, err)
	}
	return n
}

// scanNode is a server that a walk over the locks visits.
type scanNode struct {
	addr   string // "" outside Cluster
	client redis.Cmdable
}

func (s *Store) ScanLocks(ctx context.Context, prefix, match string, c store.ScanCursor) ([]string, store.ScanCursor, bool, error) {
	nodes, err := s.scanNodes(ctx)
	if err != nil {
		return nil, c, false, classify(err)
	}
	// Masters in address order; one that left the Cluster during the walk
	// is followed by the next address.
	i := slices.IndexFunc(nodes, func(n scanNode) bool { return n.addr >= c.Node })
	switch {
	case i < 0:
		return nil, store.ScanCursor{}, false, nil
	case nodes[i].addr != c.Node:
		c.Pos = 0
	}
	pattern := escapeGlob(prefix) + "{" + match + "}"
	keys, pos, err := nodes[i].client.ScanType(ctx, c.Pos, pattern, scanCount, "hash").Result()
	if err != nil {
		return nil, c, false, classify(err)
	}
	names := make([]string, 0, len(keys))
	for _, key := range keys {
		if name, ok := lockName(prefix, key); ok {
			names = append(names, name)
		}
	}
	switch {
	case pos != 0:
		return names, store.ScanCursor{Node: nodes[i].addr, Pos: pos}, true, nil
	case i+1 < len(nodes):
		return names, store.ScanCursor{Node: nodes[i+1].addr}, true, nil
	}
	return names, store.ScanCursor{}, false, nil
}

// scanNodes returns the servers that hold locks: the one server, or every
// master of a Cluster in address order.
func (s *Store) scanNodes(ctx context.Context) ([]scanNode, error) {
	if s.cluster == nil {
		return []scanNode{{client: s.client}}, nil
	}
	var mu sync.Mutex
	var nodes []scanNode
	err := s.cluster.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, scanNode{addr: c.Options().Addr, client: c})
		return nil
	})
	slices.SortFunc(nodes, func(a, b scanNode) int { return strings.Compare(a.addr, b.addr) })
	return nodes, err
}

// lockName returns the lock key that a Redis key of the shape
// "<prefix>{<name>}" is the hash of, and false for any other key under the
// prefix (":fence", ":waiters", ":claim", ":done:<owner>" and the like).
func lockName(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+"{")
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, "}")
	if !ok || name == "" || strings.Contains(name, "}") {
		return "", false
	}
	return name, true
}

// escapeGlob quotes the characters that a Redis glob pattern gives a
// meaning, so that s matches only itself.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
