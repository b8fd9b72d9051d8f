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
// after the claim's: acquireCall and countsCall build them as Acquire and
// SetCounts do.

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
	acq := s.acquireCall(k, a)
	call := scriptCall{
		keys: append([]string{claim}, acq.keys...),
		args: append([]any{value, ms(ttl)}, acq.args...),
	}
	reply, unacked, err := s.runOne(ctx, &s.scripts.claims.acquire, k.Lock, call, true)
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
	ints := make([]int64, len(vals))
	for i, v := range vals {
		n, ok := integer(v)
		if !ok {
			return store.ClaimReply{}, fmt.Errorf("guard: unexpected acquire_claim reply %v", vals)
		}
		ints[i] = n
	}
	rep, err := acquireReply(ints, a)
	if err == nil && rep.Acquired {
		err = unacked // see Acquire
	}
	return store.ClaimReply{AcquireReply: rep}, err
}

func (s *Store) ReleaseClaim(ctx context.Context, k store.Keys, claim string, token int64, value []byte, ttl time.Duration, a store.CountArgs) (store.ReleaseClaimReply, error) {
	counts := countsCall(k, a)
	call := scriptCall{
		keys: append([]string{k.Fence, claim}, counts.keys...),
		args: append([]any{token, value, ms(ttl)}, counts.args...),
	}
	reply, _, err := s.runOne(ctx, &s.scripts.claims.release, k.Lock, call, false)
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

// acquireCall is acquire.lua's call for a, as Acquire sends it.
func (s *Store) acquireCall(k store.Keys, a store.AcquireArgs) scriptCall {
	mode := "r"
	if a.Write {
		mode = "w"
	}
	call := scriptCall{
		keys: []string{k.Lock, k.Fence, k.Waiters},
		args: []any{a.Owner, ms(a.TTL), mode, s.registration(a), a.Identity},
	}
	// The trailing arguments at their defaults are left out (see acquire.lua).
	switch {
	case a.Permits > 1:
		call.args = append(call.args, ms(a.MinHold), ms(a.FenceTTL), a.Permits)
	case a.FenceTTL > 0:
		call.args = append(call.args, ms(a.MinHold), ms(a.FenceTTL))
	case a.MinHold > 0:
		call.args = append(call.args, ms(a.MinHold))
	}
	return call
}

// acquireReply reads acquire.lua's reply to an attempt with a, as Acquire
// does.
func acquireReply(vals []int64, a store.AcquireArgs) (store.AcquireReply, error) {
	switch {
	case len(vals) < 2:
		return store.AcquireReply{}, fmt.Errorf("guard: unexpected acquire reply %v", vals)
	case vals[0] == -1:
		return store.AcquireReply{}, fmt.Errorf("%w: its holders hold %d, this acquisition asks for %d", store.ErrPermitsDiffer, vals[1], a.Permits)
	case vals[0] != 1:
		rep := store.AcquireReply{HeldFor: time.Duration(vals[1]) * time.Millisecond}
		if len(vals) > 2 {
			rep.Minted = vals[2]
		}
		return rep, nil
	}
	return store.AcquireReply{Acquired: true, Token: vals[1]}, nil
}

// countsCall is set_counts.lua's call for a, as SetCounts sends it.
func countsCall(k store.Keys, a store.CountArgs) scriptCall {
	call := scriptCall{
		keys: []string{k.Lock, k.Waiters, k.DoneMarker(a.Owner), k.Fence},
		args: []any{a.Owner, ms(a.Marker)},
	}
	if a.Writes != 0 || a.Reads != 0 { // a final release sends no counts (see set_counts.lua)
		call.args = append(call.args, a.Writes, a.Reads)
	}
	return call
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
