// Package quorumstore keeps guard's leases on a quorum of independent
// Redis masters (Redlock): a redisstore per master, each asked the same
// question at once, and their answers combined by majority. It is the
// store under guard.NewQuorum.
package quorumstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/guard/internal/clock"
	"github.com/jobguard/jobguard/guard/internal/redisstore"
	"github.com/jobguard/jobguard/guard/internal/store"

	"github.com/redis/go-redis/v9"
)

// Store keeps leases on a quorum of independent masters. A master that
// does not answer in time counts as failed; an answer is ready as soon as
// a majority decides it, and the requests still on the wire finish on
// goroutines the store owns (Close waits for them).
//
// Combining answers (SetCounts, Renew), per hold:
//   - applied when a majority applied it;
//   - lost when a majority answered expired or taken: taken if more of them
//     said taken than expired, else expired;
//   - otherwise (answers split, or too few answered) an error: the Locker
//     retries a renewal or a release, and a re-entry fails. It is never
//     reported applied on fewer than a majority, and an error matches
//     ErrWrongType or ErrNotReplicated only when a majority said so.
//
// Acquire is in acquire.go, the notification feed in feed.go, inspection
// in inspect.go.
type Store struct {
	nodes  []*redisstore.Store
	quorum int // N/2 + 1
	clock  clock.Clock

	ttl, requestTimeout time.Duration // the Locker's, to scale per-lease timeouts

	renewing []chan struct{} // per master: renewal pipelines on the wire, up to nodeBatches
	turns    turns           // orders the requests about one owner to each master
	wg       sync.WaitGroup  // every request to a master
}

// Options configure a Store.
type Options struct {
	// TTL and RequestTimeout are the Locker's: a master's answer about a
	// lease is bounded by RequestTimeout scaled to the lease's TTL.
	TTL, RequestTimeout time.Duration
	// Replicas and ReplicaTimeout apply to each master on its own (see
	// redisstore.Options).
	Replicas       int
	ReplicaTimeout time.Duration
	// Clock is what the store keeps time by; nil is the real one.
	Clock clock.Clock
}

// nodeBatches bounds the renewal pipelines on the wire to one master, as
// the heartbeat bounds them per node.
const nodeBatches = 4

// New returns a Store on clients, one per master; the caller has checked
// them (an odd number, at least 3, each its own server).
func New(clients []redis.UniversalClient, o Options) *Store {
	c := o.Clock
	if c == nil {
		c = clock.Real{}
	}
	s := &Store{
		quorum:         len(clients)/2 + 1,
		clock:          c,
		ttl:            o.TTL,
		requestTimeout: o.RequestTimeout,
		turns:          turns{last: make(map[string]*turn)},
	}
	for _, client := range clients {
		// One master's grant is not a majority's: releases name the next
		// waiter, which then acquires on every master.
		n := redisstore.New(client, redisstore.Options{Replicas: o.Replicas, ReplicaTimeout: o.ReplicaTimeout, Quorum: true, Clock: c})
		s.nodes = append(s.nodes, n)
		s.renewing = append(s.renewing, make(chan struct{}, nodeBatches))
	}
	return s
}

// Caps: a quorum does not bound permits (see store.Caps).
func (s *Store) Caps() store.Caps { return store.Caps{} }

// nodeTimeout bounds one master's answer to a request about a lease of ttl:
// the request timeout, scaled with the TTL as a TTL lock option scales it.
func (s *Store) nodeTimeout(ttl time.Duration) time.Duration {
	if ttl == s.ttl {
		return s.requestTimeout
	}
	return time.Duration(float64(s.requestTimeout) * float64(ttl) / float64(s.ttl))
}

