package quorumstore

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jobguard/jobguard/guard/internal/redisstore"
	"github.com/jobguard/jobguard/guard/internal/store"
)

// acquire is one Redlock attempt: acquire.lua on every master at once, each
// bounded by the node timeout. The hold stands when a majority granted it,
// the token is on a majority, and all of that within the validity (TTL -
// elapsed since the request went out - drift); otherwise it is dropped on
// every master that granted it or did not answer, at once.
//
// The token is the largest a majority returned. Masters return different
// ones (each counter is floored by its own clock), so it is written back
// (write_fence.lua) to the masters whose counter differs before it is
// handed out, and the answer waits until a majority of the masters that
// granted the hold have it. Any later majority then includes one of them,
// whose acquire.lua returns more: tokens increase while a majority keeps
// its data. The write-back goes to every master, awaited or not, so a single
// master that later restarts empty does not lose the token either, and a
// master that granted the hold too late to count has its own larger mint
// brought down to the token (ClaimFenced compares counters with it). It
// costs a second round trip (in parallel) whenever the masters disagree,
// which is nearly always.
//
// Busy, when a majority answered and did not grant it: heldFor is how long
// until enough masters could be free for a majority, by their answers. A
// busy answer after a split vote (some masters granted it) comes back
// after a random delay (see backOff).
func (s *Store) Acquire(ctx context.Context, k store.Keys, a store.AcquireArgs) (store.AcquireReply, error) {
	start := s.clock.Now()
	timeout := s.nodeTimeout(a.TTL)
	validUntil := start.Add(a.TTL - store.Drift(a.TTL))
	r := &acquireRound{
		s: s, k: k, a: a, timeout: timeout,
		votes:   make(chan nodeReply[store.AcquireReply], len(s.nodes)),
		wrote:   make(chan nodeReply[struct{}], len(s.nodes)),
		fenced:  make(chan struct{}),
		settled: make(chan struct{}),
	}
	keep := false
	defer func() { r.settle(keep) }()
	deadline := earliest(ctx, start.Add(timeout), validUntil)
	base := context.WithoutCancel(ctx)
	turn := s.turns.next(a.Owner, len(s.nodes))
	for i, n := range s.nodes {
		s.wg.Go(func() {
			defer turn.end(i)
			r.work(base, turn, i, n, deadline)
		})
	}

	v := acquireVotes{masters: len(s.nodes), quorum: s.quorum, granted: make(map[int]int64)}
	var majority time.Duration // until a majority had answered
	answered := collect(s, ctx, deadline, r.votes, func(r nodeReply[store.AcquireReply]) bool {
		done := v.add(r)
		if len(v.granted)+len(v.heldFor)+len(v.errs) == s.quorum {
			majority = s.clock.Now().Sub(start)
		}
		return done
	})
	if len(v.granted) < s.quorum {
		rep, err := v.notGranted(answered, deadline.Sub(start))
		if err == nil && len(v.granted) > 0 {
			r.settle(false)
			s.backOff(ctx, majority, timeout)
		}
		return rep, err
	}
	token, agree := v.token()
	r.fence(token)
	if agree < s.quorum {
		if err := r.written(ctx, v.granted, agree, earliest(ctx, s.clock.Now().Add(timeout), validUntil)); err != nil {
			return store.AcquireReply{}, err
		}
	}
	if elapsed := s.clock.Now().Sub(start); !s.clock.Now().Before(validUntil) {
		return store.AcquireReply{}, fmt.Errorf("guard: a majority granted the hold after %v, past its validity (TTL %v - drift)", elapsed.Round(time.Millisecond), a.TTL)
	}
	keep = true
	return store.AcquireReply{Acquired: true, Token: token}, nil
}

// earliest returns the earliest of times and ctx's deadline.
func earliest(ctx context.Context, times ...time.Time) time.Time {
	if d, ok := ctx.Deadline(); ok {
		times = append(times, d)
	}
	return slices.MinFunc(times, func(a, b time.Time) int { return a.Compare(b) })
}

// acquireRound is one attempt's requests to the masters: one goroutine per
// master (work) runs the master's part, and the attempt publishes the
// decisions they wait for by closing fenced, then settled.
type acquireRound struct {
	s       *Store
	k       store.Keys
	a       store.AcquireArgs
	timeout time.Duration
	votes   chan nodeReply[store.AcquireReply]
	wrote   chan nodeReply[struct{}]

	token   int64 // to write back where it differs, 0 for none; set before fenced is closed
	fenced  chan struct{}
	keep    bool // the hold stands; false drops it; set before settled is closed
	settled chan struct{}
}

