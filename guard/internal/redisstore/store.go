// Package redisstore keeps guard's leases in one Redis deployment: a
// *redis.Client (standalone, or Sentinel through redis.NewFailoverClient)
// or a *redis.ClusterClient. Each method is one typed call of one Lua
// script (scripts/, a function library on Redis 7, EVALSHA elsewhere); the
// KEYS and ARGV order of a script, the registrations in a lock's queue and
// the messages of its channel are written and read here and nowhere else.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobguard/jobguard/guard/internal/clock"
	"github.com/jobguard/jobguard/guard/internal/store"

	"github.com/redis/go-redis/v9"
)

// Store is one Redis deployment, as a store.Store.
type Store struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil outside Cluster
	clock   clock.Clock

	scripts *scripts // publishing with SPUBLISH on Cluster
	batch   *batcher // nil on Cluster

	replicas       int // WAIT for this many replicas after acquisitions and renewals; 0: don't
	replicaTimeout time.Duration
	// grants is whether a release may grant the key to a waiting writer
	// (see Options.Quorum).
	grants bool
}

// Options configure a Store.
type Options struct {
	// Replicas, when positive, makes acquisitions and renewals wait for
	// that many replicas (WAIT) for up to ReplicaTimeout.
	Replicas       int
	ReplicaTimeout time.Duration
	// Quorum declares the store one master of a quorum: a release there
	// names the next waiting Locker rather than grant it the key, since
	// one master's grant is not a majority's.
	Quorum bool
	// Clock is what the store's connections keep time by; nil is the real
	// one.
	Clock clock.Clock
}

// New returns a Store on client.
func New(client redis.UniversalClient, o Options) *Store {
	cc, _ := client.(*redis.ClusterClient)
	c := o.Clock
	if c == nil {
		c = clock.Real{}
	}
	s := &Store{
		client:         client,
		cluster:        cc,
		clock:          c,
		scripts:        newScripts(cc != nil),
		replicas:       o.Replicas,
		replicaTimeout: o.ReplicaTimeout,
		// A writer waiting for replica acks is named, not granted: the
		// release does not wait for replicas.
		grants: !o.Quorum && o.Replicas == 0,
	}
	if cc == nil {
		s.batch = &batcher{client: client}
	}
	return s
}

// Caps: one deployment bounds permits.
func (s *Store) Caps() store.Caps { return store.Caps{Permits: true} }

func (s *Store) Acquire(ctx context.Context, k store.Keys, a store.AcquireArgs) (store.AcquireReply, error) {
	v := newArgv()
	acquireKeys(v, k)
	s.acquireArgs(v, a)
	reply, unacked, err := s.runOne(ctx, &s.scripts.acquire, k.Lock, v.call(), true)
	if err != nil {
		return store.AcquireReply{}, s.classify(err)
	}
	vals, err := reply.Slice()
	if err != nil {
		return store.AcquireReply{}, s.classify(err)
	}
	rep, err := acquireReply(vals, a)
	if err == nil && rep.Acquired {
		// Unacknowledged, the hold is acquired and an error: the Locker
		// drops it, since nobody may rely on a hold a failover could
		// forget.
		err = unacked
	}
	return rep, err
}

func (s *Store) SetCounts(ctx context.Context, k store.Keys, a store.CountArgs) (store.Outcome, error) {
	v := newArgv()
	countsKeys(v, k, a)
	countsArgs(v, a)
	reply, _, err := s.runOne(ctx, &s.scripts.setCounts, k.Lock, v.call(), false)
	if err != nil {
		return 0, s.classify(err)
	}
	res, err := reply.Int64()
	return store.Outcome(res), s.classify(err)
}

func (s *Store) Renew(ctx context.Context, batch []store.RenewArgs) ([]store.RenewReply, error) {
	calls := make([]scriptCall, len(batch))
	for i, r := range batch {
		v := newArgv()
		v.key(r.Lock)
		v.str(r.Owner)
		v.ms(r.TTL)
		calls[i] = v.call()
	}
	unacked, err := s.runScript(ctx, &s.scripts.renew, batch[0].Lock, calls, true)
	if err != nil {
		return nil, s.classify(err)
	}
	out := make([]store.RenewReply, len(batch))
	for i, c := range calls {
		res, err := c.reply.Int64()
		err = s.classify(err)
		if err == nil && unacked != nil {
			err = unacked // renewed on the master only: a failover could forget it
		}
		out[i] = store.RenewReply{Outcome: store.Outcome(res), Err: err}
	}
	return out, nil
}

func (s *Store) RenewalGroup(ctx context.Context, key string) string {
	if s.cluster == nil {
		return ""
	}
	// The cluster state is loaded by the acquisition before any renewal,
	// so this is a lookup, not a request. A slot that moved is found again
	// at the next renewal; until then go-redis follows the redirection.
	node, err := s.cluster.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return node.Options().Addr
}