// deadline is when a request under ctx gives up on a master: ctx's
// deadline, or the request timeout from now.
func (s *Store) deadline(ctx context.Context) time.Time {
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
func each[T any](s *Store, ctx context.Context, deadline time.Time, call func(ctx context.Context, i int, n *redisstore.Store) (T, error)) <-chan nodeReply[T] {
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
func collect[T any](s *Store, ctx context.Context, deadline time.Time, replies <-chan nodeReply[T], done func(nodeReply[T]) bool) int {
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

func (t *tally) add(res store.Outcome, err error) {
	switch {
	case err != nil:
		t.errs = append(t.errs, err)
	case res == store.Applied:
		t.applied++
	case res == store.Taken:
		t.taken++
	default:
		t.expired++
	}
}

// decided returns the combined outcome once a majority agrees (see
// Store).
func (t *tally) decided(quorum int) (store.Outcome, bool) {
	switch {
	case t.applied >= quorum:
		return store.Applied, true
	case t.expired+t.taken >= quorum && t.taken > t.expired:
		return store.Taken, true
	case t.expired+t.taken >= quorum:
		return store.Expired, true
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
// store.ErrWrongType or store.ErrNotReplicated only when a majority answered so, and
// never a NoReplyError: the quorum has already dropped what its masters may
// have done.
func noQuorum(what string, quorum, masters int, errs []error) error {
	var msgs []string
	for _, err := range errs {
		// The sentinel, if any, is said once, below.
		msg := strings.TrimPrefix(err.Error(), store.ErrWrongType.Error()+": ")
		msgs = append(msgs, strings.TrimPrefix(msg, store.ErrNotReplicated.Error()+": "))
	}
	slices.Sort(msgs)
	msgs = slices.Compact(msgs)
	detail := strings.Join(msgs, "; ")
	if len(errs) == 0 {
		detail = "answers split"
	}
	for _, sentinel := range []error{store.ErrWrongType, store.ErrNotReplicated} {
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

func (s *Store) SetCounts(ctx context.Context, k store.Keys, a store.CountArgs) (store.Outcome, error) {
	start, deadline := s.clock.Now(), s.deadline(ctx)
	turn := s.turns.next(a.Owner, len(s.nodes))
	replies := each(s, ctx, deadline, func(ctx context.Context, i int, n *redisstore.Store) (store.Outcome, error) {
		defer turn.end(i)
		if err := turn.wait(ctx, i); err != nil {
			return 0, err
		}
		return n.SetCounts(ctx, k, a)
	})
	var t tally
	answered := collect(s, ctx, deadline, replies, func(r nodeReply[store.Outcome]) bool {
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
func (s *Store) Renew(ctx context.Context, batch []store.RenewArgs) ([]store.RenewReply, error) {
	start, deadline := s.clock.Now(), s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, i int, n *redisstore.Store) ([]store.RenewReply, error) {
		select {
		case s.renewing[i] <- struct{}{}:
		default:
			return nil, errors.New("earlier renewals still on the wire")
		}
		defer func() { <-s.renewing[i] }()
		return n.Renew(ctx, batch)
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
	answered := collect(s, ctx, deadline, replies, func(r nodeReply[[]store.RenewReply]) bool {
		for i := range tallies {
			switch {
			case r.err != nil:
				tallies[i].add(0, r.err)
			case len(r.v) != len(batch):
				tallies[i].add(0, fmt.Errorf("%d renewal replies for %d leases", len(r.v), len(batch)))
			default:
				tallies[i].add(r.v[i].Outcome, r.v[i].Err)
			}
		}
		return settled()
	})
	out := make([]store.RenewReply, len(batch))
	for i := range tallies {
		t := &tallies[i]
		if res, ok := t.decided(s.quorum); ok {
			out[i] = store.RenewReply{Outcome: res}
			continue
		}
		t.errs = missing(t.errs, answered, len(s.nodes), deadline.Sub(start))
		out[i] = store.RenewReply{Err: t.err("renew", s.quorum, len(s.nodes))}
	}
	return out, nil
}

// renewalGroup puts every hold in one group: a group spans all masters, and
// each of its pipelines goes to every master at once (renew).
func (s *Store) RenewalGroup(context.Context, string) string { return "" }

// withdraw takes the acquisition's registration out of the lock's queue on
// every master. removed is true only when every master answered: a quorum
// never grants a key (see New), but the Locker then drops
// whatever a master that did not answer may hold for it.
func (s *Store) Withdraw(ctx context.Context, k store.Keys, a store.AcquireArgs) (bool, error) {
	deadline := s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisstore.Store) (bool, error) {
		return n.Withdraw(ctx, k, a)
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
func (s *Store) ClaimFenced(ctx context.Context, fence, key string, token int64, value []byte, ttl time.Duration) (int64, error) {
	start, deadline := s.clock.Now(), s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisstore.Store) (int64, error) {
		return n.ClaimFenced(ctx, fence, key, token, value, ttl)
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
func (s *Store) Charge(ctx context.Context, key string, amount, limit int64, window time.Duration) (bool, time.Duration, error) {
	type answer struct {
		spent bool
		left  time.Duration
	}
	start, deadline := s.clock.Now(), s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisstore.Store) (answer, error) {
		spent, left, err := n.Charge(ctx, key, amount, limit, window)
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
func (s *Store) EvictionPolicies(ctx context.Context) ([]store.ServerPolicy, error) {
	deadline := s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisstore.Store) ([]store.ServerPolicy, error) {
		return n.EvictionPolicies(ctx)
	})
	var policies []store.ServerPolicy
	var errs []error
	collect(s, ctx, deadline, replies, func(r nodeReply[[]store.ServerPolicy]) bool {
		policies = append(policies, r.v...)
		if r.err != nil {
			errs = append(errs, r.err)
		}
		return false
	})
	return policies, errors.Join(errs...)
}

// Close waits for the requests still on the wire to every master, which
// go-redis bounds by each client's read timeout. The clients belong to the
// caller of NewQuorum.
func (s *Store) Close() error {
	s.wg.Wait()
	return nil
}

var _ store.Store = (*Store)(nil)
