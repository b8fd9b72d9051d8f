package store

import (
	"context"
	"time"
)

// ClaimHolds acquire and release holds together with the claim beside
// their lock (same slot), each in one request, for a run whose outcome the
// claim keeps (guard's Locker.WithClaim). A store that can, implements it
// (redisstore); a quorum does not, and the Locker then takes the same
// steps in requests of their own (Claimed, Acquire, Claim, ClaimFenced,
// SetCounts).
type ClaimHolds interface {
	// AcquireClaim reads the claim under claim: if it holds a value other
	// than value, it answers that value and changes nothing; otherwise it
	// makes one acquisition attempt as Acquire does (a write hold), and if
	// the attempt acquired and the claim held nothing, stores value there
	// for ttl (acquire_claim.lua).
	AcquireClaim(ctx context.Context, k Keys, claim string, value []byte, ttl time.Duration, a AcquireArgs) (ClaimReply, error)
	// ReleaseClaim stores value under claim for ttl if token equals the
	// fencing counter, as ClaimFenced does, and then sets the owner's
	// counts as SetCounts does, in one request (release_claim.lua).
	ReleaseClaim(ctx context.Context, k Keys, claim string, token int64, value []byte, ttl time.Duration, a CountArgs) (ReleaseClaimReply, error)
}

// ClaimReply is AcquireClaim's answer: the claim's other value, or the
// acquisition attempt's answer.
type ClaimReply struct {
	AcquireReply
	// Claimed is set when the claim held a value other than the caller's,
	// Value: nothing was attempted.
	Claimed bool
	Value   []byte
}

// ReleaseClaimReply is ReleaseClaim's answer.
type ReleaseClaimReply struct {
	Outcome Outcome // the count update's, as SetCounts answers it
	// Counter is the fencing counter (0 when there is none): the value was
	// stored if and only if it is the caller's token.
	Counter int64
	// ClaimErr is why the value could not be stored at all (the counter
	// or the claim holds another type: ErrWrongType, naming the key); the
	// counts were set all the same.
	ClaimErr error
}
