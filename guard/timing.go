package guard

import (
	"fmt"
	"time"
)

// timing is the heartbeat schedule of one lease. Every rule about time that
// the client decides lives here; the server decides expiry on its own clock.
type timing struct {
	ttl, interval, grace, timeout time.Duration
}

// maxTTL is the longest TTL: twice it (how long acquire.lua keeps a
// waiter's registration, which Inspect reports as a Duration) still fits
// in a time.Duration, and so does every duration derived from it.
const maxTTL = 100 * 365 * 24 * time.Hour

// newTiming validates a schedule: a renewal sent at the interval must be
// able to time out and still leave the stop grace before the lease's safe
// end (client-go's leader election checks the same kind of inequality).
func newTiming(ttl, interval, grace, timeout time.Duration) (timing, error) {
	t := timing{ttl: ttl, interval: interval, grace: grace, timeout: timeout}
	switch {
	case ttl <= 0:
		return t, fmt.Errorf("%w: TTL %v must be positive", ErrInvalid, ttl)
	case ttl > maxTTL:
		return t, fmt.Errorf("%w: TTL %v exceeds the longest supported, %v", ErrInvalid, ttl, maxTTL)
	case interval <= 0 || interval >= ttl:
		return t, fmt.Errorf("%w: renew interval %v must be positive and less than the TTL %v", ErrInvalid, interval, ttl)
	case grace < 0 || grace >= ttl:
		return t, fmt.Errorf("%w: stop grace %v must be >= 0 and less than the TTL %v", ErrInvalid, grace, ttl)
	case timeout <= 0:
		return t, fmt.Errorf("%w: request timeout %v must be positive", ErrInvalid, timeout)
	}
	// Compared term by term: the sum of three long durations overflows.
	// Each term is >= 0 here, so budget-interval-timeout cannot overflow.
	if budget := ttl - t.drift(); interval > budget || timeout > budget-interval || grace > budget-interval-timeout {
		return t, fmt.Errorf("%w: renew interval %v + request timeout %v + stop grace %v exceed TTL %v - drift %v",
			ErrInvalid, interval, timeout, grace, ttl, t.drift())
	}
	return t, nil
}

// drift is Redlock's allowance for the client's and the server's clocks
// running at slightly different rates over one TTL.
func (t timing) drift() time.Duration { return t.ttl/100 + 2*time.Millisecond }

// safeEnd is the earliest the server may expire a hold whose acquisition or
// renewal was sent at sent: the TTL runs from when the server ran the
// script, which is after sent, less what the clocks may drift apart.
func (t timing) safeEnd(sent time.Time) time.Time { return sent.Add(t.ttl - t.drift()) }

// stopAt is when the job is told to stop if no renewal moves leaseEnd: the
// stop grace is its time to wind down before anyone else can get in.
func (t timing) stopAt(leaseEnd time.Time) time.Time { return leaseEnd.Add(-t.grace) }

// retryEvery is the pause between renewal attempts after a failure: a few
// tries fit in the interval, and a long interval does not make a short
// outage cost a whole lease.
func (t timing) retryEvery() time.Duration { return min(t.interval/3, time.Second) }

// batchWindow is how early a renewal may go: holds whose renewal is due
// within a tenth of an interval of each other share a pipeline.
func (t timing) batchWindow() time.Duration { return t.interval / 10 }

// scaled returns the Locker's timing stretched to another TTL, keeping the ratios.
func (c *config) scaled(ttl time.Duration) (timing, error) {
	if ttl == c.ttl {
		return timing{c.ttl, c.renewInterval, c.stopGrace, c.requestTimeout}, nil
	}
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * float64(ttl) / float64(c.ttl)) }
	return newTiming(ttl, scale(c.renewInterval), scale(c.stopGrace), scale(c.requestTimeout))
}
