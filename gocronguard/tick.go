package gocronguard

import (
	"context"
	"fmt"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/adapt"
)

// tickOf returns the tick a run asking for the lock at now belongs to (the
// start of the Window that holds now), and how long its claim is kept:
// two windows, at least a minute, so that an instance whose clock is up
// to that much behind still finds it.
//
// gocron passes the Locker the job's name and nothing about the run, so
// the tick is read from the clock, the same clock gocron fires by: a
// skewed clock shifts an instance's firings and its ticks alike, and every
// instance names a firing by the window its scheduled time opens. Go
// timers do not fire early, so a run asks for the lock at or after its
// scheduled time, and gets that time's window while it is less late than
// the rest of the window.
func (c *config) tickOf(now time.Time) (tick time.Time, claim time.Duration) {
	return adapt.Bucket(now, c.window), max(2*c.window, minClaim)
}

// admit claims the tick of a run of the job whose lease key is key, unless
// NoDedupe. It returns the tick and its label; the error is ErrTickClaimed
// when another run claimed the tick first, and a Redis or context error
// when the claim could not be made.
func (c *config) admit(ctx context.Context, l *guard.Locker, key string) (tick time.Time, label string, err error) {
	now := c.now()
	tick, claimTTL := c.tickOf(now)
	label = tick.UTC().Format(time.RFC3339Nano)
	if !c.dedupe {
		return tick, label, nil
	}
	won, err := l.Claim(ctx, key+"@"+label, []byte(now.UTC().Format(time.RFC3339Nano)), claimTTL)
	switch {
	case err != nil:
		return tick, label, fmt.Errorf("gocronguard: claim tick %s: %w", label, err)
	case !won:
		return tick, label, ErrTickClaimed
	}
	return tick, label, nil
}
