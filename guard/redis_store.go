package guard

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/set_counts.lua
	setCountsLua string
)

// redisStore keeps leases in one Redis deployment: a *redis.Client
// (standalone, or Sentinel through redis.NewFailoverClient) or a
// *redis.ClusterClient. Each method is one typed call of one script; the
// KEYS and ARGV order of a script appear nowhere else.
type redisStore struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil outside Cluster
	publish string               // PUBLISH, or SPUBLISH on Cluster

	// Scripts are compiled per store rather than as package variables,
	// keeping the package free of global state; redis.NewScript only
	// hashes the source.
	acquireScript, renewScript, setCountsScript *redis.Script

	replicas       int // WAIT for this many replicas after acquisitions and renewals; 0: don't
	replicaTimeout time.Duration
}

func newRedisStore(client redis.UniversalClient, replicas int, replicaTimeout time.Duration) *redisStore {
	s := &redisStore{
		client:          client,
		publish:         "PUBLISH",
		acquireScript:   redis.NewScript(preludeLua + acquireLua),
		renewScript:     redis.NewScript(preludeLua + renewLua),
		setCountsScript: redis.NewScript(preludeLua + setCountsLua),
		replicas:        replicas,
		replicaTimeout:  replicaTimeout,
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		s.cluster, s.publish = cc, "SPUBLISH"
	}
	return s
}

func (s *redisStore) acquire(ctx context.Context, k keys, a acquireArgs) (acquireReply, error) {
	mode := "r"
	if a.write {
		mode = "w"
	}
	call := scriptCall{
		keys: []string{k.lock, k.fence, k.waiters, k.channel},
		args: []any{a.owner, ms(a.ttl), mode, ms(a.minHold), a.waiter, ms(a.registration), s.publish, ms(a.fenceTTL)},
	}
	cmds, unacked, err := s.runScript(ctx, s.acquireScript, k.lock, []scriptCall{call}, true)
	if err != nil {
		return acquireReply{}, classify(err)
	}
	vals, err := cmds[0].Int64Slice()
	switch {
	case err != nil:
		return acquireReply{}, classify(err)
	case len(vals) != 2:
		return acquireReply{}, fmt.Errorf("guard: unexpected acquire reply %v", vals)
	case vals[0] != 1:
		return acquireReply{heldFor: time.Duration(vals[1]) * time.Millisecond}, nil
	}
	// Unacknowledged, the hold is acquired and an error: the Locker drops it,
	// since nobody may rely on a hold a failover could forget.
	return acquireReply{acquired: true, token: vals[1]}, unacked
}

func (s *redisStore) setCounts(ctx context.Context, k keys, a countArgs) (outcome, error) {
	call := scriptCall{
		keys: []string{k.lock, k.channel, k.waiters, k.doneMarker(a.owner)},
		args: []any{a.owner, a.writes, a.reads, s.publish, a.releaser, ms(a.marker)},
	}
	cmds, _, err := s.runScript(ctx, s.setCountsScript, k.lock, []scriptCall{call}, false)
	if err != nil {
		return 0, classify(err)
	}
	res, err := cmds[0].Int64()
	return outcome(res), classify(err)
}

func (s *redisStore) renew(ctx context.Context, batch []renewArgs) ([]renewReply, error) {
	calls := make([]scriptCall, len(batch))
	for i, r := range batch {
		calls[i] = scriptCall{keys: []string{r.lock}, args: []any{r.owner, ms(r.ttl)}}
	}
	cmds, unacked, err := s.runScript(ctx, s.renewScript, batch[0].lock, calls, true)
	if err != nil {
		return nil, classify(err)
	}
	out := make([]renewReply, len(batch))
	for i, c := range cmds {
		res, err := c.Int64()
		err = classify(err)
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

// scriptCall is one call of a script: its KEYS and ARGV.
type scriptCall struct {
	keys []string
	args []any
}

// runScript sends calls of sc in one round trip, followed by WAIT when ack
// is set and the store waits for replicas. A server whose script cache
// lacks sc (after a restart, a failover, on a new Cluster node) gets the
// source instead: one call is sent again as EVAL, which follows a Cluster
// redirection as EVALSHA does; a pipeline first has sc loaded on the node
// that serves route and is sent again, then as EVAL if that node was not the
// one that answered. It returns each call's reply; unacked, when too few
// replicas acknowledged; and err when the script could not be loaded.
func (s *redisStore) runScript(ctx context.Context, sc *redis.Script, route string, calls []scriptCall, ack bool) (cmds []*redis.Cmd, unacked, err error) {
	wait := ack && s.replicas > 0
	for attempt := 0; ; attempt++ {
		var waited *redis.Cmd
		switch {
		case len(calls) == 1 && !wait && attempt == 0:
			// One command needs no pipeline, and costs less without one.
			cmds = []*redis.Cmd{sc.EvalSha(ctx, s.client, calls[0].keys, calls[0].args...)}
		case len(calls) == 1 && !wait:
			cmds = []*redis.Cmd{sc.Eval(ctx, s.client, calls[0].keys, calls[0].args...)}
		default:
			cmds, waited = s.pipeline(ctx, sc, calls, wait, attempt == 2)
		}
		if !anyNoScript(cmds) || attempt == 2 || (attempt == 1 && len(calls) == 1 && !wait) {
			if waited != nil {
				unacked = s.checkAck(waited)
			}
			return cmds, unacked, nil
		}
		if attempt == 0 && (len(calls) > 1 || wait) {
			if err := sc.Load(ctx, s.scripter(ctx, route)).Err(); err != nil {
				return nil, nil, err
			}
		}
	}
}

// pipeline sends calls of sc, by hash or, with source, as EVAL, and WAIT
// after them when wait is set.
func (s *redisStore) pipeline(ctx context.Context, sc *redis.Script, calls []scriptCall, wait, source bool) (cmds []*redis.Cmd, waited *redis.Cmd) {
	pipe := s.client.Pipeline()
	cmds = make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		if source {
			cmds[i] = sc.Eval(ctx, pipe, c.keys, c.args...)
		} else {
			cmds[i] = sc.EvalSha(ctx, pipe, c.keys, c.args...)
		}
	}
	if wait {
		waited = pipe.Do(ctx, "WAIT", s.replicas, ms(s.replicaTimeout))
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	return cmds, waited
}

// checkAck reads WAIT's answer: nil when enough replicas acknowledged.
func (s *redisStore) checkAck(waited *redis.Cmd) error {
	n, err := waited.Int64()
	if err == nil && n >= int64(s.replicas) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %d of %d replicas within %v: %w", ErrNotReplicated, n, s.replicas, s.replicaTimeout, err)
	}
	return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, s.replicas, s.replicaTimeout)
}

