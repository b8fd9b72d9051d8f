package httpguard

import "net/http"

// ParseKey exposes the Idempotency-Key parser to the tests.
var ParseKey = parseKey

// LookupKey returns the guard key (lock name) of requests with method,
// route pattern, principal and client key: what a test acquires with a
// Locker of its own to play another instance holding the key.
func LookupKey(method, pattern, principal, key string) string {
	return lookupKey(method, route(&http.Request{Pattern: pattern}), principal, key)
}

// LockKey returns the Redis key of the lock that guards requests with
// method, route pattern, principal and client key, under guard's default
// prefix: what a test deletes to make the lease be lost.
func LockKey(method, pattern, principal, key string) string {
	return "guard:{" + LookupKey(method, pattern, principal, key) + "}"
}
