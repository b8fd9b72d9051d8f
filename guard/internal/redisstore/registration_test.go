package redisstore

import (
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
)

// registration writes the format acquire.lua parses: waiter, owner, kind
// (with the number of permits above one), TTL, MinHold and FenceTTL in
// milliseconds, then the identity if any.
func TestRegistration(t *testing.T) {
	base := store.AcquireArgs{Waiter: "LOCKER", Owner: "OWNER", TTL: 30 * time.Second}
	for _, tc := range []struct {
		name  string
		store *Store
		edit  func(*store.AcquireArgs)
		want  string
	}{
		{"no waiter", New(nil, Options{}), func(a *store.AcquireArgs) { a.Waiter = "" }, ""},
		{"reader", New(nil, Options{}), func(*store.AcquireArgs) {}, "LOCKER OWNER r 30000 0 0"},
		{"writer granted", New(nil, Options{}), func(a *store.AcquireArgs) { a.Write = true }, "LOCKER OWNER g 30000 0 0"},
		{"writer with replicas", New(nil, Options{Replicas: 1}), func(a *store.AcquireArgs) { a.Write = true }, "LOCKER OWNER w 30000 0 0"},
		{"writer on a quorum", New(nil, Options{Quorum: true}), func(a *store.AcquireArgs) { a.Write = true }, "LOCKER OWNER w 30000 0 0"},
		{"permits", New(nil, Options{}), func(a *store.AcquireArgs) { a.Write, a.Permits = true, 12 }, "LOCKER OWNER g12 30000 0 0"},
		{"one permit", New(nil, Options{}), func(a *store.AcquireArgs) { a.Write, a.Permits = true, 1 }, "LOCKER OWNER g 30000 0 0"},
		{"durations", New(nil, Options{}), func(a *store.AcquireArgs) {
			a.TTL, a.MinHold, a.FenceTTL = time.Microsecond, 1500*time.Millisecond, 100*365*24*time.Hour
		}, "LOCKER OWNER r 1 1500 3153600000000"},
		{"identity", New(nil, Options{}), func(a *store.AcquireArgs) { a.Identity = "host 42 with spaces" }, "LOCKER OWNER r 30000 0 0 host 42 with spaces"},
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