// classify is the package's classify, and on Cluster, when a request got
// no reply, it also has the client reload its slot map. go-redis reloads
// it on a MOVED reply, but not when a master stops answering: without
// this, after a master is SIGKILLed and its replica promoted, every
// request for its slots goes on dialing the dead address until the map is
// ClusterStateReloadInterval old (60s by default since go-redis 9.22),
// and the leases the promoted replica still has are lost at their stop
// time. A redirection go-redis did not follow to its end (MOVED, ASK)
// reloads it too, so the next try goes where the slot is now; TRYAGAIN
// does not, as the map does not change while a slot is migrating. The
// reload is lazy and go-redis runs at most one at a time.
//
// Only a Cluster client's requests can meet a slot on the move: a plain
// client pointed at a Cluster node gets MOVED for every key of another
// node's slots, for good, and that is a misconfiguration to report at
// once, not a migration to wait out.
func (s *Store) classify(err error) error {
	if s.cluster != nil && slotMoving(err) {
		if !strings.HasPrefix(err.Error(), "TRYAGAIN") {
			s.cluster.ReloadState(context.Background())
		}
		return fmt.Errorf("%w: %w", store.ErrTryAgain, err)
	}
	err = classify(err)
	if _, noReply := errors.AsType[*store.NoReplyError](err); noReply && s.cluster != nil {
		s.cluster.ReloadState(context.Background())
	}
	return err
}

// slotMoving reports whether err is Redis's TRYAGAIN, or a redirection
// (MOVED, ASK) that go-redis did not follow to its end.
func slotMoving(err error) bool {
	if _, reply := errors.AsType[redis.Error](err); !reply || err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "TRYAGAIN") || strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")
}

// classify puts a go-redis error in the store's terms: a WRONGTYPE reply
// matches store.ErrWrongType, and an error that is not a reply from the server
// (a broken connection, a timeout) is a NoReplyError: the request may have
// run.
func classify(err error) error {
	if err == nil {
		return nil
	}
	// AsType rather than As: As's target would escape, costing every
	// request an allocation, even one without an error.
	_, reply := errors.AsType[redis.Error](err)
	switch {
	case reply && strings.HasPrefix(err.Error(), "WRONGTYPE Operation against"):
		// Redis's own message names a script's line, not the key: the
		// caller names the key it asked about.
		return store.ErrWrongType
	case reply && strings.HasPrefix(err.Error(), "WRONGTYPE"):
		return fmt.Errorf("%w: %s", store.ErrWrongType, strings.TrimPrefix(err.Error(), "WRONGTYPE "))
	case reply:
		return err
	default:
		return &store.NoReplyError{Err: err}
	}
}

func (s *Store) FeedSlot(channel string) int {
	if s.cluster == nil {
		return store.NoSlot
	}
	return hashSlot(channel)
}

func (s *Store) OpenFeed(ctx context.Context, channel string) (store.Feed, bool) {
	if s.cluster != nil {
		// A Cluster PubSub connects to the node of its first channel: it
		// is opened subscribed, before its reader starts, or a read would
		// connect it to any node.
		open := func(ctx context.Context, channels ...string) *redis.PubSub {
			return s.cluster.SSubscribe(ctx, channels...)
		}
		return newRedisFeed(ctx, s.clock, open, true, channel), true
	}
	open := func(ctx context.Context, channels ...string) *redis.PubSub {
		return s.client.Subscribe(ctx, channels...)
	}
	return newRedisFeed(ctx, s.clock, open, false), false
}

func (s *Store) Refresh(ctx context.Context) {
	if s.cluster == nil {
		return
	}
	// ForEachMaster reloads the slot map before it runs, and waits for it;
	// ReloadState would only ask for a reload later.
	_ = s.cluster.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
}

func (s *Store) Withdraw(ctx context.Context, k store.Keys, a store.AcquireArgs) (bool, error) {
	n, err := s.client.ZRem(ctx, k.Waiters, s.registration(a)).Result()
	return n == 1, wrongTypeOf(k.Waiters, "a queue of waiters", s.classify(err))
}

// Close releases nothing: the client belongs to the caller of New.
func (s *Store) Close() error { return nil }

// Claim stores value with SET NX. SET NX cannot tell a claim from a key
// of another type, which it leaves alone as well: the TYPE in the same
// request does, so that a key nobody can claim is an error, not a claim
// that someone else holds forever.
func (s *Store) Claim(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	var set *redis.BoolCmd
	var kind *redis.StatusCmd
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		set = p.SetNX(ctx, key, value, ttl)
		kind = p.Type(ctx, key)
		return nil
	})
	if err != nil {
		return false, s.classify(err)
	}
	if !set.Val() && kind.Val() != "string" && kind.Val() != "none" {
		return false, fmt.Errorf("%w: %s holds a %s, not a claim", store.ErrWrongType, key, kind.Val())
	}
	return set.Val(), nil
}

