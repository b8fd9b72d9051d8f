package gocronguard

import (
	"sync"
	"time"
)

// contentionLogEvery is how often a job that keeps finding its lease held
// logs it: the first time, then at most once per this interval, with the
// number of skips not logged since.
const contentionLogEvery = time.Minute

// contention decides which busy skips are logged, per lease key: a Locker
// serves every job of a scheduler, a Task one.
type contention struct {
	mu   sync.Mutex
	keys map[string]*skips
}

// skips is the record of one key's busy skips.
type skips struct {
	last     time.Time // when a skip was last logged
	repeated int       // skips since then, not logged
}

// report records a busy skip of key at now and tells whether to log it,
// and how many skips since the last one logged were not.
func (c *contention) report(key string, now time.Time) (log bool, repeated int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.keys[key]
	if s == nil {
		if c.keys == nil {
			c.keys = make(map[string]*skips)
		}
		c.keys[key] = &skips{last: now}
		return true, 0
	}
	if d := now.Sub(s.last); d >= 0 && d < contentionLogEvery {
		s.repeated++
		return false, 0
	}
	repeated, s.last, s.repeated = s.repeated, now, 0
	return true, repeated
}