// scripter returns where to load a script for the node that serves route:
// on Cluster that node's master alone, since ClusterClient.ScriptLoad waits
// for every master and a hung one would fail the healthy ones' requests.
func (s *redisStore) scripter(ctx context.Context, route string) redis.Scripter {
	if s.cluster != nil {
		if node, err := s.cluster.MasterForKey(ctx, route); err == nil {
			return node
		}
	}
	return s.client
}

// classify puts a go-redis error in the store's terms: a WRONGTYPE reply
// matches ErrWrongType, and an error that is not a reply from the server
// (a broken connection, a timeout) is a noReplyError: the request may have
// run.
func classify(err error) error {
	var reply redis.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &reply) && strings.HasPrefix(err.Error(), "WRONGTYPE"):
		return fmt.Errorf("%w: %s", ErrWrongType, strings.TrimPrefix(err.Error(), "WRONGTYPE "))
	case errors.As(err, &reply):
		return err
	default:
		return &noReplyError{err}
	}
}

func anyNoScript(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if err := c.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return true
		}
	}
	return false
}

func (s *redisStore) feedSlot(channel string) int {
	if s.cluster == nil {
		return noSlot
	}
	return hashSlot(channel)
}

func (s *redisStore) openFeed(ctx context.Context, channel string) (feed, bool) {
	if s.cluster != nil {
		// A Cluster PubSub connects to the node of its first channel.
		ps := s.client.SSubscribe(ctx, channel)
		return &redisFeed{ps: ps, msgs: ps.ChannelWithSubscriptions(), sharded: true}, true
	}
	ps := s.client.Subscribe(ctx)
	return &redisFeed{ps: ps, msgs: ps.ChannelWithSubscriptions()}, false
}

func (s *redisStore) unregister(ctx context.Context, k keys, locker string) error {
	return classify(s.client.ZRem(ctx, k.waiters, locker).Err())
}

// close releases nothing: the client belongs to the caller of New.
func (s *redisStore) close() error { return nil }

func (s *redisStore) claim(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	stored, err := s.client.SetNX(ctx, key, value, ttl).Result()
	return stored, classify(err)
}

func (s *redisStore) claimed(ctx context.Context, key string) ([]byte, bool, error) {
	value, err := s.client.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	return value, err == nil, classify(err)
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

// redisFeed is a PubSub connection; sharded (SSUBSCRIBE) on Cluster.
type redisFeed struct {
	ps      *redis.PubSub
	msgs    <-chan any
	sharded bool
}

func (f *redisFeed) subscribe(ctx context.Context, channel string) error {
	if f.sharded {
		return f.ps.SSubscribe(ctx, channel)
	}
	return f.ps.Subscribe(ctx, channel)
}

func (f *redisFeed) unsubscribe(ctx context.Context, channel string) error {
	if f.sharded {
		return f.ps.SUnsubscribe(ctx, channel)
	}
	return f.ps.Unsubscribe(ctx, channel)
}

func (f *redisFeed) read(confirmed func(string), message func(channel, payload string)) {
	for m := range f.msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				confirmed(m.Channel)
			}
		case *redis.Message:
			message(m.Channel, m.Payload)
		}
	}
}

func (f *redisFeed) close() error { return f.ps.Close() }

// ms converts d to whole milliseconds for a script, rounding a positive
// duration below 1ms up so that it does not read as "none".
func ms(d time.Duration) int64 {
	if d > 0 && d < time.Millisecond {
		return 1
	}
	return d.Milliseconds()
}