// work is one master's part of an attempt, in its turn among the owner's
// requests (see turns): acquire, write the token back if asked, and drop
// the hold if the attempt failed, in this order, so that a drop never
// overtakes a late acquisition of its own.
func (r *acquireRound) work(base context.Context, turn *turn, i int, n *redisstore.Store, deadline time.Time) {
	ctx, cancel := context.WithDeadline(base, deadline)
	var rep store.AcquireReply
	err := turn.wait(ctx, i)
	sent := err == nil
	if sent {
		rep, err = n.Acquire(ctx, r.k, r.a)
	}
	cancel()
	r.votes <- nodeReply[store.AcquireReply]{i, rep, err}
	<-r.fenced
	if sent && r.token > 0 && (err != nil || !rep.Acquired || rep.Token != r.token) {
		var minted int64 // this master's own token of this attempt, if it granted it
		if err == nil && rep.Acquired {
			minted = rep.Token
		}
		ctx, cancel := context.WithTimeout(base, r.timeout)
		rerr := n.WriteFence(ctx, r.k, r.token, minted, r.a)
		cancel()
		r.wrote <- nodeReply[struct{}]{node: i, err: rerr}
	}
	<-r.settled
	if sent && !r.keep && (rep.Acquired || err != nil) {
		// It may have run: a hold nobody was given must not block the key.
		ctx, cancel := context.WithTimeout(base, r.timeout)
		_, _ = n.SetCounts(ctx, r.k, store.CountArgs{Owner: r.a.Owner, Marker: store.MarkerDrop})
		cancel()
	}
}

// fence tells the masters' goroutines which token to write back.
func (r *acquireRound) fence(token int64) {
	r.token = token
	close(r.fenced)
}

// settle tells them whether the hold stands, once; fence must not be
// called after. Only the attempt's goroutine calls them.
func (r *acquireRound) settle(keep bool) {
	select {
	case <-r.settled:
		return
	default:
	}
	select {
	case <-r.fenced:
	default:
		close(r.fenced)
	}
	r.keep = keep
	close(r.settled)
}

// backOff sleeps a random while, up to four times what a majority took to
// answer the split attempt (at least 1ms, at most limit), before its busy
// answer goes back. The
// contenders of a split vote dropped their holds and are woken together by
// those drops' notifications; without it they would try together again,
// and split again, for as long as their timing stays in step (Redlock's
// random retry delay).
func (s *Store) backOff(ctx context.Context, took, limit time.Duration) {
	d := rand.N(min(max(4*took, time.Millisecond), limit))
	timer := s.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
	case <-ctx.Done():
	}
}

// written waits until a majority of the masters that granted the hold (as
// counted in granted) have the token: agree of them returned it, the others
// write it back.
func (r *acquireRound) written(ctx context.Context, granted map[int]int64, agree int, deadline time.Time) error {
	s := r.s
	waiting := len(granted) - agree
	var errs []error
	timer := s.clock.NewTimer(deadline.Sub(s.clock.Now()))
	defer timer.Stop()
	for agree < s.quorum && agree+waiting >= s.quorum {
		select {
		case w := <-r.wrote:
			if _, ok := granted[w.node]; !ok {
				continue // a master that did not count: written at best effort
			}
			waiting--
			if w.err != nil {
				errs = append(errs, w.err)
			} else {
				agree++
			}
		case <-timer.C():
			errs = missing(errs, 0, waiting, r.timeout)
			waiting = 0
		case <-ctx.Done():
			errs = append(errs, context.Cause(ctx))
			waiting = 0
		}
	}
	if agree >= s.quorum {
		return nil
	}
	return noQuorum(fmt.Sprintf("fencing token %d written to %d of the %d masters that granted the hold", r.token, agree, len(granted)), s.quorum, len(s.nodes), errs)
}

// acquireVotes are the masters' answers to one attempt.
type acquireVotes struct {
	masters, quorum int
	granted         map[int]int64 // master -> token, for those that granted the hold
	heldFor         []time.Duration
	errs            []error
}

// add counts one answer and reports whether the attempt is decided: a
// majority granted the hold, or it cannot and no more answers could make it
// busy rather than failed.
func (v *acquireVotes) add(r nodeReply[store.AcquireReply]) bool {
	switch {
	case r.err != nil:
		// Includes a hold granted but not acknowledged by the replicas
		// WithReplicaAck asks for: not one to count on.
		v.errs = append(v.errs, r.err)
	case r.v.Acquired:
		v.granted[r.node] = r.v.Token
	default:
		v.heldFor = append(v.heldFor, r.v.HeldFor)
	}
	pending := v.masters - len(v.granted) - len(v.heldFor) - len(v.errs)
	return len(v.granted) >= v.quorum ||
		(len(v.granted)+pending < v.quorum && (len(v.granted)+len(v.heldFor) >= v.quorum || pending == 0))
}

// token returns the largest token granted and how many masters returned it.
func (v *acquireVotes) token() (token int64, agree int) {
	token = slices.Max(slices.Collect(maps.Values(v.granted)))
	for _, t := range v.granted {
		if t == token {
			agree++
		}
	}
	return token, agree
}

// notGranted is the answer to an attempt that no majority granted: busy
// when a majority answered, heldFor being how long until enough of the busy
// masters are free to make a majority with those that granted it; else an
// error.
func (v *acquireVotes) notGranted(answered int, waited time.Duration) (store.AcquireReply, error) {
	if need := v.quorum - len(v.granted); len(v.heldFor) >= need {
		slices.Sort(v.heldFor)
		return store.AcquireReply{HeldFor: v.heldFor[need-1]}, nil
	}
	errs := missing(v.errs, answered, v.masters, waited)
	return store.AcquireReply{}, noQuorum(fmt.Sprintf("acquire: %d of %d masters granted the hold, %d answered busy", len(v.granted), v.masters, len(v.heldFor)), v.quorum, v.masters, errs)
}
