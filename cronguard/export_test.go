package cronguard

import "time"

// Clock makes a job read the time from now instead of time.Now, to stand in
// for an instance whose clock is off.
func Clock(now func() time.Time) Option { return func(c *config) { c.now = now } }
