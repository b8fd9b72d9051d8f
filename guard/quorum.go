package guard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewQuorum returns a Locker that holds its leases on a quorum of N
// independent Redis masters (Redlock): N odd and at least 3, each client a
// *redis.Client of its own server (standalone, or a Sentinel group through
// redis.NewFailoverClient), never a Cluster's. A hold counts when a majority
// (N/2 + 1) of the masters granted it within its validity; renewals and
// releases need a majority too. The Locker's API and semantics are those of
// New: reentrancy through the context, read-write leases, waiting on release
// notifications, MinHold, heartbeats that cancel the job before the lease
// could end, fencing tokens that strictly increase (see the package doc,
// Redlock, for what each costs and assumes).
//
// Every option means what it means for New. WithRequestTimeout also bounds
// each master's answer to an acquisition: a master that does not answer in
// time counts as failed, so the default (TTL/10) keeps an acquisition far
// inside the TTL. WithReplicaAck applies to each master on its own: each
// waits for n of its replicas. It returns an error matching ErrInvalid for
// a nil, duplicate (the same client, or the same address) or Cluster client,
// for an even number of clients or fewer than 3, and for an option that does
// not fit.
func NewQuorum(clients []redis.UniversalClient, opts ...Option) (*Locker, error) {
	if err := checkQuorum(clients); err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return newLocker(newQuorumStore(clients, cfg, realClock{}), realClock{}, cfg), nil
}

// checkQuorum validates NewQuorum's clients.
func checkQuorum(clients []redis.UniversalClient) error {
	if n := len(clients); n < 3 || n%2 == 0 {
		return fmt.Errorf("%w: a quorum needs an odd number of masters, at least 3; got %d", ErrInvalid, n)
	}
	byClient := make(map[*redis.Client]int, len(clients))
	byAddr := make(map[string]int, len(clients))
	for i, c := range clients {
		if isNil(c) {
			return fmt.Errorf("%w: quorum client %d is nil", ErrInvalid, i)
		}
		rc, ok := c.(*redis.Client)
		if !ok {
			return fmt.Errorf("%w: quorum client %d has type %T: each master must be a *redis.Client of its own server (a Cluster's masters are not independent)", ErrInvalid, i, c)
		}
		if j, dup := byClient[rc]; dup {
			return fmt.Errorf("%w: quorum clients %d and %d are the same client", ErrInvalid, j, i)
		}
		byClient[rc] = i
		// A failover client's Addr names no server; its Sentinel group
		// cannot be compared here.
		if addr := rc.Options().Addr; addr != "" && addr != "FailoverClient" {
			if j, dup := byAddr[addr]; dup {
				return fmt.Errorf("%w: quorum clients %d and %d both connect to %s", ErrInvalid, j, i, addr)
			}
			byAddr[addr] = i
		}
	}
	return nil
}

// quorumStore keeps leases on a quorum of independent masters: a redisStore
// per master, each asked the same question at once, and their answers
// combined. A master that does not answer in time counts as failed; an
// answer is ready as soon as a majority decides it, and the requests still
// on the wire finish on goroutines the store owns (close waits for them).
//
// Combining answers (setCounts, renew), per hold:
//   - applied when a majority applied it;
//   - lost when a majority answered expired or taken: taken if more of them
//     said taken than expired, else expired;
//   - otherwise (answers split, or too few answered) an error: the Locker
//     retries a renewal or a release, and a re-entry fails. It is never
//     reported applied on fewer than a majority, and an error matches
//     ErrWrongType or ErrNotReplicated only when a majority said so.
//
// acquire is in quorum_acquire.go and the notification feed in
// quorum_feed.go.
type quorumStore struct {
	nodes  []*redisStore
	quorum int // N/2 + 1
	clock  clock

	ttl, requestTimeout time.Duration // the Locker's, to scale per-lease timeouts
	writeFence          *redis.Script // write_fence.lua

	renewing []chan struct{} // per master: renewal pipelines on the wire, up to nodeBatches
	turns    turns           // orders the requests about one owner to each master
	wg       sync.WaitGroup  // every request to a master
}

