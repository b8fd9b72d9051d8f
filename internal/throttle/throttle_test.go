package throttle

import (
	"context"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCallerLogsMarksOneKey(t *testing.T) {
	ctx := CallerLogs(context.Background(), "job")
	if !LoggedByCaller(ctx, "job") {
		t.Error("the marked key is not marked")
	}
	if LoggedByCaller(ctx, "other") || LoggedByCaller(context.Background(), "job") {
		t.Error("a key that was not marked is")
	}
}

func TestAllow(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	th := New(time.Minute, 2)
	for _, tc := range []struct {
		key        string
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{"a", 0, true, 0},                 // the first of a key
		{"a", time.Second, false, 0},      // within the interval
		{"a", 30 * time.Second, false, 0}, //
		{"b", 31 * time.Second, true, 0},  // another key has its own
		{"a", 61 * time.Second, true, 2},  // an interval later, with the count
		{"a", 60 * time.Second, true, 0},  // the clock stepped back
		{"c", 62 * time.Second, true, 0},  // a third key: b, the least recent, is forgotten
		{"b", 63 * time.Second, true, 0},  // and logs again
		{"a", 64 * time.Second, true, 0},  // a was forgotten for b
	} {
		ok, n := th.Allow(tc.key, t0.Add(tc.at))
		if ok != tc.ok || n != tc.suppressed {
			t.Errorf("Allow(%s, +%v) = %v, %d; want %v, %d", tc.key, tc.at, ok, n, tc.ok, tc.suppressed)
		}
	}
}

// Keys beyond the bound cost no memory: the oldest go.
func TestBounded(t *testing.T) {
	th := New(time.Minute, 8)
	now := time.Now()
	for i := range 1000 {
		th.Allow(strconv.Itoa(i), now)
	}
	if n := len(th.byKey); n != 8 || th.order.Len() != 8 {
		t.Fatalf("%d keys remembered, want 8", n)
	}
}
