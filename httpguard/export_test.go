package httpguard

import "net/http"

// ParseKey exposes the Idempotency-Key parser to the tests.
var ParseKey = parseKey

// LockKey returns the Redis key of the lock that guards requests with
// method, route pattern, principal and client key, under guard's default
// prefix: what a test deletes to make the lease be lost.
func LockKey(method, pattern, principal, key string) string {
	return "guard:{" + lookupKey(method, route(&http.Request{Pattern: pattern}), principal, key) + "}"
}
