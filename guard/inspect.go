package guard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
)

// LockState is what one lock is at one instant of the Redis server's clock:
// who holds it, who waits for it, and its fencing counter. Inspect and Scan
// read it; ForceRelease returns the one it ended. A free key is the zero
// state with its Key (and its Fence, if the counter exists).
type LockState struct {
	// Key is the lock's key, as passed to Acquire.
	Key string
	// Holders are the live holds, oldest fencing token first: one writer,
	// or any number of readers, or up to Permits holders of a permit each
	// (each a write hold), and holds released but kept for MinHold.
	// Holds whose expiry has passed are left out even before a script has
	// swept them from Redis: they hold nothing.
	Holders []Holder
	// Waiters are the acquisitions registered in the lock's queue, in the
	// order a release serves them (the registration refreshed longest ago
	// first). Expired registrations are left out.
	Waiters []Waiter
	// Fence is the key's fencing counter: the last token minted for it. The
	// next acquisition gets a higher one. 0 when there is no counter (never
	// acquired, or expired with FenceTTL).
	Fence int64
	// Permits is the key's number of permits when its holders hold permits
	// (Permits(n), n > 1), at most that many of them at once; 0 for a plain
	// lock or a free key.
	Permits int
}

// Holder is one hold on a lock: a fresh acquisition and its re-entries.
type Holder struct {
	// Owner is the hold's owner id. It names the hold in Redis; it does not
	// let anyone renew or release it through this package.
	Owner string
	// Identity names who took the hold (WithIdentity); "" for a hold taken
	// by a version of this package that did not record one.
	Identity string
	// Write reports a write hold, as every permit is (its holder may also
	// hold read leases, taken by a downgrade); false for a read hold.
	Write bool
	// Writes and Reads are the hold's lease counts as Redis keeps them: one
	// lease of the hold's mode, Writes 1 for a write hold and Reads 1 for a
	// read hold (a write hold becomes one when its last write lease ends
	// while read leases remain). Re-entries are counted in the holder's
	// process, not here. Both are 0 for a hold that was released and is
	// kept only until its MinHold ends.
	Writes, Reads int
	// Token is the hold's fencing token.
	Token int64
	// Left is how long the hold lasts unless it is renewed, on the server's
	// clock. Negative when the key has no expiry at all, which this package
	// never leaves.
	Left time.Duration
	// MinHold is how long until the hold's MinHold ends; 0 when it has none
	// or it has passed.
	MinHold time.Duration
}

// Lingering reports a hold that was released and is kept only until its
// MinHold ends.
func (h Holder) Lingering() bool { return h.Writes == 0 && h.Reads == 0 }

// Waiter is one acquisition waiting for a lock.
type Waiter struct {
	// Locker is the id of the waiting Locker, which release notifications
	// name.
	Locker string
	// Owner is the acquisition's owner id: the owner of its hold, should it
	// get the key.
	Owner string
	// Identity names who waits (WithIdentity); "" when not recorded.
	Identity string
	// Write reports a writer; false for a reader.
	Write bool
	// Left is how long the registration lasts unless the acquisition
	// tries again (each attempt renews it), on the server's clock.
	Left time.Duration
}

// Inspect returns the state of the lock on key: its holders (identity,
// mode, lease counts, time left, fencing token, MinHold), its waiting
// acquisitions and its fencing counter, read atomically in one script on
// the server that holds the key. A free key gives a state with no holders,
// not an error. A Redis key of the lock that holds another type gives an
// error matching ErrWrongType. Inspect changes nothing.
func (l *Locker) Inspect(ctx context.Context, key string) (LockState, error) {
	if ctx == nil {
		return LockState{}, fmt.Errorf("%w: nil context", ErrInvalid)
	}
	if err := l.checkClaim(key); err != nil { // open, and a valid key
		return LockState{}, err
	}
	k := l.keysFor(key)
	raw, err := await(ctx, l, func(ctx context.Context) (store.LockState, error) {
		return l.store.Inspect(ctx, k)
	}, nil)
	if err != nil {
		return LockState{}, redisError(key, err)
	}
	st := stateOf(key, raw)
	return st, nil
}

// scanPage is one page of a walk over the locks: see store.scanLocks.
type scanPage struct {
	names []string
	next  store.ScanCursor
	more  bool
}

// Scan calls fn with the state of every lock under the Locker's prefix
// whose key matches match, a Redis glob pattern ("*", "report-*"; "" is
// "*"), walking the keyspace with SCAN, a bounded page per call (every
// master's on Cluster), never KEYS. Keys of other shapes (fencing counters,
// queues, claims, markers) and keys of the lock's shape that hold another
// Redis type are skipped, and so are locks that are free by the time they
// are read. Each lock is read as Inspect reads it, so each state is
// consistent, but the walk is not a snapshot: a lock taken during it may
// or may not be seen. fn is called on the caller's goroutine, once per lock
// key; an error from fn stops the walk and is returned.
func (l *Locker) Scan(ctx context.Context, match string, fn func(LockState) error) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalid)
	case fn == nil:
		return fmt.Errorf("%w: nil function", ErrInvalid)
	case strings.Contains(match, "}"):
		return fmt.Errorf("%w: pattern %q must not contain '}': no key does", ErrInvalid, match)
	case l.isClosed():
		return ErrClosed
	}
	if match == "" {
		match = "*"
	}
	seen := make(map[string]bool)
	var cursor store.ScanCursor
	for {
		page, err := await(ctx, l, func(ctx context.Context) (scanPage, error) {
			names, next, more, err := l.store.ScanLocks(ctx, l.cfg.prefix, match, cursor)
			return scanPage{names, next, more}, err
		}, nil)
		if err != nil {
			return fmt.Errorf("guard: scan %q: %w", l.cfg.prefix+"{"+match+"}", err)
		}
		for _, name := range page.names {
			if seen[name] {
				continue
			}
			seen[name] = true
			st, err := l.Inspect(ctx, name)
			switch {
			case errors.Is(err, ErrWrongType):
				continue
			case err != nil:
				return err
			case len(st.Holders) == 0 && len(st.Waiters) == 0:
				continue
			}
			if err := fn(st); err != nil {
				return err
			}
		}
		if !page.more {
			return nil
		}
		cursor = page.next
	}
}

// stateOf is the public form of a store's answer about the lock on key.
func stateOf(key string, st store.LockState) LockState {
	out := LockState{Key: key, Fence: st.Fence, Permits: st.Permits}
	for _, h := range st.Holders {
		out.Holders = append(out.Holders, Holder(h))
	}
	for _, w := range st.Waiters {
		out.Waiters = append(out.Waiters, Waiter(w))
	}
	return out
}