func newQuorumStore(clients []redis.UniversalClient, cfg config, c clock) *quorumStore {
	s := &quorumStore{
		quorum:         len(clients)/2 + 1,
		clock:          c,
		ttl:            cfg.ttl,
		requestTimeout: cfg.requestTimeout,
		writeFence:     redis.NewScript(writeFenceLua),
		turns:          turns{last: make(map[string]*turn)},
	}
	for _, c := range clients {
		n := newRedisStore(c, cfg.replicas, cfg.replicaTimeout)
		// One master's grant is not a majority's: releases name the next
		// waiter, which then acquires on every master.
		n.noGrants = true
		s.nodes = append(s.nodes, n)
		s.renewing = append(s.renewing, make(chan struct{}, nodeBatches))
	}
	return s
}

// nodeTimeout bounds one master's answer to a request about a lease of ttl:
// the request timeout, scaled with the TTL as a TTL lock option scales it.
func (s *quorumStore) nodeTimeout(ttl time.Duration) time.Duration {
	if ttl == s.ttl {
		return s.requestTimeout
	}
	return time.Duration(float64(s.requestTimeout) * float64(ttl) / float64(s.ttl))
}

// deadline is when a request under ctx gives up on a master: ctx's
// deadline, or the request timeout from now.
func (s *quorumStore) deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return s.clock.Now().Add(s.requestTimeout)
}

// nodeReply is one master's answer.
type nodeReply[T any] struct {
	node int
	v    T
	err  error
}

// each sends call to every master at once, each on a goroutine of the store
// with deadline, detached from ctx's cancellation (not its values): a
// request the caller no longer waits for still completes, so a release or a
// drop reaches a slow master too. Answers arrive on the returned channel,
// which has room for all of them.
func each[T any](s *quorumStore, ctx context.Context, deadline time.Time, call func(ctx context.Context, i int, n *redisStore) (T, error)) <-chan nodeReply[T] {
	out := make(chan nodeReply[T], len(s.nodes))
	base := context.WithoutCancel(ctx)
	for i, n := range s.nodes {
		s.wg.Go(func() {
			ctx, cancel := context.WithDeadline(base, deadline)
			defer cancel()
			v, err := call(ctx, i, n)
			out <- nodeReply[T]{i, v, err}
		})
	}
	return out
}

// collect reads answers until done reports a decision, every master has
// answered, or the deadline passes or ctx is done. It returns how many
// answered.
func collect[T any](s *quorumStore, ctx context.Context, deadline time.Time, replies <-chan nodeReply[T], done func(nodeReply[T]) bool) int {
	timer := s.clock.NewTimer(deadline.Sub(s.clock.Now()))
	defer timer.Stop()
	for answered := 0; answered < len(s.nodes); {
		select {
		case r := <-replies:
			answered++
			if done(r) {
				return answered
			}
		case <-timer.C():
			return answered
		case <-ctx.Done():
			return answered
		}
	}
	return len(s.nodes)
}

// turns orders the requests about one owner's hold to each master: the
// attempts of one acquisition, its count updates and its release reach
// every master in the order they were made, though each travels on a
// goroutine and a connection of its own. So the drop of a failed attempt
// never lands on the next attempt's hold (both have the same owner id), and
// a release never lands before a late acquisition of its own.
type turns struct {
	mu   sync.Mutex
	last map[string]*turn // the latest turn per owner
}

// turn is one request about an owner to every master.
type turn struct {
	ts    *turns
	owner string
	prev  *turn           // the owner's turn before, if any
	done  []chan struct{} // per master: closed when this turn's request there is over, and prev's
	left  atomic.Int32    // masters where it is not over
}

func (ts *turns) next(owner string, masters int) *turn {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := &turn{ts: ts, owner: owner, prev: ts.last[owner], done: make([]chan struct{}, masters)}
	for i := range t.done {
		t.done[i] = make(chan struct{})
	}
	t.left.Store(int32(masters))
	ts.last[owner] = t
	return t
}

// wait waits until the owner's previous request to master i is over.
func (t *turn) wait(ctx context.Context, i int) error {
	if t.prev == nil {
		return nil
	}
	select {
	case <-t.prev.done[i]:
		return nil
	case <-ctx.Done():
		return errors.New("an earlier request about this hold is still on the wire")
	}
}

// end marks the request to master i over, once the previous one is too.
func (t *turn) end(i int) {
	if t.prev != nil {
		<-t.prev.done[i]
	}
	close(t.done[i])
	if t.left.Add(-1) > 0 {
		return
	}
	t.prev = nil // every part has ended: let the chain go
	t.ts.mu.Lock()
	if t.ts.last[t.owner] == t {
		delete(t.ts.last, t.owner)
	}
	t.ts.mu.Unlock()
}

