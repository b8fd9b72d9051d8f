package guard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStore keeps leases in one Redis deployment: a *redis.Client
// (standalone, or Sentinel through redis.NewFailoverClient) or a
// *redis.ClusterClient. Each method is one typed call of one script; the
// KEYS and ARGV order of a script appear nowhere else.
type redisStore struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil outside Cluster

	scripts *scripts // publishing with SPUBLISH on Cluster

	replicas       int // WAIT for this many replicas after acquisitions and renewals; 0: don't
	replicaTimeout time.Duration
	// noGrants registers writers as named, never granted, waiters: a
	// master of a quorum may not hand a key over on its own.
	noGrants bool
}

func newRedisStore(client redis.UniversalClient, replicas int, replicaTimeout time.Duration) *redisStore {
	cc, _ := client.(*redis.ClusterClient)
	return &redisStore{
		client:         client,
		cluster:        cc,
		scripts:        newScripts(cc != nil),
		replicas:       replicas,
		replicaTimeout: replicaTimeout,
	}
}

func (s *redisStore) acquire(ctx context.Context, k keys, a acquireArgs) (acquireReply, error) {
	mode := "r"
	if a.write {
		mode = "w"
	}
	call := scriptCall{
		keys: []string{k.lock, k.fence, k.waiters},
		args: []any{a.owner, ms(a.ttl), mode, s.registration(a), a.identity},
	}
	// The trailing arguments at their defaults are left out (see acquire.lua).
	switch {
	case a.permits > 1:
		call.args = append(call.args, ms(a.minHold), ms(a.fenceTTL), a.permits)
	case a.fenceTTL > 0:
		call.args = append(call.args, ms(a.minHold), ms(a.fenceTTL))
	case a.minHold > 0:
		call.args = append(call.args, ms(a.minHold))
	}
	reply, unacked, err := s.runOne(ctx, &s.scripts.acquire, k.lock, call, true)
	if err != nil {
		return acquireReply{}, s.classify(err)
	}
	vals, err := reply.Int64Slice()
	switch {
	case err != nil:
		return acquireReply{}, s.classify(err)
	case len(vals) < 2:
		return acquireReply{}, fmt.Errorf("guard: unexpected acquire reply %v", vals)
	case vals[0] == -1:
		return acquireReply{}, fmt.Errorf("%w: its holders hold %d, this acquisition asks for %d", ErrPermitsDiffer, vals[1], a.permits)
	case vals[0] != 1:
		rep := acquireReply{heldFor: time.Duration(vals[1]) * time.Millisecond}
		if len(vals) > 2 {
			rep.minted = vals[2]
		}
		return rep, nil
	}
	// Unacknowledged, the hold is acquired and an error: the Locker drops it,
	// since nobody may rely on a hold a failover could forget.
	return acquireReply{acquired: true, token: vals[1]}, unacked
}

func (s *redisStore) setCounts(ctx context.Context, k keys, a countArgs) (outcome, error) {
	call := scriptCall{
		keys: []string{k.lock, k.waiters, k.doneMarker(a.owner), k.fence},
		args: []any{a.owner, ms(a.marker)},
	}
	if a.writes != 0 || a.reads != 0 { // a final release sends no counts (see set_counts.lua)
		call.args = append(call.args, a.writes, a.reads)
	}
	reply, _, err := s.runOne(ctx, &s.scripts.setCounts, k.lock, call, false)
	if err != nil {
		return 0, s.classify(err)
	}
	res, err := reply.Int64()
	return outcome(res), s.classify(err)
}

func (s *redisStore) renew(ctx context.Context, batch []renewArgs) ([]renewReply, error) {
	calls := make([]scriptCall, len(batch))
	for i, r := range batch {
		calls[i] = scriptCall{keys: []string{r.lock}, args: []any{r.owner, ms(r.ttl)}}
	}
	unacked, err := s.runScript(ctx, &s.scripts.renew, batch[0].lock, calls, true)
	if err != nil {
		return nil, s.classify(err)
	}
	out := make([]renewReply, len(batch))
	for i, c := range calls {
		res, err := c.reply.Int64()
		err = s.classify(err)
		if err == nil && unacked != nil {
			err = unacked // renewed on the master only: a failover could forget it
		}
		out[i] = renewReply{outcome: outcome(res), err: err}
	}
	return out, nil
}

