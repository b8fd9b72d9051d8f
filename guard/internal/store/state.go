package store

import (
	"strings"
	"time"
)

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
// memory limit and a policy other than noeviction.
func (p ServerPolicy) Evicts() bool {
	return p.MaxMemory != "" && p.MaxMemory != "0" && p.Policy != "" && p.Policy != "noeviction"
}

// Evictable says which of guard's keys the policy may evict. An allkeys-*
// policy evicts any key: a held lock's hash, and its fencing counter, which
// has no TTL unless some acquisition asked for FenceTTL. A volatile-*
// policy evicts only keys with a TTL: every lock hash, waiter queue and
// marker of guard's has one, the counter usually not.
func (p ServerPolicy) Evictable() string {
	switch {
	case strings.HasPrefix(p.Policy, "allkeys-"):
		return "any key: a held lock, and its fencing counter (the next token then comes from the server's clock alone)"
	case strings.HasPrefix(p.Policy, "volatile-"):
		return "keys with a TTL: a held lock and its waiters (the fencing counter has a TTL only under FenceTTL)"
	}
	return "keys, under a policy guard does not know"
}