// tally counts the masters' answers about one hold.
type tally struct {
	applied, expired, taken int
	errs                    []error
}

func (t *tally) add(res outcome, err error) {
	switch {
	case err != nil:
		t.errs = append(t.errs, err)
	case res == applied:
		t.applied++
	case res == taken:
		t.taken++
	default:
		t.expired++
	}
}

// decided returns the combined outcome once a majority agrees (see
// quorumStore).
func (t *tally) decided(quorum int) (outcome, bool) {
	switch {
	case t.applied >= quorum:
		return applied, true
	case t.expired+t.taken >= quorum && t.taken > t.expired:
		return taken, true
	case t.expired+t.taken >= quorum:
		return expired, true
	}
	return 0, false
}

// hopeless reports that no outcome can reach a majority whatever the
// masters still to answer say.
func (t *tally) hopeless(quorum, masters int) bool {
	pending := masters - t.applied - t.expired - t.taken - len(t.errs)
	return t.applied+pending < quorum && t.expired+t.taken+pending < quorum
}

func (t *tally) err(op string, quorum, masters int) error {
	return noQuorum(fmt.Sprintf("%s: %d of %d masters applied, %d expired, %d taken", op, t.applied, masters, t.expired, t.taken), quorum, masters, t.errs)
}

// noQuorum is the error of a request that no majority decided. It matches
// ErrWrongType or ErrNotReplicated only when a majority answered so, and
// never a noReplyError: the quorum has already dropped what its masters may
// have done.
func noQuorum(what string, quorum, masters int, errs []error) error {
	var msgs []string
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	slices.Sort(msgs)
	msgs = slices.Compact(msgs)
	detail := strings.Join(msgs, "; ")
	if len(errs) == 0 {
		detail = "answers split"
	}
	for _, sentinel := range []error{ErrWrongType, ErrNotReplicated} {
		n := 0
		for _, err := range errs {
			if errors.Is(err, sentinel) {
				n++
			}
		}
		if n >= quorum {
			return fmt.Errorf("guard: no quorum (%d needed): %s: %w: %s", quorum, what, sentinel, detail)
		}
	}
	return fmt.Errorf("guard: no quorum (%d needed): %s: %s", quorum, what, detail)
}

// errNoAnswer is a master's failure to answer before the deadline.
func errNoAnswer(d time.Duration) error {
	return fmt.Errorf("no answer within %v", d.Round(time.Millisecond))
}

// missing adds an error for each master that did not answer.
func missing(errs []error, answered, masters int, d time.Duration) []error {
	for range masters - answered {
		errs = append(errs, errNoAnswer(d))
	}
	return errs
}

func (s *quorumStore) setCounts(ctx context.Context, k keys, a countArgs) (outcome, error) {
	start, deadline := s.clock.Now(), s.deadline(ctx)
	turn := s.turns.next(a.owner, len(s.nodes))
	replies := each(s, ctx, deadline, func(ctx context.Context, i int, n *redisStore) (outcome, error) {
		defer turn.end(i)
		if err := turn.wait(ctx, i); err != nil {
			return 0, err
		}
		return n.setCounts(ctx, k, a)
	})
	var t tally
	answered := collect(s, ctx, deadline, replies, func(r nodeReply[outcome]) bool {
		t.add(r.v, r.err)
		_, ok := t.decided(s.quorum)
		return ok || t.hopeless(s.quorum, len(s.nodes))
	})
	if res, ok := t.decided(s.quorum); ok {
		return res, nil
	}
	t.errs = missing(t.errs, answered, len(s.nodes), deadline.Sub(start))
	return 0, t.err("set counts", s.quorum, len(s.nodes))
}

