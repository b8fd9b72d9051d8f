package chaos_test

import (
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/chaos"
	"github.com/jobguard/jobguard/internal/redistest"
)

// Steps of the lock server's wall clock. Redis expires keys by that clock,
// so a forward step shortens every lease in Redis by the step, and a
// backward one lengthens it; the clients measure their leases on their own
// monotonic clocks, which no step moves.
const (
	kindClockGrace = "redis clock +TTL/5"
	kindClockHalf  = "redis clock +TTL/2"
	kindClockAhead = "redis clock +3×TTL"
	kindClockBack  = "redis clock −TTL/2"
	kindClockFar   = "redis clock −3×TTL"
	whyClockHalf   = "a forward step beyond the stop grace can end the lease in Redis before its holder is told, unless the next renewal lands first"
	whyClockAhead  = "a forward step past the lease's TTL ends it in Redis at once: another worker can acquire before the holder's next renewal tells it"
)

// clockSteps is how far each kind steps the clock. A step smaller than
// the stop grace (TTL/5 < stopGrace) is one the lock must absorb: the job
// is told the grace before its lease could end by the client's reckoning,
// and the step brings the end in Redis only that much closer.
var clockSteps = map[string]time.Duration{
	kindClockGrace: ttl / 5,
	kindClockHalf:  ttl / 2,
	kindClockAhead: 3 * ttl,
	kindClockBack:  -ttl / 2,
	kindClockFar:   -3 * ttl,
}

// runStandaloneClock: one server under libfaketime, each worker through
// its own proxy; the server's wall clock is stepped forward and back by
// less and by more than the TTL, at the moment a holder has just taken
// its lease. A step is for good, as an NTP step is: the fault lasts its
// scheduled duration after the step, and the offsets add up (to a fifth
// of the TTL ahead per round of the five kinds).
func runStandaloneClock(t *testing.T, p profile, seed uint64) []*chaos.Result {
	server, clock := redistest.StartWithClock(t)
	r := newRun(t, p, "standalone-clock", chaos.Standalone)
	r.lockAddr = server.Addr()
	g := &group{name: "g", fencingOnly: map[string]string{kindClockHalf: whyClockHalf, kindClockAhead: whyClockAhead}}
	r.groups = []*group{g}
	r.startWorkers(g, p.workers)
	insp := inspector(t, server.Client(t, fastOptions))
	for _, s := range plan(p, seed, r.name, kindClockGrace, kindClockHalf, kindClockAhead, kindClockBack, kindClockFar) {
		if r.over() {
			break
		}
		time.Sleep(s.Gap)
		r.holder(g, insp) // step while a job has all its hold ahead of it
		// Nothing lifts a step: the fault is the step and the time after
		// it in which its early (or late) expiries happen.
		r.inject(s.Kind, s.Duration, func() string { clock.Step(t, clockSteps[s.Kind]); return server.Addr() }, func() {})
	}
	t.Logf("%s: the server's clock ends %v from the real one", r.name, clock.Offset())
	return r.finish()
}
