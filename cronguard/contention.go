package cronguard

import (
	"sync"
	"time"
)

// contentionLogEvery is how often a job that keeps finding its lease held
// elsewhere logs it: the first time, then at most once per this interval,
// with the number of skips not logged since.
const contentionLogEvery = time.Minute

// contention decides which of a job's busy skips are logged. A job has one
// lock key, so it needs one record, not a map.
type contention struct {
	mu       sync.Mutex
	last     time.Time // when a skip was last logged; zero: never
	repeated int       // skips since then, not logged
}

// report records a busy skip at now and tells whether to log it, and how
// many skips since the last one logged were not.
func (c *contention) report(now time.Time) (log bool, repeated int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.last.IsZero() && now.Sub(c.last) < contentionLogEvery && now.Sub(c.last) >= 0 {
		c.repeated++
		return false, 0
	}
	repeated, c.last, c.repeated = c.repeated, now, 0
	return true, repeated
}
