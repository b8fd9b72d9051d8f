package store

import (
	"strings"
	"time"
)

// Keys are the Redis names of one lock; the {name} hash tag keeps them in
// one Cluster slot.
type Keys struct {
	Lock    string // the hash of holders (see redisstore's prelude.lua)
	Fence   string // the fencing counter
	Channel string // release notifications
	Waiters string // the acquisitions waiting for the lock (registrations)
}

// KeysFor returns the keys of the lock name under prefix.
func KeysFor(prefix, name string) Keys {
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
	return Keys{Lock: s[:n], Fence: s[:f], Channel: s[f:c], Waiters: s[c:]}
}

// DoneMarker is the key that tells a retried final release of owner that
// the first try applied.
func (k Keys) DoneMarker(owner string) string { return k.Lock + ":done:" + owner }

// AcquireArgs is one acquisition attempt.
type AcquireArgs struct {
	Owner    string
	TTL      time.Duration
	Write    bool
	MinHold  time.Duration
	FenceTTL time.Duration // 0: the fencing counter is permanent
	Permits  int           // 1 (or 0): a plain lock; n: one of the key's n permits (a write lease)
	// Waiter is the Locker id under which the acquisition registers in the
	// lock's queue if the key is busy, so a release can name that Locker or
	// grant the key to the acquisition; "" for a caller that will not wait.
	// The registration lasts twice the TTL.
	Waiter   string
	Identity string // who takes the hold (WithIdentity), recorded with it
}

// AcquireReply is an acquisition attempt's answer.
type AcquireReply struct {
	Acquired bool
	Token    int64         // acquired: the fencing token
	HeldFor  time.Duration // busy: until the latest holder's expiry
	Minted   int64         // busy: the newest fencing token minted so far
}

// CountArgs sets an owner's hold counts.
type CountArgs struct {
	Owner         string
	Writes, Reads int
	// Marker, for a final release, is how long Redis remembers that it
	// applied, so a retry can tell; MarkerDrop drops a hold its caller
	// never got, at once, ignoring MinHold.
	Marker time.Duration
}

// MarkerDrop, as CountArgs.Marker, drops a hold at once.
const MarkerDrop = 0

// Outcome is the answer to a renewal or a count update.
type Outcome int8

const (
	Taken   Outcome = -1 // another owner holds the key
	Expired Outcome = 0  // the hold is gone and the key is free
	Applied Outcome = 1
)

// RenewArgs extends one hold.
type RenewArgs struct {
	Lock  string // Keys.Lock
	Owner string
	TTL   time.Duration
}

// RenewReply is the answer for one hold of a renewal batch.
type RenewReply struct {
	Outcome Outcome
	Err     error
}

// Drift is Redlock's allowance for the client's and the server's clocks
// running at slightly different rates over one TTL.
func Drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }
