// Package httpguard makes HTTP endpoints idempotent by the Idempotency-Key
// request header (IETF httpapi draft "The Idempotency-Key HTTP Header
// Field"), across every instance of a service that shares one Redis.
//
//	locker, _ := guard.New(redisClient)
//	idem := httpguard.Middleware(locker, httpguard.Principal(tenantOf))
//	mux.Handle("POST /orders", idem(createOrder))
//
// # What a request gets
//
// POST and PATCH requests are guarded (Methods changes that); any other
// request passes through untouched. A guarded request without the header
// passes through too, or gets 400 with Required. A guarded request with
// the header gets, in this order:
//
//   - 400 if the key is not 1 to 255 printable ASCII characters (0x20 to
//     0x7E), or the header appears twice. The key may be sent bare (abc) or
//     as a Structured Field string ("abc", with \" and \\ escapes, no
//     parameters), as the draft specifies; both forms name the same key.
//   - 413 if the body is larger than MaxBody (default 1 MiB): the body is
//     read to fingerprint the request, then handed to the handler intact.
//   - The stored response, if a request with the same key completed within
//     the retention window (Retention, default 24h): same status, body and
//     allow-listed headers (ReplayHeaders), plus "Idempotent-Replayed:
//     true". The handler does not run.
//   - 422 if the key was used before with a different payload: the SHA-256
//     of method, path, query and body.
//   - 409 with Retry-After if a request with the same key is being
//     processed, on this instance or any other (see below).
//   - 429 with Retry-After if the key is new and the principal has spent
//     its Quota for the retention window.
//   - Otherwise the handler runs, holding a lease on the key (see guard);
//     its request context is canceled if the lease is lost or the client
//     goes away.
//
// Every response the middleware makes itself is RFC 9457 problem details
// (application/problem+json, see Problem) with "Cache-Control: no-store",
// written by the DenyHandler. If Redis fails, the request is not processed
// and gets 503 with "Retry-After: 1": without Redis the middleware cannot
// tell a retry from a first request, so it fails closed.
//
// # Retry-After on 409
//
// The holder of a key is either a live request, which renews its lease
// while it runs, or an instance that crashed, whose lease runs out within
// its TTL (guard.WithTTL, or TTL here; 30s by default). Redis reports how
// long the key stays held unless renewed (guard.HeldFor), and Retry-After
// is that time in whole seconds, rounded up, at least 1 and at most
// MaxRetryAfter (default 5s). A crashed holder's remaining time shrinks, so
// its clients are told when its key frees; a live one's stays near the TTL
// however soon the request will finish, so its clients are told the cap.
//
// # Scope of a key
//
// A key is scoped by the request method, the route pattern that matched
// (r.Pattern; the URL path when there is none, see Middleware) and the
// principal (Principal, for example the tenant), so one endpoint or tenant
// cannot block or replay another's key. Middleware requires Principal, or
// SharedKeys to declare that every caller may see every other's responses:
// without a principal, a caller who sends another's key and payload would
// be handed the other's stored response. Redis sees only a SHA-256 of
// these; neither that hash nor the lock key nor an owner token is sent to a
// client.
//
// # What is stored
//
// The payload's fingerprint is bound to the key when the handler first
// runs, for ErrorRetention (default 1m). After the handler returns, its
// status, allow-listed headers and body replace the binding: a success
// (below 400) for the retention window (Retention, default 24h), a client
// error (4xx) for ErrorRetention only. The body is stored as sent, with the
// headers and 42 bytes beside it. A response is not stored, and the key
// stays bound to its payload for ErrorRetention, when:
//   - the status is 5xx, 408, 425 or 429: those invite a retry, and a retry
//     runs the handler again (with the same payload; another payload is
//     still refused with 422);
//   - the request's context ended before the handler returned (its client
//     went away): what the handler wrote
//     may be cut short, as a streamed response stopped with its client is,
//     so a retry runs the handler again;
//   - the headers to replay come to more than 16 KiB;
//   - Quota is set and the principal's budget cannot pay for it;
//   - the body is larger than MaxStoredBody (default 1 MiB): the response
//     is sent but not stored, so a retry runs the handler again;
//   - the lease was lost while the handler ran: another request may have
//     run it meanwhile, so nothing is claimed as the key's result. This
//     holds also when the loss went unnoticed (the process was paused): a
//     response is stored only if the request's hold is still the newest on
//     the key (its fencing token is the latest the key's counter minted),
//     which Redis checks in the same script that stores it and releases
//     the key (guard.Locker.WithClaim). Once a newer request has taken the key,
//     the older one's store is refused, whether the newer one has
//     completed yet or not; a request that takes the key after the older
//     response was stored replays it instead of running. So a stale
//     request never overwrites, nor is replayed instead of, a newer
//     request's response;
//   - the request ran longer than both the retention window and the lease
//     TTL: the key's fencing counter, kept that long after the request
//     began, has expired, and without it no hold can be proven the newest
//     (see Retention);
//   - the handler panicked, or never ran (every refusal above);
//   - NoReplay is set.
//
// A handler whose effects must not repeat even in those cases should make
// them conditional on its own records (for example, a unique constraint on
// the key).
//
// Redis holds, per key, one value (the fingerprint, then the response), for
// as long as said above, and guard's fencing counter (about 140 bytes),
// expiring after the retention window; the lease while the handler runs.
// Quota caps what one principal adds per retention window, and
// docs/security.md gives the worst case per request and the Redis
// settings this needs (maxmemory-policy noeviction).
//
// # No permits
//
// httpguard takes no guard.Permits: an idempotency key promises that a
// request runs once, so a second request with the key must wait for the
// first (409), never run beside it, and n permits per key would run up to
// n copies of one request. To cap how many requests of an expensive
// endpoint run at once across the fleet, which is another concern, hold a
// permit of a key of your own in the handler (or a middleware around it),
// keyed by the route rather than by the idempotency key:
//
//	err := locker.WithLock(r.Context(), "export-endpoint", func(ctx context.Context) error {
//		return export(ctx, w, r)
//	}, guard.Permits(4), guard.Wait(2*time.Second)) // busy: errors.Is(err, guard.ErrNotAcquired), answer 429 or 503
package httpguard
