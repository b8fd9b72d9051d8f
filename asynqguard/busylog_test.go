package asynqguard

import (
	"fmt"
	"testing"
	"time"
)

// busyLog logs a key's first busy attempt, then one per interval with the
// count of those not logged, and never remembers more than its bound.
func TestBusyLog(t *testing.T) {
	b := newBusyLog(3)
	t0 := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	type step struct {
		key      string
		at       time.Duration
		log      bool
		repeated int
	}
	steps := []step{
		{"a", 0, true, 0},
		{"a", time.Second, false, 0},
		{"b", time.Second, true, 0}, // another key logs on its own
		{"a", 30 * time.Second, false, 0},
		{"a", busyLogEvery, true, 2}, // an interval after the last line
		{"a", busyLogEvery + time.Second, false, 0},
		{"a", -time.Hour, true, 1}, // a clock stepped back logs
		{"c", 2 * time.Second, true, 0},
		{"d", 2 * time.Second, true, 0}, // evicts b, the least recently busy
		{"b", 3 * time.Second, true, 0}, // forgotten: logs again; evicts a
		{"c", 3 * time.Second, false, 0},
		{"a", 3 * time.Second, true, 0},
	}
	for i, s := range steps {
		log, repeated := b.report(s.key, t0.Add(s.at))
		if log != s.log || repeated != s.repeated {
			t.Fatalf("step %d (%s at %v): log %v, repeated %d; want %v, %d", i, s.key, s.at, log, repeated, s.log, s.repeated)
		}
		if b.order.Len() > 3 || len(b.byKey) != b.order.Len() {
			t.Fatalf("step %d: %d keys in the list, %d in the map; want at most 3, equal", i, b.order.Len(), len(b.byKey))
		}
	}
	for i := range 10 * busyLogKeys {
		b.report(fmt.Sprint(i), t0)
	}
	if b.order.Len() != 3 {
		t.Errorf("%d keys remembered, want 3", b.order.Len())
	}
}
