package cronguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/cronguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/robfig/cron/v3"
)

// The user's service, written with Add: three instances, each with its own
// cron started 700ms after the previous one, schedule "@every 2s" once;
// each epoch-aligned 2s bucket runs on exactly one of them.
func TestAddEveryRunsOncePerBucket(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 3)
	var ta tally
	rec := &recLogger{}
	start := time.Now()
	for i, l := range lockers {
		time.Sleep(time.Until(start.Add(time.Duration(i) * 700 * time.Millisecond)))
		c := cron.New()
		_, err := cronguard.Add(c, l, "every-2s-add", "@every 2s", func(ctx context.Context) error {
			tick, _ := cronguard.Tick(ctx)
			ta.add(tick)
			return nil
		}, cronguard.Logger(rec.logger()))
		if err != nil {
			t.Fatal(err)
		}
		c.Start()
		t.Cleanup(func() { <-c.Stop().Done() })
	}
	time.Sleep(time.Until(start.Add(7500 * time.Millisecond)))
	ta.check(t, 3, 2*time.Second)
	if skips := len(rec.all("cronguard: skip")); skips < 4 {
		t.Errorf("%d firings skipped, want at least 4 (three instances, one run per bucket); log:\n%s", skips, rec)
	}
}

// Add reads the spec in the Cron's location, as the Cron does.
func TestAddReadsTheCronsLocation(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 1)
	// A fixed zone needs no time zone database, so the test cannot skip.
	tokyo := time.FixedZone("JST", 9*60*60)
	c := cron.New(cron.WithLocation(tokyo))
	var tick time.Time
	at := time.Date(2026, 1, 10, 0, 30, 0, 0, time.UTC) // 09:30 in Tokyo
	if _, err := cronguard.Add(c, lockers[0], "tokyo", "0 9 * * *", func(ctx context.Context) error {
		tick, _ = cronguard.Tick(ctx)
		return nil
	}, cronguard.Clock(fixedClock(at))); err != nil {
		t.Fatal(err)
	}
	entries := c.Entries()
	if len(entries) != 1 {
		t.Fatalf("%d entries, want 1", len(entries))
	}
	// The Cron asks its schedule with its own clock's time, in its location.
	if next, want := entries[0].Schedule.Next(at.Add(-time.Hour).In(tokyo)), time.Date(2026, 1, 10, 9, 0, 0, 0, tokyo); !next.Equal(want) {
		t.Fatalf("the Cron's schedule fires at %v, want %v", next, want)
	}
	entries[0].Job.Run()
	if want := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC); !tick.Equal(want) {
		t.Errorf("tick %v, want 09:00 in Tokyo (%v)", tick.UTC(), want)
	}
}

// Add fails, and schedules nothing, on a wiring mistake.
func TestAddErrors(t *testing.T) {
	t.Parallel()
	_, lockers := newFleet(t, 1)
	l := lockers[0]
	fn := func(context.Context) error { return nil }
	dowOptional := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.DowOptional)
	tests := []struct {
		name   string
		cron   *cron.Cron
		locker *guard.Locker
		spec   string
		fn     func(context.Context) error
		opts   []cronguard.Option
		want   string // "" for no error
	}{
		{"valid", cron.New(), l, "@every 5m", fn, nil, ""},
		{"the Cron's own parser", cron.New(cron.WithParser(dowOptional)), l, "0 3 * *", fn,
			[]cronguard.Option{cronguard.Parser(dowOptional)}, ""},
		{"nil cron", nil, l, "@every 5m", fn, nil, "nil *cron.Cron"},
		{"nil locker", cron.New(), nil, "@every 5m", fn, nil, "nil *guard.Locker"},
		{"nil func", cron.New(), l, "@every 5m", nil, nil, "nil func"},
		{"bad spec", cron.New(), l, "every 5m", fn, nil, `spec "every 5m": expected 5 to 6 fields`},
		{"spec the default parser rejects", cron.New(), l, "0 3 * *", fn, nil, `spec "0 3 * *"`},
		{"bad option", cron.New(), l, "@every 5m", fn, []cronguard.Option{cronguard.MinHold(-1)}, "MinHold(-1ns)"},
		{"Spec as well", cron.New(), l, "@every 5m", fn, []cronguard.Option{cronguard.Spec("@every 5m")}, "Spec or Schedule given to Add"},
		{"Schedule as well", cron.New(), l, "@every 5m", fn, []cronguard.Option{cronguard.Schedule(cron.Every(time.Minute))}, "Spec or Schedule given to Add"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := cronguard.Add(tt.cron, tt.locker, "j", tt.spec, tt.fn, tt.opts...)
			if tt.want == "" {
				if err != nil || id == 0 || len(tt.cron.Entries()) != 1 {
					t.Errorf("Add = %v, %v with %d entries; want an entry", id, err, len(tt.cron.Entries()))
				}
				return
			}
			if !errors.Is(err, guard.ErrInvalid) || !strings.Contains(err.Error(), "cronguard: invalid configuration: "+tt.want) {
				t.Errorf("Add = %v, want guard.ErrInvalid with %q", err, tt.want)
			}
			if id != 0 || tt.cron != nil && len(tt.cron.Entries()) != 0 {
				t.Errorf("Add failed but scheduled entry %v", id)
			}
		})
	}
}
