package gocronguard

import (
	"testing"
	"time"
)

func TestTickOf(t *testing.T) {
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		name   string
		window time.Duration
		now    string
		tick   string
		claim  time.Duration
	}{
		{"default: on the second", time.Second, "2026-01-10T12:00:05Z", "2026-01-10T12:00:05Z", time.Minute},
		{"default: 2ms late", time.Second, "2026-01-10T12:00:05.002Z", "2026-01-10T12:00:05Z", time.Minute},
		{"default: 999ms late", time.Second, "2026-01-10T12:00:05.999Z", "2026-01-10T12:00:05Z", time.Minute},
		{"5m: epoch-aligned", 5 * time.Minute, "2026-01-10T12:07:30Z", "2026-01-10T12:05:00Z", 10 * time.Minute},
		{"7s: epoch-aligned", 7 * time.Second, "2026-01-10T00:00:00Z", "2026-01-09T23:59:55Z", time.Minute},
		{"1h: claim two windows", time.Hour, "2026-01-10T10:59:59Z", "2026-01-10T10:00:00Z", 2 * time.Hour},
		{"1500ms: below a second", 1500 * time.Millisecond, "1970-01-01T00:00:04.4Z", "1970-01-01T00:00:03Z", time.Minute},
		{"before the epoch", 2 * time.Second, "1969-12-31T23:59:59.5Z", "1969-12-31T23:59:58Z", time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config{window: tt.window}
			tick, claim := c.tickOf(utc(tt.now))
			if want := utc(tt.tick); !tick.Equal(want) {
				t.Errorf("tick = %v, want %v", tick.UTC(), want)
			}
			if claim != tt.claim {
				t.Errorf("claim TTL = %v, want %v", claim, tt.claim)
			}
		})
	}
}

// A skewed instance fires a job by its own clock and names the tick by the
// same clock: whatever its skew, a run that asks for the lock less than a
// window after its scheduled time names it by that time.
func TestTickOfSkewedFiring(t *testing.T) {
	c := config{window: time.Second}
	scheduled := time.Date(2026, 1, 10, 12, 0, 5, 0, time.UTC)
	for _, skew := range []time.Duration{-30 * time.Second, -450 * time.Millisecond, 0, 450 * time.Millisecond, 30 * time.Second} {
		for _, late := range []time.Duration{0, time.Millisecond, 300 * time.Millisecond, 999 * time.Millisecond} {
			// The instance fires when its clock reads scheduled; the true
			// time then is scheduled - skew. It asks late after.
			local := scheduled.Add(-skew).Add(late).Add(skew)
			if tick, _ := c.tickOf(local); !tick.Equal(scheduled) {
				t.Errorf("skew %v, %v late: tick %v, want %v", skew, late, tick, scheduled)
			}
		}
	}
}
