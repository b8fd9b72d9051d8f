// Package throttle decides which of a stream of repeated events are worth
// a log line: the first of a key, then at most one per interval, each
// with the number of events not logged since. A busy key is the normal
// state of a fleet, so guard and every adapter log contention through it,
// with one behaviour.
package throttle

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// Defaults: one line a minute per key, for up to 1 024 keys at once.
const (
	Every = time.Minute
	Keys  = 1024
)

// Throttle remembers, per key, when an event was last let through. It
// remembers a bounded number of keys: the least recently seen is
// forgotten first, and is let through again at its next event. A Throttle
// is safe for concurrent use.
type Throttle struct {
	every time.Duration
	max   int

	mu    sync.Mutex
	order *list.List               // of *entry, most recently seen first
	byKey map[string]*list.Element // key -> its element in order
}

type entry struct {
	key        string
	last       time.Time // when an event of key was last let through
	suppressed int       // events since then, not let through
}

// New returns a Throttle that lets one event per key through every
// interval, remembering up to keys keys.
func New(every time.Duration, keys int) *Throttle {
	return &Throttle{every: every, max: max(keys, 1), order: list.New(), byKey: make(map[string]*list.Element)}
}

// Allow records an event of key at now and reports whether to log it, and
// how many events of key since the last one logged were not. A clock
// that steps back lets the event through.
func (t *Throttle) Allow(key string, now time.Time) (ok bool, suppressed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if el, found := t.byKey[key]; found {
		t.order.MoveToFront(el)
		e := el.Value.(*entry)
		if since := now.Sub(e.last); since >= 0 && since < t.every {
			e.suppressed++
			return false, 0
		}
		suppressed, e.last, e.suppressed = e.suppressed, now, 0
		return true, suppressed
	}
	if t.order.Len() >= t.max {
		oldest := t.order.Back()
		t.order.Remove(oldest)
		delete(t.byKey, oldest.Value.(*entry).key)
	}
	t.byKey[key] = t.order.PushFront(&entry{key: key, last: now})
	return true, 0
}

// callerLogsKey is the context key CallerLogs sets.
type callerLogsKey struct{}

// CallerLogs returns ctx marked so that guard does not log a busy answer
// for key: the adapter that acquires key under ctx logs what it does about
// a busy key itself (a skipped tick, a task retried later), through a
// Throttle of its own, and one line per event is enough. Only key is
// marked: a job's own acquisitions of other keys under the context are
// logged as usual.
func CallerLogs(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, callerLogsKey{}, key)
}

// LoggedByCaller reports whether CallerLogs marked ctx for key.
func LoggedByCaller(ctx context.Context, key string) bool {
	k, ok := ctx.Value(callerLogsKey{}).(string)
	return ok && k == key
}
