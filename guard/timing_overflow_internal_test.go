package guard

import (
	"errors"
	"math"
	"testing"
	"time"
)

// Regression (found while writing FuzzOptions): the schedule rule added
// interval, timeout and grace before comparing, so three long durations
// overflowed to a negative sum and a schedule far beyond the TTL was
// accepted. TTLs are now capped at maxTTL, below which no sum overflows,
// and the rule still compares term by term.
func TestTimingRejectsOverflowingSum(t *testing.T) {
	const half = time.Duration(math.MaxInt64 / 2)
	if _, err := newTiming(math.MaxInt64, half, half, half); !errors.Is(err, ErrInvalid) {
		t.Fatalf("newTiming(MaxInt64, 3 × MaxInt64/2): err = %v, want ErrInvalid", err)
	}
	if _, err := newConfig([]Option{WithTTL(math.MaxInt64), WithRenewInterval(half), WithStopGrace(half), WithRequestTimeout(half)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("newConfig: err = %v, want ErrInvalid", err)
	}
	// Within the cap, a schedule over the budget by one term is refused,
	// and the longest one that fits is accepted.
	ttl := maxTTL
	budget := ttl - (ttl/100 + 2*time.Millisecond)
	if _, err := newTiming(ttl, budget/3, budget/3, budget-2*(budget/3)); err != nil {
		t.Fatalf("a schedule that fits exactly: %v", err)
	}
	if _, err := newTiming(ttl, budget/3, budget/3+1, budget-2*(budget/3)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a schedule 1ns over the budget: err = %v, want ErrInvalid", err)
	}
}

// A TTL above maxTTL is refused: twice it, a waiting acquisition's
// registration, would overflow, as would the durations derived from it.
func TestTimingCapsTTL(t *testing.T) {
	if _, err := newConfig([]Option{WithTTL(maxTTL)}); err != nil {
		t.Fatalf("WithTTL(maxTTL): %v", err)
	}
	if _, err := newConfig([]Option{WithTTL(maxTTL + 1)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("WithTTL(maxTTL+1): err = %v, want ErrInvalid", err)
	}
	c, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.scaled(maxTTL + 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("TTL(maxTTL+1) on one acquisition: err = %v, want ErrInvalid", err)
	}
	if 2*maxTTL < maxTTL {
		t.Fatal("2 × maxTTL overflows")
	}
}
