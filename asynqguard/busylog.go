package asynqguard

import (
	"container/list"
	"sync"
	"time"
)

// Contention logging: a key that stays busy (a long handler, or a crashed
// holder until its lease ends) is retried again and again; it is logged the
// first time, then at most once per busyLogEvery, with the number of busy
// attempts not logged since. The keys remembered are bounded: the least
// recently busy is forgotten first, and logs again at its next attempt.
const (
	busyLogEvery = time.Minute
	busyLogKeys  = 1024
)

// busyLog decides which busy attempts are logged: an LRU of keys with when
// each was last logged.
type busyLog struct {
	mu    sync.Mutex
	max   int
	order *list.List               // of *busyEntry, most recently busy first
	byKey map[string]*list.Element // key -> its element in order
}

type busyEntry struct {
	key      string
	last     time.Time // when a busy attempt on key was last logged
	repeated int       // busy attempts since, not logged
}

func newBusyLog(size int) *busyLog {
	return &busyLog{max: size, order: list.New(), byKey: make(map[string]*list.Element)}
}

// report records a busy attempt on key at now and tells whether to log it,
// and how many attempts since the last one logged were not.
func (b *busyLog) report(key string, now time.Time) (log bool, repeated int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if el, ok := b.byKey[key]; ok {
		b.order.MoveToFront(el)
		e := el.Value.(*busyEntry)
		if since := now.Sub(e.last); since >= 0 && since < busyLogEvery {
			e.repeated++
			return false, 0
		}
		repeated, e.last, e.repeated = e.repeated, now, 0
		return true, repeated
	}
	if b.order.Len() >= b.max {
		oldest := b.order.Back()
		b.order.Remove(oldest)
		delete(b.byKey, oldest.Value.(*busyEntry).key)
	}
	b.byKey[key] = b.order.PushFront(&busyEntry{key: key, last: now})
	return true, 0
}
