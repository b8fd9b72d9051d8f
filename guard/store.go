package guard

import (
	"context"
	"strings"
	"time"
)

// store is where leases live. The Locker decides when to acquire, renew and
// release, and what an answer means for the job; a store carries each
// request to Redis and answers in typed values. redisStore is one Redis
// deployment (standalone, Sentinel or Cluster); quorumStore is a quorum of
// independent masters (Redlock), a redisStore each, not a second Locker.
//
// A store's requests may run past their ctx (go-redis does not interrupt a
// blocked read); the Locker bounds them (see await). A store tells three
// kinds of failure apart: a key of another type (ErrWrongType), a request
// whose reply never came and that may have run (noReplyError), a key whose
// holders hold another number of permits (ErrPermitsDiffer), and any other
// answer of the server; the Locker adds the key to the message.
type store interface {
	// acquire makes one attempt at a fresh hold (acquire.lua). A reply that
	// is acquired and an error (too few replicas acknowledged it) is a hold
	// the caller must drop.
	acquire(ctx context.Context, k keys, a acquireArgs) (acquireReply, error)
	// setCounts sets an owner's hold counts (set_counts.lua): a re-entry, a
	// partial release, or with 0 and 0 the final release.
	setCounts(ctx context.Context, k keys, a countArgs) (outcome, error)
	// renew extends holds that share a renewal group, in one round trip
	// (renew.lua each). It returns one reply per hold, in order, or an error
	// when the round trip as a whole failed.
	renew(ctx context.Context, batch []renewArgs) ([]renewReply, error)
	// renewalGroup names the server that renews key's holds; holds of one
	// group share pipelines. A failed lookup answers "", a group of its own.
	renewalGroup(ctx context.Context, key string) string

	// feedSlot names the subscription connection that carries channel:
	// channels with the same slot share one. noSlot means the store has one
	// connection for every channel.
	feedSlot(channel string) int
	// openFeed returns a subscription connection for channel's slot;
	// subscribed reports that it subscribed channel already (on Cluster,
	// where a connection goes to the node of its first channel, so it is
	// opened subscribed). Elsewhere it makes no request.
	openFeed(ctx context.Context, channel string) (f feed, subscribed bool)
	// refresh has the client learn where channels and keys live now, before
	// a subscription connection is replaced: on Cluster, it reloads the
	// slot map. Nothing elsewhere.
	refresh(ctx context.Context)
	// withdraw takes an acquisition that stops waiting out of the lock's
	// queue. removed is false when its registration was gone: a release may
	// have granted it the key, which the caller must then drop.
	withdraw(ctx context.Context, k keys, a acquireArgs) (removed bool, err error)

	// claim stores value under key for ttl unless a value is there (SET NX).
	claim(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error)
	// claimed returns the value stored under key, if any.
	claimed(ctx context.Context, key string) ([]byte, bool, error)
	// claimFenced stores value under key for ttl if token equals the
	// fencing counter under fence (claim_fenced.lua); key and fence share a
	// slot. It returns the counter (0 when there is none): the value was
	// stored if and only if that is token.
	claimFenced(ctx context.Context, fence, key string, token int64, value []byte, ttl time.Duration) (int64, error)

	// charge spends amount from the budget under key if that keeps it
	// within limit (charge.lua); a budget's window lasts window from its
	// first spend. It returns whether it spent and how long until the
	// window ends.
	charge(ctx context.Context, key string, amount, limit int64, window time.Duration) (bool, time.Duration, error)

	// inspect reads one lock's holders, waiting acquisitions and fencing
	// counter at one instant (inspect.lua); a free key answers an empty
	// state. It changes nothing.
	inspect(ctx context.Context, k keys) (LockState, error)
	// forceRelease deletes every hold on a lock and wakes its waiters,
	// leaving its fencing counter (inspect.lua); it answers the state it
	// ended.
	forceRelease(ctx context.Context, k keys) (LockState, error)
	// scanLocks returns a page of the names of locks under prefix whose
	// names match the glob match, walking every server that holds locks
	// with SCAN, a bounded page per call, from cursor c (the zero cursor
	// starts a walk) to the cursor of the next page; more is false when
	// the walk is complete. A name may come more than once.
	scanLocks(ctx context.Context, prefix, match string, c scanCursor) (names []string, next scanCursor, more bool, err error)

	// evictionPolicies returns the eviction settings of every server that
	// holds locks, those it could read, with an error for the others.
	evictionPolicies(ctx context.Context) ([]serverPolicy, error)

	// close stops what the store runs; Locker.Close calls it last.
	close() error
}