func (s *redisStore) renewalGroup(ctx context.Context, key string) string {
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
// time. The reload is lazy and go-redis runs at most one at a time.
func (s *redisStore) classify(err error) error {
	err = classify(err)
	if _, noReply := errors.AsType[*noReplyError](err); noReply && s.cluster != nil {
		s.cluster.ReloadState(context.Background())
	}
	return err
}

// classify puts a go-redis error in the store's terms: a WRONGTYPE reply
// matches ErrWrongType, and an error that is not a reply from the server
// (a broken connection, a timeout) is a noReplyError: the request may have
// run.
func classify(err error) error {
	if err == nil {
		return nil
	}
	// AsType rather than As: As's target would escape, costing every
	// request an allocation, even one without an error.
	_, reply := errors.AsType[redis.Error](err)
	switch {
	case reply && strings.HasPrefix(err.Error(), "WRONGTYPE"):
		return fmt.Errorf("%w: %s", ErrWrongType, strings.TrimPrefix(err.Error(), "WRONGTYPE "))
	case reply:
		return err
	default:
		return &noReplyError{err}
	}
}

func (s *redisStore) feedSlot(channel string) int {
	if s.cluster == nil {
		return noSlot
	}
	return hashSlot(channel)
}

func (s *redisStore) openFeed(ctx context.Context, channel string) (feed, bool) {
	if s.cluster != nil {
		// A Cluster PubSub connects to the node of its first channel: it
		// is opened subscribed, before its reader starts, or a read would
		// connect it to any node.
		open := func(ctx context.Context, channels ...string) *redis.PubSub {
			return s.cluster.SSubscribe(ctx, channels...)
		}
		return newRedisFeed(ctx, open, true, channel), true
	}
	open := func(ctx context.Context, channels ...string) *redis.PubSub {
		return s.client.Subscribe(ctx, channels...)
	}
	return newRedisFeed(ctx, open, false), false
}

func (s *redisStore) refresh(ctx context.Context) {
	if s.cluster == nil {
		return
	}
	// ForEachMaster reloads the slot map before it runs, and waits for it;
	// ReloadState would only ask for a reload later.
	_ = s.cluster.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
}

func (s *redisStore) withdraw(ctx context.Context, k keys, a acquireArgs) (bool, error) {
	n, err := s.client.ZRem(ctx, k.waiters, s.registration(a)).Result()
	return n == 1, s.classify(err)
}

// registration is what an acquisition that waits adds to the lock's queue
// (acquire.lua documents the format; the identity comes last, so its spaces
// are its own); "" for one that will not wait. A
// writer takes the key from a release (a grant) unless acquisitions must
// wait for replicas: the release does not wait for them. The kind of a
// permit's registration carries its number of permits ("g4": one of 4).
func (s *redisStore) registration(a acquireArgs) string {
	if a.waiter == "" {
		return ""
	}
	kind := byte('r')
	switch {
	case a.write && s.replicas == 0 && !s.noGrants:
		kind = 'g'
	case a.write:
		kind = 'w'
	}
	// Written into one buffer of the right size: one allocation for what
	// concatenations and formatted numbers would take three or four.
	var r strings.Builder
	var num [20]byte // an int64 in decimal
	r.Grow(len(a.waiter) + len(a.owner) + len(a.identity) + 5*len(num))
	r.WriteString(a.waiter)
	r.WriteByte(' ')
	r.WriteString(a.owner)
	r.WriteByte(' ')
	r.WriteByte(kind)
	if a.permits > 1 {
		r.Write(strconv.AppendInt(num[:0], int64(a.permits), 10))
	}
	for _, d := range [...]time.Duration{a.ttl, a.minHold, a.fenceTTL} {
		r.WriteByte(' ')
		r.Write(strconv.AppendInt(num[:0], ms(d), 10))
	}
	if a.identity != "" {
		r.WriteByte(' ')
		r.WriteString(a.identity) // last: it may hold spaces
	}
	return r.String()
}

// close releases nothing: the client belongs to the caller of New.
func (s *redisStore) close() error { return nil }

func (s *redisStore) claim(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	stored, err := s.client.SetNX(ctx, key, value, ttl).Result()
	return stored, s.classify(err)
}

func (s *redisStore) claimed(ctx context.Context, key string) ([]byte, bool, error) {
	value, err := s.client.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	return value, err == nil, s.classify(err)
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

func (s *redisStore) claimFenced(ctx context.Context, fence, key string, token int64, value []byte, ttl time.Duration) (int64, error) {
	call := scriptCall{keys: []string{fence, key}, args: []any{token, value, ms(ttl)}}
	reply, _, err := s.runOne(ctx, &s.scripts.claimFenced, key, call, false)
	if err != nil {
		return 0, s.classify(err)
	}
	counter, err := reply.Int64()
	return counter, s.classify(err)
}

func (s *redisStore) charge(ctx context.Context, key string, amount, limit int64, window time.Duration) (bool, time.Duration, error) {
	call := scriptCall{keys: []string{key}, args: []any{amount, limit, ms(window)}}
	reply, _, err := s.runOne(ctx, &s.scripts.charge, key, call, false)
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

func (s *redisStore) evictionPolicies(ctx context.Context) ([]serverPolicy, error) {
	read := func(ctx context.Context, c *redis.Client, node string) (serverPolicy, error) {
		config, err := c.ConfigGet(ctx, "maxmemory*").Result()
		return configPolicy(node, config), err
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
		return []serverPolicy{p}, nil
	}
	var mu sync.Mutex
	var policies []serverPolicy
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
