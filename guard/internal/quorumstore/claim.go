package quorumstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/jobguard/jobguard/guard/internal/redisstore"
)

// Claims on a quorum. Each master stores a claim with SET NX, and a claim
// stands when a majority stored it. Claimers that ask at once (a cron tick
// fires on every instance in the same second) can split the masters so
// that none has a majority: each then takes back what it stored and tries
// again after a random delay, as Redlock's contenders do, until one gets a
// majority or the request's time is up. To take back only its own, a
// claimer stores its value tagged with a nonce of its own (claimTag); a
// claimer that finds another's value on a majority has lost.

// claimTag starts a value a quorum's Claim stored: the tag, then a
// 16-byte nonce, then the caller's value. Claimed strips it; a value
// without it (ClaimFenced's) is returned as stored.
const claimTag = "\x00jgq"

const claimNonce = 16

// untag returns the caller's value of a stored claim.
func untag(b []byte) []byte {
	if bytes.HasPrefix(b, []byte(claimTag)) && len(b) >= len(claimTag)+claimNonce {
		return b[len(claimTag)+claimNonce:]
	}
	return b
}

// claimRetry bounds the random delay before a split claim is tried again.
const claimRetry = 20 * time.Millisecond

// Claim stores value on a majority of masters unless a majority holds a
// value. It reports true when a majority stored it, false when another
// claimer's value is on a majority, and an error when no majority could be
// had before the request's deadline.
func (s *Store) Claim(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	tagged := make([]byte, 0, len(claimTag)+claimNonce+len(value))
	tagged = append(tagged, claimTag...)
	tagged = append(tagged, rand.Text()[:claimNonce]...)
	tagged = append(tagged, value...)
	deadline := s.deadline(ctx)
	for attempt := 0; ; attempt++ {
		won, decided, err := s.claimOnce(ctx, deadline, key, tagged, ttl)
		if decided || err != nil {
			return won, err
		}
		// A split: nobody has a majority. Take back ours, wait, try again.
		s.unclaim(ctx, deadline, key, tagged)
		wait := mrand.N(claimRetry << min(attempt, 4))
		if !s.clock.Now().Add(wait).Before(deadline) {
			return false, fmt.Errorf("guard: no quorum (%d needed): claim: the masters stayed split between claimers", s.quorum)
		}
		t := s.clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return false, context.Cause(ctx)
		}
	}
}

// claimOnce makes one round of SET NX on every master. decided is set
// when the claim is won or lost; otherwise the masters are split, or too
// few answered (then err says so).
func (s *Store) claimOnce(ctx context.Context, deadline time.Time, key string, tagged []byte, ttl time.Duration) (won, decided bool, err error) {
	start := s.clock.Now()
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisstore.Store) (bool, error) {
		return n.Claim(ctx, key, tagged, ttl)
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
		return stored >= s.quorum
	})
	switch {
	case stored >= s.quorum:
		return true, true, nil
	case stored+refused < s.quorum:
		s.unclaim(ctx, deadline, key, tagged)
		errs = missing(errs, answered, len(s.nodes), deadline.Sub(start))
		return false, false, noQuorum(fmt.Sprintf("claim: %d of %d masters stored it, %d had a value", stored, len(s.nodes), refused), s.quorum, len(s.nodes), errs)
	}
	// A majority answered, not a majority for us: whose are the others?
	other, ok, err := s.claimedTagged(ctx, key)
	switch {
	case err == nil && ok && !bytes.Equal(other, tagged):
		s.unclaim(ctx, deadline, key, tagged) // another claimer's value is on a majority
		return false, true, nil
	case err == nil && ok:
		return true, true, nil // ours reached a majority after all (a reply was lost)
	}
	return false, false, nil
}

// unclaim takes back tagged from every master that holds it, at best
// effort: a master that does not answer keeps it until its TTL, a
// minority that no majority read counts.
func (s *Store) unclaim(ctx context.Context, deadline time.Time, key string, tagged []byte) {
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisstore.Store) (bool, error) {
		return n.Unclaim(ctx, key, tagged)
	})
	collect(s, ctx, deadline, replies, func(nodeReply[bool]) bool { return false })
}

// Claimed returns the claim a majority of masters holds, untagged. When
// every master answered and no value has a majority, nothing is claimed;
// when some did not answer and none has, it is an error.
func (s *Store) Claimed(ctx context.Context, key string) ([]byte, bool, error) {
	b, ok, err := s.claimedTagged(ctx, key)
	if !ok || err != nil {
		return nil, ok, err
	}
	return untag(b), true, nil
}

// claimedTagged returns the value a majority holds, as stored.
func (s *Store) claimedTagged(ctx context.Context, key string) ([]byte, bool, error) {
	type value struct {
		b  []byte
		ok bool
	}
	start, deadline := s.clock.Now(), s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisstore.Store) (value, error) {
		b, ok, err := n.Claimed(ctx, key)
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
