package guard

import (
	"testing"
	"time"
)

// registration writes the format acquire.lua parses: waiter, owner, kind
// (with the number of permits above one), TTL, MinHold and FenceTTL in
// milliseconds, then the identity if any.
func TestRegistration(t *testing.T) {
	base := acquireArgs{waiter: "LOCKER", owner: "OWNER", ttl: 30 * time.Second}
	for _, tc := range []struct {
		name  string
		store redisStore
		edit  func(*acquireArgs)
		want  string
	}{
		{"no waiter", redisStore{}, func(a *acquireArgs) { a.waiter = "" }, ""},
		{"reader", redisStore{}, func(*acquireArgs) {}, "LOCKER OWNER r 30000 0 0"},
		{"writer granted", redisStore{}, func(a *acquireArgs) { a.write = true }, "LOCKER OWNER g 30000 0 0"},
		{"writer with replicas", redisStore{replicas: 1}, func(a *acquireArgs) { a.write = true }, "LOCKER OWNER w 30000 0 0"},
		{"writer on a quorum", redisStore{noGrants: true}, func(a *acquireArgs) { a.write = true }, "LOCKER OWNER w 30000 0 0"},
		{"permits", redisStore{}, func(a *acquireArgs) { a.write, a.permits = true, 12 }, "LOCKER OWNER g12 30000 0 0"},
		{"one permit", redisStore{}, func(a *acquireArgs) { a.write, a.permits = true, 1 }, "LOCKER OWNER g 30000 0 0"},
		{"durations", redisStore{}, func(a *acquireArgs) {
			a.ttl, a.minHold, a.fenceTTL = time.Microsecond, 1500*time.Millisecond, 100*365*24*time.Hour
		}, "LOCKER OWNER r 1 1500 3153600000000"},
		{"identity", redisStore{}, func(a *acquireArgs) { a.identity = "host 42 with spaces" }, "LOCKER OWNER r 30000 0 0 host 42 with spaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := base
			tc.edit(&a)
			if got := tc.store.registration(a); got != tc.want {
				t.Fatalf("registration = %q, want %q", got, tc.want)
			}
		})
	}
}
