package cronguard

import (
	"reflect"
	"time"

	"github.com/jobguard/jobguard/internal/adapt"
	"github.com/robfig/cron/v3"
)

const (
	// unknownPeriodClaim is how long a tick's claim is kept when the
	// schedule gives no period (it never fires again): long enough for any
	// NTP-synced fleet, and tick labels are unique per second anyway.
	unknownPeriodClaim = time.Minute
	// minClaim is the shortest a tick's claim is kept.
	minClaim = 2 * time.Second
	// maxLookBack bounds the search for a schedule's latest activation:
	// cron.SpecSchedule.Next looks five years ahead, and a Feb 29 spec
	// fires once in four (sometimes eight) years.
	maxLookBack = 1 << 28 * time.Second // about 8.5 years
)

// tickOf returns the tick a run starting at now belongs to, and how long
// its claim is kept: two periods of the schedule, at least minClaim, so
// that an instance whose clock is up to about a period behind, or that
// fires up to a period late, still finds it.
//
// The tick is read on the same clock that cron fires by, so a skewed clock
// shifts an instance's firings and its ticks alike: all instances name the
// same firing by the same tick. Runs start at or after their activation
// (Go timers do not fire early), so the tick is the latest activation at
// or before now, which stays right for a run that starts up to a period
// late.
func (c *config) tickOf(now time.Time) (tick time.Time, claim time.Duration) {
	if c.loc != nil {
		now = now.In(c.loc) // as the Cron reads its specs
	}
	if c.schedule == nil {
		return now.Truncate(time.Second), unknownPeriodClaim
	}
	if d, ok := constantDelay(c.schedule); ok {
		return adapt.Bucket(now, d), claimFor(d)
	}
	tick, ok := latestActivation(c.schedule, now)
	if !ok { // never fires (cron would not call us): name the second
		return now.Truncate(time.Second), unknownPeriodClaim
	}
	next := c.schedule.Next(tick)
	if next.IsZero() {
		return tick, unknownPeriodClaim
	}
	return tick, claimFor(next.Sub(tick))
}

func claimFor(period time.Duration) time.Duration { return max(2*period, minClaim) }

// latestActivation returns the latest activation of s at or before now.
// Next(t) is the first activation after t, and it does not decrease as t
// grows. Stepping back from now, doubling the step, finds a t whose next
// activation is at or before now; a binary search then narrows the gap to
// the step before (whose next activation is after now) down to a second,
// and a short walk forward ends at the answer. That is O(log period) calls
// to Next, however often the schedule fires.
func latestActivation(s cron.Schedule, now time.Time) (time.Time, bool) {
	fires := func(t time.Time) bool { // an activation in (t, now]?
		a := s.Next(t)
		return !a.IsZero() && !a.After(now)
	}
	hi := now // !fires(hi): nothing is after now and at or before now
	lo := time.Time{}
	for back := time.Second; back <= maxLookBack; back *= 2 {
		t := now.Add(-back)
		if fires(t) {
			lo = t
			break
		}
		hi = t
	}
	if lo.IsZero() {
		return time.Time{}, false
	}
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2)
		if fires(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	a := s.Next(lo)
	for range 1000 { // a second holds one activation of a cron spec; bound odd schedules
		b := s.Next(a)
		if b.IsZero() || b.After(now) || !b.After(a) {
			break
		}
		a = b
	}
	return a, true
}

// constantDelay reports whether s is an @every schedule, and its period.
func constantDelay(s cron.Schedule) (time.Duration, bool) {
	switch s := s.(type) {
	case cron.ConstantDelaySchedule:
		return s.Delay, true
	case *cron.ConstantDelaySchedule:
		if s != nil {
			return s.Delay, true
		}
	}
	return 0, false
}

// isNilPointer reports whether v is an interface holding a nil pointer.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
