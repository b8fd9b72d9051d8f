package gocronguard

import "time"

// Clock makes a Locker or Task read the time from now instead of
// time.Now, to stand in for an instance whose clock is off.
func Clock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// TaskFuncName is the name gocron gives a job made with Task and no
// gocron.WithName.
func TaskFuncName() string { return funcName((*task)(nil).run) }
