package redistest

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// skew returns how far s's TIME is from this process's clock.
func skew(t *testing.T, c *redis.Client) time.Duration {
	t.Helper()
	before := time.Now()
	now, err := c.Time(t.Context()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now.Sub(before)
}

// near fails the test unless got is within a second of want: steps of
// ten seconds stay clear of any scheduling delay.
func near(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	nearWithin(t, what, got, want, time.Second)
}

// nearWithin is near with a tolerance of its own.
func nearWithin(t *testing.T, what string, got, want, within time.Duration) {
	t.Helper()
	if d := got - want; d < -within || d > within {
		t.Fatalf("%s: the server's clock is %v from ours, want %v", what, got.Round(time.Millisecond), want)
	}
}

func TestClockStep(t *testing.T) {
	s, clock := StartWithClock(t)
	c := s.Client(t)
	ctx := t.Context()
	near(t, "at start", skew(t, c), 0)

	// A forward step past a key's TTL expires it at once.
	if err := c.Set(ctx, "k", "v", 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	clock.Step(t, 10*time.Second)
	near(t, "after +10s", skew(t, c), 10*time.Second)
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k = %d, %v after a step past its TTL, want 0", n, err)
	}

	// A backward step makes a key live longer; the forward step that
	// undoes it expires it.
	clock.Step(t, -20*time.Second)
	near(t, "after -20s", skew(t, c), -10*time.Second)
	if err := c.Set(ctx, "k2", "v", 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	clock.Step(t, 10*time.Second)
	if got := clock.Offset(); got != 0 {
		t.Fatalf("Offset() = %v after +10s, -20s, +10s, want 0", got)
	}
	near(t, "after +10s", skew(t, c), 0)

	// Steps of a fraction of a second, as the chaos suite's, move it by
	// that fraction.
	clock.Step(t, 250*time.Millisecond)
	nearWithin(t, "after +250ms", skew(t, c), 250*time.Millisecond, 100*time.Millisecond)
	clock.Step(t, -750*time.Millisecond)
	nearWithin(t, "after -750ms", skew(t, c), -500*time.Millisecond, 100*time.Millisecond)
	clock.Step(t, 500*time.Millisecond)

	// The server's own timers (the monotonic clock) still run: its active
	// expiry cycle deletes k2 without anyone reading it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := c.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DBSIZE = %d 5s after k2's TTL passed: the active expiry cycle does not run", n)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Fractions of a second, and the offset survives a restart.
	clock.Step(t, 3500*time.Millisecond)
	s.Restart(t)
	near(t, "after +3.5s and a restart", skew(t, c), 3500*time.Millisecond)
}
