package store

import "time"

// LockState is one lock at one instant of the server's clock (see
// guard.LockState, which the Locker makes of it).
type LockState struct {
	Holders []Holder
	Waiters []Waiter
	Fence   int64
	Permits int
}

// Holder is one hold on a lock (see guard.Holder).
type Holder struct {
	Owner, Identity string
	Write           bool
	Writes, Reads   int
	Token           int64
	Left, MinHold   time.Duration
}

// Waiter is one registered acquisition (see guard.Waiter).
type Waiter struct {
	Locker, Owner, Identity string
	Write                   bool
	Left                    time.Duration
}

// ScanCursor is where a walk over the locks (ScanLocks) goes on: a server,
// named as the store chooses ("" for the first), and the SCAN cursor on it.
type ScanCursor struct {
	Node string
	Pos  uint64
}

// ServerPolicy is one server's eviction settings.
type ServerPolicy struct {
	Node      string // its address
	MaxMemory string // "0": no limit, so nothing is evicted
	Policy    string
}

// Evicts reports whether the server may evict guard's keys: it has a
// memory limit and a policy other than noeviction (volatile-* policies
// evict keys with a TTL, which every key of guard's has).
func (p ServerPolicy) Evicts() bool {
	return p.MaxMemory != "" && p.MaxMemory != "0" && p.Policy != "" && p.Policy != "noeviction"
}