// renew sends the batch to every master in a pipeline of its own and
// combines the answers per hold. It returns as soon as every hold is
// decided, so a dead master costs no renewal its timeout. A master that
// still has nodeBatches renewal pipelines on the wire is not sent another:
// it counts as failed for this batch, so a hung master does not pile up
// requests.
func (s *quorumStore) renew(ctx context.Context, batch []renewArgs) ([]renewReply, error) {
	start, deadline := s.clock.Now(), s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, i int, n *redisStore) ([]renewReply, error) {
		select {
		case s.renewing[i] <- struct{}{}:
		default:
			return nil, errors.New("earlier renewals still on the wire")
		}
		defer func() { <-s.renewing[i] }()
		return n.renew(ctx, batch)
	})
	tallies := make([]tally, len(batch))
	settled := func() bool {
		for i := range tallies {
			if _, ok := tallies[i].decided(s.quorum); !ok && !tallies[i].hopeless(s.quorum, len(s.nodes)) {
				return false
			}
		}
		return true
	}
	answered := collect(s, ctx, deadline, replies, func(r nodeReply[[]renewReply]) bool {
		for i := range tallies {
			switch {
			case r.err != nil:
				tallies[i].add(0, r.err)
			case len(r.v) != len(batch):
				tallies[i].add(0, fmt.Errorf("%d renewal replies for %d leases", len(r.v), len(batch)))
			default:
				tallies[i].add(r.v[i].outcome, r.v[i].err)
			}
		}
		return settled()
	})
	out := make([]renewReply, len(batch))
	for i := range tallies {
		t := &tallies[i]
		if res, ok := t.decided(s.quorum); ok {
			out[i] = renewReply{outcome: res}
			continue
		}
		t.errs = missing(t.errs, answered, len(s.nodes), deadline.Sub(start))
		out[i] = renewReply{err: t.err("renew", s.quorum, len(s.nodes))}
	}
	return out, nil
}

// renewalGroup puts every hold in one group: a group spans all masters, and
// each of its pipelines goes to every master at once (renew).
func (s *quorumStore) renewalGroup(context.Context, string) string { return "" }

// claim stores value on every master that has none. It reports true when a
// majority stored it, false when a majority already had a value, and an
// error otherwise; a value stored on fewer than a majority is left to expire
// with ttl (only its owner could tell it from another's).
func (s *quorumStore) claim(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	start, deadline := s.clock.Now(), s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisStore) (bool, error) {
		return n.claim(ctx, key, value, ttl)
	})
	var stored, refused int
	var errs []error
	answered := collect(s, ctx, deadline, replies, func(r nodeReply[bool]) bool {
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.v:
			stored++
		default:
			refused++
		}
		pending := len(s.nodes) - stored - refused - len(errs)
		return stored >= s.quorum || refused >= s.quorum || (stored+pending < s.quorum && refused+pending < s.quorum)
	})
	switch {
	case stored >= s.quorum:
		return true, nil
	case refused >= s.quorum:
		return false, nil
	}
	errs = missing(errs, answered, len(s.nodes), deadline.Sub(start))
	return false, noQuorum(fmt.Sprintf("claim: %d of %d masters stored it, %d had a value", stored, len(s.nodes), refused), s.quorum, len(s.nodes), errs)
}

// claimed returns the value a majority of the masters stores under key. When
// every master answered and no value has a majority, nothing is claimed; when
// some did not answer and none has, it is an error.
func (s *quorumStore) claimed(ctx context.Context, key string) ([]byte, bool, error) {
	type value struct {
		b  []byte
		ok bool
	}
	start, deadline := s.clock.Now(), s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisStore) (value, error) {
		b, ok, err := n.claimed(ctx, key)
		return value{b, ok}, err
	})
	votes := make(map[string]int) // by value; "\x00none" for no value (a value is never that with ok false)
	var errs []error
	var winner *value
	answered := collect(s, ctx, deadline, replies, func(r nodeReply[value]) bool {
		if r.err != nil {
			errs = append(errs, r.err)
			return false
		}
		id := "\x00none"
		if r.v.ok {
			id = "\x01" + string(r.v.b)
		}
		if votes[id]++; votes[id] >= s.quorum {
			winner = &r.v
			return true
		}
		return false
	})
	switch {
	case winner != nil && winner.ok:
		return winner.b, true, nil
	case winner != nil, answered == len(s.nodes) && len(errs) == 0:
		return nil, false, nil
	}
	errs = missing(errs, answered, len(s.nodes), deadline.Sub(start))
	return nil, false, noQuorum("claimed: no value on a majority", s.quorum, len(s.nodes), errs)
}

// withdraw takes the acquisition's registration out of the lock's queue on
// every master. removed is true only when every master answered: a quorum
// never grants a key (see newQuorumStore), but the Locker then drops
// whatever a master that did not answer may hold for it.
func (s *quorumStore) withdraw(ctx context.Context, k keys, a acquireArgs) (bool, error) {
	deadline := s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisStore) (bool, error) {
		return n.withdraw(ctx, k, a)
	})
	var errs []error
	answered := collect(s, ctx, deadline, replies, func(r nodeReply[bool]) bool {
		if r.err != nil {
			errs = append(errs, r.err)
		}
		return false
	})
	return answered == len(s.nodes) && len(errs) == 0, errors.Join(errs...)
}

// claimFenced stores value on every master whose counter is token, and
// returns token when a majority did: the masters that the acquisition's
// token was written to hold exactly it until a newer hold mints another.
// Otherwise, once a majority has answered, it returns the largest other
// counter if that is above token (a newer hold began), else 0 if a master
// has none, else the largest; it may so refuse a token whose majority is
// partly unreachable (a master that granted the hold late minted a larger
// one of its own). Stores on fewer than a majority are not rolled back, and
// Claimed, which needs a majority, does not see them.
func (s *quorumStore) claimFenced(ctx context.Context, fence, key string, token int64, value []byte, ttl time.Duration) (int64, error) {
	start, deadline := s.clock.Now(), s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisStore) (int64, error) {
		return n.claimFenced(ctx, fence, key, token, value, ttl)
	})
	stored := 0
	var others []int64
	var errs []error
	answered := collect(s, ctx, deadline, replies, func(r nodeReply[int64]) bool {
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.v == token:
			stored++
		default:
			others = append(others, r.v)
		}
		pending := len(s.nodes) - stored - len(others) - len(errs)
		return stored >= s.quorum || stored+pending < s.quorum
	})
	switch {
	case stored >= s.quorum:
		return token, nil
	case stored+len(others) >= s.quorum:
		switch top := slices.Max(others); {
		case top > token:
			return top, nil
		case slices.Contains(others, 0):
			return 0, nil
		default:
			return top, nil
		}
	}
	errs = missing(errs, answered, len(s.nodes), deadline.Sub(start))
	return 0, noQuorum(fmt.Sprintf("claim fenced: %d of %d masters stored it", stored, len(s.nodes)), s.quorum, len(s.nodes), errs)
}

// charge spends on every master. It reports spent when a majority spent,
// refused when a majority refused, and an error otherwise; the window's
// end is the latest a master of the deciding majority reported. Budgets
// on a minority may then differ from the majority's: a budget is an
// allowance, and a master that spent more only refuses sooner.
func (s *quorumStore) charge(ctx context.Context, key string, amount, limit int64, window time.Duration) (bool, time.Duration, error) {
	type answer struct {
		spent bool
		left  time.Duration
	}
	start, deadline := s.clock.Now(), s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisStore) (answer, error) {
		spent, left, err := n.charge(ctx, key, amount, limit, window)
		return answer{spent, left}, err
	})
	var spent, refused int
	var spentLeft, refusedLeft time.Duration
	var errs []error
	answered := collect(s, ctx, deadline, replies, func(r nodeReply[answer]) bool {
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.v.spent:
			spent++
			spentLeft = max(spentLeft, r.v.left)
		default:
			refused++
			refusedLeft = max(refusedLeft, r.v.left)
		}
		pending := len(s.nodes) - spent - refused - len(errs)
		return spent >= s.quorum || refused >= s.quorum || (spent+pending < s.quorum && refused+pending < s.quorum)
	})
	switch {
	case spent >= s.quorum:
		return true, spentLeft, nil
	case refused >= s.quorum:
		return false, refusedLeft, nil
	}
	errs = missing(errs, answered, len(s.nodes), deadline.Sub(start))
	return false, 0, noQuorum(fmt.Sprintf("charge: %d of %d masters spent, %d refused", spent, len(s.nodes), refused), s.quorum, len(s.nodes), errs)
}

// evictionPolicies asks every master at once.
func (s *quorumStore) evictionPolicies(ctx context.Context) ([]serverPolicy, error) {
	deadline := s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisStore) ([]serverPolicy, error) {
		return n.evictionPolicies(ctx)
	})
	var policies []serverPolicy
	var errs []error
	collect(s, ctx, deadline, replies, func(r nodeReply[[]serverPolicy]) bool {
		policies = append(policies, r.v...)
		if r.err != nil {
			errs = append(errs, r.err)
		}
		return false
	})
	return policies, errors.Join(errs...)
}

// close waits for the requests still on the wire to every master, which
// go-redis bounds by each client's read timeout. The clients belong to the
// caller of NewQuorum.
func (s *quorumStore) close() error {
	s.wg.Wait()
	return nil
}
