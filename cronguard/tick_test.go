package cronguard

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

func mustParse(t *testing.T, spec string) cron.Schedule {
	t.Helper()
	s, err := specParser.Parse(spec)
	if err != nil {
		t.Fatalf("parse %q: %v", spec, err)
	}
	return s
}

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
		name      string
		spec      string // "" for no Spec
		now       string
		tick      string
		claim     time.Duration
		noSpecTTL bool
	}{
		{"no spec: start of the second", "", "2026-01-10T12:00:05Z", "2026-01-10T12:00:05Z", time.Minute, true},
		{"no spec: 300ms late", "", "2026-01-10T12:00:05.3Z", "2026-01-10T12:00:05Z", time.Minute, true},
		{"no spec: 999ms late", "", "2026-01-10T12:00:05.999Z", "2026-01-10T12:00:05Z", time.Minute, true},
		{"every second", "CRON_TZ=UTC * * * * * *", "2026-01-10T12:00:05.3Z", "2026-01-10T12:00:05Z", 2 * time.Second, false},
		{"every 5s, between", "CRON_TZ=UTC */5 * * * * *", "2026-01-10T12:00:09.9Z", "2026-01-10T12:00:05Z", 10 * time.Second, false},
		{"every 5s, on it", "CRON_TZ=UTC */5 * * * * *", "2026-01-10T12:00:10Z", "2026-01-10T12:00:10Z", 10 * time.Second, false},
		{"daily at 3, before", "CRON_TZ=UTC 0 3 * * *", "2026-01-10T02:59:59Z", "2026-01-09T03:00:00Z", 48 * time.Hour, false},
		{"daily at 3, after", "CRON_TZ=UTC 0 3 * * *", "2026-01-10T03:00:00.2Z", "2026-01-10T03:00:00Z", 48 * time.Hour, false},
		{"uneven gaps, long one", "CRON_TZ=UTC 0 0,5 * * *", "2026-01-10T04:59:00Z", "2026-01-10T00:00:00Z", 10 * time.Hour, false},
		{"uneven gaps, short one", "CRON_TZ=UTC 0 0,5 * * *", "2026-01-10T05:00:01Z", "2026-01-10T05:00:00Z", 38 * time.Hour, false},
		{"time zone", "CRON_TZ=Asia/Tokyo 0 9 * * *", "2026-01-10T00:30:00Z", "2026-01-10T00:00:00Z", 48 * time.Hour, false},
		{"descriptor", "CRON_TZ=UTC @hourly", "2026-01-10T07:59:59Z", "2026-01-10T07:00:00Z", 2 * time.Hour, false},
		{"leap day", "CRON_TZ=UTC 0 0 29 2 *", "2026-06-01T00:00:00Z", "2024-02-29T00:00:00Z", 2 * (4*365 + 1) * 24 * time.Hour, false},
		{"never fires", "CRON_TZ=UTC 0 0 30 2 *", "2026-06-01T00:00:00.5Z", "2026-06-01T00:00:00Z", time.Minute, true},
		{"@every 2s: bucket start", "@every 2s", "1970-01-01T00:16:40Z", "1970-01-01T00:16:40Z", 4 * time.Second, false},
		{"@every 2s: bucket end", "@every 2s", "1970-01-01T00:16:41.999Z", "1970-01-01T00:16:40Z", 4 * time.Second, false},
		{"@every 7s: epoch-aligned", "@every 7s", "2026-01-10T00:00:00Z", "2026-01-09T23:59:55Z", 14 * time.Second, false},
		{"@every 1h", "@every 1h", "2026-01-10T10:59:59Z", "2026-01-10T10:00:00Z", 2 * time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config{}
			if tt.spec != "" {
				c.schedule = mustParse(t, tt.spec)
			}
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

// A skewed instance fires by its own clock and names the tick by the same
// clock: whatever its skew or lateness (under a period), it names a firing
// by the activation it was for.
func TestTickOfSkewedFiring(t *testing.T) {
	c := config{schedule: mustParse(t, "* * * * * *")}
	activation := time.Date(2026, 1, 10, 12, 0, 5, 0, time.UTC)
	for _, skew := range []time.Duration{-500 * time.Millisecond, -300 * time.Millisecond, 0, 300 * time.Millisecond, 499 * time.Millisecond} {
		for _, late := range []time.Duration{0, time.Millisecond, 300 * time.Millisecond, 999 * time.Millisecond} {
			// The instance's cron fires when its clock reads activation; the
			// true time then is activation - skew. The run starts late after.
			trueStart := activation.Add(-skew).Add(late)
			local := trueStart.Add(skew)
			if tick, _ := c.tickOf(local); !tick.Equal(activation) {
				t.Errorf("skew %v, %v late: tick %v, want %v", skew, late, tick, activation)
			}
		}
	}
}

// latestActivation agrees with its definition for many schedules and times:
// an activation, at or before now, with the next one after now.
func TestLatestActivation(t *testing.T) {
	specs := []string{
		"* * * * * *", "*/7 * * * * *", "0 * * * * *", "30 */3 * * * *",
		"0 0 * * *", "15 4 * * 1-5", "0 0 1 * *", "0 12 * * 0", "* * 0-11 * * *",
		"@hourly", "@daily", "@weekly", "@monthly", "@yearly",
		"CRON_TZ=America/New_York 30 2 * * *", "CRON_TZ=Europe/Berlin 0 3 * * *",
	}
	r := rand.New(rand.NewPCG(1, 2))
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, spec := range specs {
		s := mustParse(t, spec)
		for range 100 {
			now := start.Add(time.Duration(r.Int64N(int64(3 * 365 * 24 * time.Hour))))
			a, ok := latestActivation(s, now)
			switch {
			case !ok:
				t.Fatalf("%q at %v: none found", spec, now)
			case a.After(now):
				t.Fatalf("%q at %v: %v is after now", spec, now, a)
			case s.Next(a).Compare(now) <= 0:
				t.Fatalf("%q at %v: %v is not the latest; %v is", spec, now, a, s.Next(a))
			case !s.Next(a.Add(-time.Second)).Equal(a):
				t.Fatalf("%q at %v: %v is not an activation", spec, now, a)
			}
		}
	}
}

func BenchmarkTickOf(b *testing.B) {
	for _, spec := range []string{"* * * * * *", "0 0 * * *", "0 0 29 2 *", "* * 0-11 * * *"} {
		s, err := specParser.Parse(spec)
		if err != nil {
			b.Fatal(err)
		}
		c := config{schedule: s}
		now := time.Date(2026, 6, 1, 23, 0, 0, 0, time.UTC)
		b.Run(spec, func(b *testing.B) {
			for b.Loop() {
				c.tickOf(now)
			}
		})
	}
}
