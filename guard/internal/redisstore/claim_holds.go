package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
)

// Holds bound to a claim (store.ClaimHolds): acquire_claim.lua runs
// acquire.lua, and release_claim.lua claim_fenced.lua and set_counts.lua,
// each wrapped as a function of the script that calls it, so the lock's
// rules are written once. Their KEYS and ARGV are those scripts' own,
// after the claim's: acquireKeys, acquireArgs, countsKeys and countsArgs
// build them as Acquire and SetCounts do (release_claim.lua takes
// claim_fenced.lua's fencing counter from set_counts.lua's KEYS).

// claimScripts are the scripts of holds bound to a claim.
type claimScripts struct {
	acquire, release script
}

// claimBodies returns the sources of acquire_claim and release_claim,
// each with the scripts it calls wrapped as local functions.
func claimBodies() []struct{ name, lua string } {
	return []struct{ name, lua string }{
		{"acquire_claim", wrapLua("acquire", acquireLua) + acquireClaimLua},
		{"release_claim", wrapLua("claim_fenced", claimFencedLua) + wrapLua("set_counts", setCountsLua) + releaseClaimLua},
	}
}

// claimScriptsOf takes the scripts newScripts made of claimBodies, in
// their order.
func claimScriptsOf(made []script) claimScripts {
	return claimScripts{acquire: made[0], release: made[1]}
}

// wrapLua makes script body a local function name(KEYS, ARGV) of another
// script: its KEYS and ARGV are the arguments, and its replies the
// function's results.
func wrapLua(name, body string) string {
	return "local function " + name + "(KEYS, ARGV)\n" + body + "\nend\n"
}

func (s *Store) AcquireClaim(ctx context.Context, k store.Keys, claim string, value []byte, ttl time.Duration, a store.AcquireArgs) (store.ClaimReply, error) {
	v := newArgv()
	v.key(claim)
	acquireKeys(v, k)
	v.lit(value)
	v.ms(ttl)
	s.acquireArgs(v, a)
	reply, unacked, err := s.runOne(ctx, &s.scripts.claims.acquire, k.Lock, v.call(), true)
	if err != nil {
		return store.ClaimReply{}, s.classify(err)
	}
	vals, err := reply.Slice()
	if err != nil {
		return store.ClaimReply{}, s.classify(err)
	}
	if len(vals) == 2 && vals[0] == int64(2) {
		v, ok := vals[1].(string)
		if !ok {
			return store.ClaimReply{}, fmt.Errorf("guard: unexpected acquire_claim reply %v", vals)
		}
		return store.ClaimReply{Claimed: true, Value: []byte(v)}, nil
	}
	rep, err := acquireReply(vals, a)
	if err == nil && rep.Acquired {
		err = unacked // see Acquire
	}
	return store.ClaimReply{AcquireReply: rep}, err
}

func (s *Store) ReleaseClaim(ctx context.Context, k store.Keys, claim string, token int64, value []byte, ttl time.Duration, a store.CountArgs) (store.ReleaseClaimReply, error) {
	v := newArgv()
	v.key(claim)
	countsKeys(v, k, a) // the last, the fencing counter, is claim_fenced's too
	v.int(token)
	v.lit(value)
	v.ms(ttl)
	countsArgs(v, a)
	reply, _, err := s.runOne(ctx, &s.scripts.claims.release, k.Lock, v.call(), false)
	if err != nil {
		return store.ReleaseClaimReply{}, s.classify(err)
	}
	vals, err := reply.Slice()
	if err != nil {
		return store.ReleaseClaimReply{}, s.classify(err)
	}
	if len(vals) < 2 {
		return store.ReleaseClaimReply{}, fmt.Errorf("guard: unexpected release_claim reply %v", vals)
	}
	outcome, ok1 := integer(vals[0])
	counter, ok2 := integer(vals[1])
	if !ok1 || !ok2 {
		return store.ReleaseClaimReply{}, fmt.Errorf("guard: unexpected release_claim reply %v", vals)
	}
	rep := store.ReleaseClaimReply{Outcome: store.Outcome(outcome), Counter: counter}
	if counter == -1 && len(vals) == 3 {
		msg, _ := vals[2].(string)
		msg = strings.TrimPrefix(strings.TrimPrefix(msg, "-"), "WRONGTYPE ")
		rep.Counter, rep.ClaimErr = 0, fmt.Errorf("%w: %s", store.ErrWrongType, msg)
	}
	return rep, nil
}

// acquireKeys adds acquire.lua's KEYS for k to v, and acquireArgs its
// ARGV for a, as Acquire sends them.
func acquireKeys(v *argv, k store.Keys) {
	v.key(k.Lock)
	v.key(k.Fence)
	v.key(k.Waiters)
}

func (s *Store) acquireArgs(v *argv, a store.AcquireArgs) {
	v.str(a.Owner)
	v.ms(a.TTL)
	if a.Write {
		v.lit("w")
	} else {
		v.lit("r")
	}
	v.str(s.registration(a))
	v.str(a.Identity)
	// The trailing arguments at their defaults are left out (see acquire.lua).
	switch {
	case a.Permits > 1:
		v.ms(a.MinHold)
		v.ms(a.FenceTTL)
		v.int(int64(a.Permits))
	case a.FenceTTL > 0:
		v.ms(a.MinHold)
		v.ms(a.FenceTTL)
	case a.MinHold > 0:
		v.ms(a.MinHold)
	}
}

// acquireReply reads acquire.lua's reply to an attempt with a, as Acquire
// does: integers, or their digits (see integer). It reads them in place,
// where Int64Slice would copy them into a slice of its own.
func acquireReply(vals []any, a store.AcquireArgs) (store.AcquireReply, error) {
	var n [3]int64
	for i := range min(len(vals), len(n)) {
		v, ok := integer(vals[i])
		if !ok {
			return store.AcquireReply{}, fmt.Errorf("guard: unexpected acquire reply %v", vals)
		}
		n[i] = v
	}
	switch {
	case len(vals) < 2:
		return store.AcquireReply{}, fmt.Errorf("guard: unexpected acquire reply %v", vals)
	case n[0] == -1:
		return store.AcquireReply{}, fmt.Errorf("%w: its holders hold %d, this acquisition asks for %d", store.ErrPermitsDiffer, n[1], a.Permits)
	case n[0] != 1:
		rep := store.AcquireReply{HeldFor: time.Duration(n[1]) * time.Millisecond}
		if len(vals) > 2 {
			rep.Minted = n[2]
		}
		return rep, nil
	}
	return store.AcquireReply{Acquired: true, Token: n[1]}, nil
}

// countsKeys adds set_counts.lua's KEYS for k and a to v, and countsArgs
// its ARGV for a, as SetCounts sends them.
func countsKeys(v *argv, k store.Keys, a store.CountArgs) {
	v.key(k.Lock)
	v.key(k.Waiters)
	v.key(k.DoneMarker(a.Owner))
	v.key(k.Fence)
}

func countsArgs(v *argv, a store.CountArgs) {
	v.str(a.Owner)
	v.ms(a.Marker)
	if a.Writes != 0 || a.Reads != 0 { // a final release sends no counts (see set_counts.lua)
		v.int(int64(a.Writes))
		v.int(int64(a.Reads))
	}
}

// integer reads an element of a script's array reply that is an integer,
// or its digits (a token, as acquire.lua returns it), as Int64Slice does.
func integer(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

var _ store.ClaimHolds = (*Store)(nil)
