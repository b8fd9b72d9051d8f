// Package store is the seam under guard: where a lease lives. The Locker
// decides when to acquire, renew and release, and what an answer means for
// the job; a Store carries each request to Redis and answers in typed
// values. Nothing above this seam sees a Redis reply, a script or a
// message's wire form.
//
// Two stores implement it: redisstore (one Redis deployment: standalone,
// Sentinel or Cluster) and quorumstore (Redlock: a quorum of independent
// masters, a redisstore each, combined by majority).
//
// A store's requests may run past their ctx (go-redis does not interrupt a
// blocked read); the Locker bounds them. A store tells these kinds of
// failure apart: a key of another type (ErrWrongType), a request whose
// reply never came and that may have run (NoReplyError), a key whose
// holders hold another number of permits (ErrPermitsDiffer), too few
// replicas (ErrNotReplicated), and any other answer of the server.
package store

import (
	"context"
	"time"
)

// Store is where leases live: every concern of the seam, and what the
// store can do.
type Store interface {
	Leases
	Notices
	Claims
	Inspection
	// Caps declares what the store supports.
	Caps() Caps
	// Close stops what the store runs; Locker.Close calls it last. It does
	// not close the clients, which belong to the caller.
	Close() error
}

// Caps is what differs between stores, declared rather than asked of a
// type.
type Caps struct {
	// Permits reports that Permits(n) with n > 1 bounds holders by n. A
	// quorum cannot: each master would admit n holders, and n+1 holders
	// can each hold a majority.
	Permits bool
}

// Leases acquire, re-count, renew and release holds.
type Leases interface {
	// Acquire makes one attempt at a fresh hold (acquire.lua). A reply that
	// is acquired and an error (too few replicas acknowledged it) is a hold
	// the caller must drop.
	Acquire(ctx context.Context, k Keys, a AcquireArgs) (AcquireReply, error)
	// SetCounts sets an owner's hold counts (set_counts.lua): a re-entry, a
	// partial release, or with 0 and 0 the final release.
	SetCounts(ctx context.Context, k Keys, a CountArgs) (Outcome, error)
	// Renew extends holds that share a renewal group, in one round trip.
	// It returns one reply per hold, in order, or an error when the round
	// trip as a whole failed.
	Renew(ctx context.Context, batch []RenewArgs) ([]RenewReply, error)
	// RenewalGroup names the server that renews key's holds; holds of one
	// group share pipelines. A failed lookup answers "", a group of its own.
	RenewalGroup(ctx context.Context, key string) string
	// Withdraw takes an acquisition that stops waiting out of the lock's
	// queue. removed is false when its registration was gone: a release may
	// have granted it the key, which the caller must then drop.
	Withdraw(ctx context.Context, k Keys, a AcquireArgs) (removed bool, err error)
}

// Notices are the release notifications waiters sleep on.
type Notices interface {
	// FeedSlot names the subscription connection that carries channel:
	// channels with the same slot share one. NoSlot means the store has
	// one connection for every channel.
	FeedSlot(channel string) int
	// OpenFeed returns a subscription connection for channel's slot;
	// subscribed reports that it subscribed channel already (on Cluster,
	// where a connection goes to the node of its first channel, so it is
	// opened subscribed). Elsewhere it makes no request.
	OpenFeed(ctx context.Context, channel string) (f Feed, subscribed bool)
	// Refresh has the client learn where channels and keys live now,
	// before a subscription connection is replaced: on Cluster, it reloads
	// the slot map. Nothing elsewhere.
	Refresh(ctx context.Context)
}

// NoSlot is the feed slot of a store with one subscription connection.
const NoSlot = -1

// Feed is one subscription connection for release notifications. It stays
// usable across reconnections: it subscribes its channels again on a new
// connection, and replaces one that stops answering.
type Feed interface {
	Subscribe(ctx context.Context, channel string) error
	Unsubscribe(ctx context.Context, channel string) error
	// Read reports what the connection receives, until Close.
	Read(FeedEvents)
	Close() error
}

// FeedEvents is what a feed reports.
type FeedEvents struct {
	// Confirmed is called for each subscription the server confirms, again
	// after a reconnection.
	Confirmed func(channel string)
	// Dropped is called for each unsubscription of a sharded channel that
	// the server confirms or makes on its own (its slot moved away).
	Dropped func(channel string)
	// Notice is called for each message of a lock's channel, parsed.
	Notice func(channel string, n Notice)
}

// Claims are values stored beside a lock (same Cluster slot), never
// blocking it.
type Claims interface {
	// Claim stores value under key for ttl unless a value is there (SET NX).
	Claim(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error)
	// Claimed returns the value stored under key, if any.
	Claimed(ctx context.Context, key string) ([]byte, bool, error)
	// ClaimFenced stores value under key for ttl if token equals the
	// fencing counter under fence (claim_fenced.lua); key and fence share a
	// slot. It returns the counter (0 when there is none): the value was
	// stored if and only if that is token.
	ClaimFenced(ctx context.Context, fence, key string, token int64, value []byte, ttl time.Duration) (int64, error)
	// Charge spends amount from the budget under key if that keeps it
	// within limit (charge.lua); a budget's window lasts window from its
	// first spend. It returns whether it spent and how long until the
	// window ends.
	Charge(ctx context.Context, key string, amount, limit int64, window time.Duration) (bool, time.Duration, error)
}

// Inspection reads and overrides locks, for operators.
type Inspection interface {
	// Inspect reads one lock's holders, waiting acquisitions and fencing
	// counter at one instant (inspect.lua); a free key answers an empty
	// state. It changes nothing.
	Inspect(ctx context.Context, k Keys) (LockState, error)
	// ForceRelease deletes every hold on a lock and wakes its waiters,
	// leaving its fencing counter (inspect.lua); it answers the state it
	// ended.
	ForceRelease(ctx context.Context, k Keys) (LockState, error)
	// ScanLocks returns a page of the names of locks under prefix whose
	// names match the glob match, walking every server that holds locks
	// with SCAN, a bounded page per call, from cursor c (the zero cursor
	// starts a walk) to the cursor of the next page; more is false when
	// the walk is complete. A name may come more than once.
	ScanLocks(ctx context.Context, prefix, match string, c ScanCursor) (names []string, next ScanCursor, more bool, err error)
	// EvictionPolicies returns the eviction settings of every server that
	// holds locks, those it could read, with an error for the others.
	EvictionPolicies(ctx context.Context) ([]ServerPolicy, error)
}
