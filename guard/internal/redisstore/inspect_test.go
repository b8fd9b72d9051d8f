package redisstore

import (
	"testing"

	"github.com/jobguard/jobguard/guard/internal/store"
)

// parseRegistration reads every registration Store.registration
// writes: plain kinds, a permit's kind with its n ('g4', 'w4'), and an
// identity tail that may hold spaces.
func TestParseRegistration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		want store.Waiter
	}{
		{"L1 O1 g 10000 0 0", true, store.Waiter{Locker: "L1", Owner: "O1", Write: true}},
		{"L1 O1 r 10000 0 0", true, store.Waiter{Locker: "L1", Owner: "O1"}},
		{"L1 O1 w 10000 0 0 host/12", true, store.Waiter{Locker: "L1", Owner: "O1", Write: true, Identity: "host/12"}},
		{"L1 O1 g4 10000 0 0", true, store.Waiter{Locker: "L1", Owner: "O1", Write: true}},
		{"L1 O1 w12 10000 500 0 worker b/42 (blue)", true, store.Waiter{Locker: "L1", Owner: "O1", Write: true, Identity: "worker b/42 (blue)"}},
		{"L1 O1 g1 10000 0 0", false, store.Waiter{}}, // n = 1 is written as 'g'
		{"L1 O1 r4 10000 0 0", false, store.Waiter{}}, // readers take no permits
		{"L1 O1 gx 10000 0 0", false, store.Waiter{}},
		{"L1 O1 x 10000 0 0", false, store.Waiter{}},
		{"L1 O1 g 10000 0", false, store.Waiter{}},
	} {
		got, ok := parseRegistration(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseRegistration(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	// What registration writes parses back.
	s := &Store{}
	a := store.AcquireArgs{Owner: "O", Waiter: "L", Write: true, Permits: 4, Identity: "me and you"}
	if got, ok := parseRegistration(s.registration(a)); !ok || got != (store.Waiter{Locker: "L", Owner: "O", Write: true, Identity: "me and you"}) {
		t.Errorf("round trip of %q = %+v, %v", s.registration(a), got, ok)
	}
}