// scanCursor is where a walk over the locks (store.scanLocks) goes on: a
// server, named as the store chooses ("" for the first), and the SCAN
// cursor on it.
type scanCursor struct {
	node string
	pos  uint64
}

// noReplyError is the failure of a request whose reply never came: it may
// have run on the server.
type noReplyError struct{ err error }

func (e *noReplyError) Error() string { return e.err.Error() }
func (e *noReplyError) Unwrap() error { return e.err }

// feed is one subscription connection for release notifications. It
// stays usable across reconnections: it subscribes its channels again on a
// new connection, and replaces one that stops answering.
type feed interface {
	subscribe(ctx context.Context, channel string) error
	unsubscribe(ctx context.Context, channel string) error
	// read calls confirmed for each subscription the server confirms (again
	// after a reconnect) and message for each notification, until close.
	//
	// dropped is called for each unsubscription of a sharded channel that
	// the server confirms or makes on its own (a Cluster slot moved away).
	read(confirmed, dropped func(channel string), message func(channel, payload string))
	close() error
}

// noSlot is the feed slot of a store with one subscription connection.
const noSlot = -1

// keys are the Redis names of one lock; the {name} hash tag keeps them in
// one Cluster slot.
type keys struct {
	lock    string // the hash of holders (see scripts/prelude.lua)
	fence   string // the fencing counter
	channel string // release notifications
	waiters string // the acquisitions waiting for the lock (registrations)
}

func keysFor(prefix, name string) keys {
	// The four names are slices of one string, base+":fence" base+":released"
	// base+":waiters": one allocation per acquisition rather than four.
	const fence, released, waiters = ":fence", ":released", ":waiters"
	n := len(prefix) + len(name) + len("{}") // the base: prefix{name}, the lock
	var b strings.Builder
	b.Grow(3*n + len(fence) + len(released) + len(waiters))
	for _, suffix := range [...]string{fence, released, waiters} {
		b.WriteString(prefix)
		b.WriteByte('{')
		b.WriteString(name)
		b.WriteByte('}')
		b.WriteString(suffix)
	}
	s := b.String()
	f, c := n+len(fence), 2*n+len(fence)+len(released) // ends of fence and channel
	return keys{lock: s[:n], fence: s[:f], channel: s[f:c], waiters: s[c:]}
}

// doneMarker is the key that tells a retried final release of owner that
// the first try applied.
func (k keys) doneMarker(owner string) string { return k.lock + ":done:" + owner }

// acquireArgs is one acquisition attempt.
type acquireArgs struct {
	owner    string
	ttl      time.Duration
	write    bool
	minHold  time.Duration
	fenceTTL time.Duration // 0: the fencing counter is permanent
	permits  int           // 1 (or 0): a plain lock; n: one of the key's n permits (a write lease)
	// waiter is the Locker id under which the acquisition registers in the
	// lock's queue if the key is busy, so a release can name that Locker or
	// grant the key to the acquisition; "" for a caller that will not wait.
	// The registration lasts twice the TTL (acquire.lua).
	waiter   string
	identity string // who takes the hold (WithIdentity), recorded with it
}

// acquireReply is acquire.lua's answer.
type acquireReply struct {
	acquired bool
	token    int64         // acquired: the fencing token
	heldFor  time.Duration // busy: until the latest holder's expiry
	minted   int64         // busy: the newest fencing token minted so far
}

// countArgs sets an owner's hold counts.
type countArgs struct {
	owner         string
	writes, reads int
	// marker, for a final release, is how long Redis remembers that it
	// applied, so a retry can tell; markerDrop drops a hold its caller never
	// got, at once, ignoring MinHold.
	marker time.Duration
}

// markerDrop, as countArgs.marker, drops a hold at once.
const markerDrop = 0

// outcome is the answer to a renewal or a count update.
type outcome int8

const (
	taken   outcome = -1 // another owner holds the key
	expired outcome = 0  // the hold is gone and the key is free
	applied outcome = 1
)

// renewArgs extends one hold.
type renewArgs struct {
	lock  string // keys.lock
	owner string
	ttl   time.Duration
}

// renewReply is the answer for one hold of a renewal batch.
type renewReply struct {
	outcome outcome
	err     error
}
