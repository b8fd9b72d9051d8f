package guard_test

import (
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// The fencing counter under a server clock stepped forward and then
// corrected (an NTP step back of the same size): tokens are minted as the
// counter plus one but never below the server's clock in µs, so once the
// counter is gone only the clock orders them. The default counter never
// expires, and tokens keep increasing whatever the clock does. A FenceTTL
// counter expires by the server's clock: if it has expired when the clock
// is stepped back by more than its FenceTTL, the next token is below the
// last one. docs/guarantees.md states both; this test measures them.
func TestFencingCounterUnderClockSteps(t *testing.T) {
	const step = 10 * time.Second
	tests := []struct {
		name     string
		opts     []guard.LockOption
		wantBack bool
	}{
		{"permanent counter", nil, false},
		{"FenceTTL counter, step back beyond it", []guard.LockOption{guard.FenceTTL(200 * time.Millisecond)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, clock := redistest.StartWithClock(t)
			l := newLocker(t, srv.Addr(), guard.WithTTL(time.Second))
			admin := srv.Client(t)
			const key = "clock-steps"
			token := func() int64 {
				t.Helper()
				le := mustAcquire(t, t.Context(), l, key, tt.opts...)
				mustRelease(t, le)
				return le.Token()
			}
			before := token()
			clock.Step(t, step) // wrong by step: tokens from the clock ahead
			ahead := token()
			// Let a FenceTTL counter expire (it lives at least the TTL) on
			// the clock still ahead; EXISTS deletes an expired key, as
			// Redis's own expiry cycle would.
			time.Sleep(1300 * time.Millisecond)
			exists, err := admin.Exists(t.Context(), "guard:{"+key+"}:fence").Result()
			if err != nil {
				t.Fatal(err)
			}
			if gone := exists == 0; gone != tt.wantBack {
				t.Fatalf("counter gone = %v before the correction, want %v", gone, tt.wantBack)
			}
			clock.Step(t, -step) // corrected
			after := token()
			t.Logf("tokens %d, %d with the clock %v ahead, %d after the correction (counter left before it: %v)",
				before, ahead, step, after, exists == 1)
			if ahead <= before {
				t.Fatalf("token %d after a forward step, %d before: want increasing", ahead, before)
			}
			if back := after <= ahead; back != tt.wantBack {
				t.Fatalf("token %d after the correction, %d before it: went back = %v, want %v", after, ahead, back, tt.wantBack)
			}
		})
	}
}