func (s *Store) Claimed(ctx context.Context, key string) ([]byte, bool, error) {
	value, err := s.client.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	return value, err == nil, wrongTypeOf(key, "a claim", s.classify(err))
}

// wrongTypeOf names key, which should hold what, in an ErrWrongType from a
// command that does not name it.
func wrongTypeOf(key, what string, err error) error {
	if errors.Is(err, store.ErrWrongType) {
		return fmt.Errorf("%w: %s holds another type, not %s", store.ErrWrongType, key, what)
	}
	return err
}

// hashSlot returns the Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, the part between the first '{' and the next '}' if not empty, or of
// the whole key, modulo 16384.
func hashSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// ms converts d to whole milliseconds for a script, rounding a positive
// duration below 1ms up so that it does not read as "none".
func ms(d time.Duration) int64 {
	if d > 0 && d < time.Millisecond {
		return 1
	}
	return d.Milliseconds()
}

func (s *Store) ClaimFenced(ctx context.Context, fence, key string, token int64, value []byte, ttl time.Duration) (int64, error) {
	v := newArgv()
	v.key(fence)
	v.key(key)
	v.int(token)
	v.lit(value)
	v.ms(ttl)
	reply, _, err := s.runOne(ctx, &s.scripts.claimFenced, key, v.call(), false)
	if err != nil {
		return 0, s.classify(err)
	}
	counter, err := reply.Int64()
	return counter, s.classify(err)
}

func (s *Store) Charge(ctx context.Context, key string, amount, limit int64, window time.Duration) (bool, time.Duration, error) {
	v := newArgv()
	v.key(key)
	v.int(amount)
	v.int(limit)
	v.ms(window)
	reply, _, err := s.runOne(ctx, &s.scripts.charge, key, v.call(), false)
	if err != nil {
		return false, 0, s.classify(err)
	}
	vals, err := reply.Int64Slice()
	switch {
	case err != nil:
		return false, 0, s.classify(err)
	case len(vals) != 2:
		return false, 0, fmt.Errorf("guard: unexpected charge reply %v", vals)
	}
	return vals[0] == 1, time.Duration(vals[1]) * time.Millisecond, nil
}

// infoPolicy reads maxmemory and maxmemory_policy from an INFO memory
// reply. INFO, not CONFIG GET: managed services and hardened servers
// often rename or forbid CONFIG, and INFO answers there.
func infoPolicy(node, info string) store.ServerPolicy {
	p := store.ServerPolicy{Node: node}
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case !ok:
		case name == "maxmemory":
			p.MaxMemory = value
		case name == "maxmemory_policy":
			p.Policy = value
		}
	}
	return p
}

func (s *Store) EvictionPolicies(ctx context.Context) ([]store.ServerPolicy, error) {
	read := func(ctx context.Context, c *redis.Client, node string) (store.ServerPolicy, error) {
		info, err := c.Info(ctx, "memory").Result()
		return infoPolicy(node, info), err
	}
	if s.cluster == nil {
		c, ok := s.client.(*redis.Client)
		if !ok {
			return nil, nil
		}
		p, err := read(ctx, c, c.Options().Addr)
		if err != nil {
			return nil, err
		}
		return []store.ServerPolicy{p}, nil
	}
	var mu sync.Mutex
	var policies []store.ServerPolicy
	err := s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		p, err := read(ctx, c, c.Options().Addr)
		if err != nil {
			return err
		}
		mu.Lock()
		policies = append(policies, p)
		mu.Unlock()
		return nil
	})
	return policies, err
}

// WriteFence writes token to k's fencing counter where it differs
// (write_fence.lua); minted is the token this server returned to the same
// attempt, 0 if none. The quorum calls it on its masters.
func (s *Store) WriteFence(ctx context.Context, k store.Keys, token, minted int64, a store.AcquireArgs) error {
	v := newArgv()
	v.key(k.Fence)
	v.key(k.Lock)
	v.str(strconv.FormatInt(token, 10))
	v.ms(a.FenceTTL)
	v.ms(a.TTL)
	v.str(strconv.FormatInt(minted, 10))
	v.str(a.Owner)
	_, _, err := s.runOne(ctx, &s.scripts.writeFence, k.Lock, v.call(), false)
	return s.classify(err)
}

// Unclaim deletes the claim under key if it holds value (unclaim.lua),
// and reports whether it did. The quorum calls it on its masters.
func (s *Store) Unclaim(ctx context.Context, key string, value []byte) (bool, error) {
	v := newArgv()
	v.key(key)
	v.lit(value)
	reply, _, err := s.runOne(ctx, &s.scripts.unclaim, key, v.call(), false)
	if err != nil {
		return false, s.classify(err)
	}
	n, err := reply.Int64()
	return n == 1, s.classify(err)
}

var _ store.Store = (*Store)(nil)
