// Package clock is the time guard and its stores schedule by: a value, as
// in client-go's leader election, so that tests can drive the schedule
// without sleeping. Nothing in guard reads the time but through it.
package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer whose channel receives after d.
	NewTimer(d time.Duration) Timer
	// AfterFunc runs f on its own goroutine after d, unless the timer is
	// stopped first. Its timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of *time.Timer a scheduler uses.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

// Real is the wall and monotonic clock of package time.
type Real struct{}

// Now returns time.Now.
func (Real) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// AfterFunc returns time.AfterFunc's timer.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }
