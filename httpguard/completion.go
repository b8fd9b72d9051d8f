package httpguard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jobguard/jobguard/guard"
)

// Fenced completion: a response becomes the key's only if the request's
// hold is still the newest on the key, and guard checks that in the same
// script that stores it and releases the key (guard.Locker.WithClaim,
// against the lock's fencing counter). So a request whose lease ran out
// while its handler ran (a pause, a partition) can neither overwrite a
// newer request's response nor have its own replayed instead of one: once
// a newer request holds the key, the older one's store is refused, whether
// it stored first or not.
//
// The key's claim (beside the lock, under the lookup key) holds the
// binding, the payload's fingerprint, from the first run of the handler,
// and then the completed response, which carries the fingerprint too and
// replaces the binding. The request that reads it also acquires the key,
// when the claim is the payload's binding or empty; one that finds a
// response or another payload's binding is answered from it.

// errUnreadable is what decodeClaim finds wrong with a claim it cannot
// decode.
var errUnreadable = errors.New("httpguard: stored response unreadable")

// claim is what the key's claim holds: nothing (fingerprint nil), the
// binding of a request that ran, or a completed response (rec).
type claim struct {
	fingerprint []byte
	rec         *record
}

// readClaim reads the key's claim.
func (h *handler) readClaim(ctx context.Context, q *request) (claim, error) {
	b, ok, err := h.l.Claimed(ctx, q.lookup)
	if err != nil || !ok {
		return claim{}, err
	}
	return decodeClaim(b)
}

// decodeClaim decodes a claim's value.
func decodeClaim(b []byte) (claim, error) {
	// A binding is a fingerprint; an earlier version appended an 8-byte
	// token. A record is longer.
	if len(b) == sha256.Size || len(b) == sha256.Size+8 {
		return claim{fingerprint: b[:sha256.Size]}, nil
	}
	rec, err := decodeRecord(b)
	if err != nil {
		return claim{}, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	return claim{fingerprint: rec.Fingerprint, rec: &rec}, nil
}

// answered answers the request from c, the key's claim as decodeClaim
// returned it with err, and reports whether it did: 503 for err, 422 when
// the key is bound to another payload, the replay of a completed response.
// Otherwise the request may run the handler.
func (h *handler) answered(q *request, c claim, err error) bool {
	switch {
	case errors.Is(err, errUnreadable):
		// Not a record this version can read (another version wrote it):
		// failing closed keeps the handler from running twice for the key.
		q.log.Error("httpguard: stored response not usable; answered 503", "err", err)
		h.answer503(q)
	case err != nil:
		h.unavailable(q, err)
	case c.fingerprint == nil:
		return false
	case !bytes.Equal(c.fingerprint, q.fingerprint):
		h.deny(q.w, q.r, problemKeyReused())
	case c.rec != nil && h.c.replay:
		replay(q.w, *c.rec)
		q.log.Debug("httpguard: replayed", "status", c.rec.Status)
	default:
		return false
	}
	return true
}

// answerClaim answers the request from value, the key's claim, which
// guard found to differ from bind, what run asked for. A claim of this
// payload that the handler must still run for (a binding an earlier
// version wrote; with NoReplay, a response) is asked for as it is, once.
func (h *handler) answerClaim(q *request, bind, value []byte) {
	c, err := decodeClaim(value)
	switch {
	case h.answered(q, c, err):
	case bytes.Equal(bind, q.fingerprint):
		h.run(q, value)
	default: // the claim changed again meanwhile
		q.log.Error("httpguard: the key's stored value keeps changing; answered 503")
		h.answer503(q)
	}
}

// completed is what a run of the handler leaves to store as the key's
// claim: the response's record, or the binding again (for ErrorRetention)
// when the response is not kept; value nil stores nothing.
type completed struct {
	value  []byte
	ttl    time.Duration
	status int  // the response's
	keep   keep // how long the response is kept
}

// keep returns what to store for rec, the response of q's handler, kept
// as keep says: the record, if the principal's Quota affords it, else the
// binding, which leaves the key bound to its payload for ErrorRetention.
func (h *handler) keep(lease context.Context, q *request, rec record, keep keep) *completed {
	c := &completed{value: q.fingerprint, ttl: h.c.errRetention, status: rec.Status}
	if keep == keepNone {
		return c
	}
	rec.Fingerprint = q.fingerprint
	b, err := encodeRecord(rec)
	if err != nil {
		q.log.Error("httpguard: response not stored", "err", err)
		return &completed{status: rec.Status}
	}
	if !h.afford(lease, q, recordCost(len(b))) {
		return c
	}
	c.value, c.keep = b, keep
	if keep == keepFull {
		c.ttl = h.c.retention
	}
	return c
}

// report logs how the run that left done ended: guard.Locker.WithClaim
// returned claim (what it stored) and err.
func (h *handler) report(q *request, done *completed, claim []byte, err error) {
	stored := claim != nil && done.keep != keepNone
	lost := errors.Is(err, guard.ErrLeaseLost)
	switch {
	case errors.Is(err, guard.ErrSuperseded):
		q.log.Warn("httpguard: response not stored: the request's hold is no longer the key's newest (its lease was lost, or it outlived Retention)", "status", done.status, "err", err)
	case err != nil && done.value != nil && claim == nil && !lost:
		q.log.Error("httpguard: response not stored; a retry runs the handler again", "err", err)
	case stored:
		q.log.Debug("httpguard: handled; response stored", "status", done.status, "for", done.ttl)
	}
	if lost {
		q.log.Warn("httpguard: lease lost while the request was processed", "response_stored", stored, "err", err)
	}
}

// Quota accounting. A principal's budget pays for what its requests add to
// Redis for the Retention window: each new key's binding and fencing
// counter when the key is first bound (bindingCost), and each stored
// response's record when it is stored. The costs count key names and
// Redis's own overhead per key, so that they are at least what MEMORY
// USAGE reports (TestQuotaCountsWhatRedisStores checks it).

// perKeyOverhead is what Redis spends on a key beyond its name and value:
// its dictionary entry, object header, expiry entry and allocator rounding
// (about 60 to 90 bytes for a small string with a TTL on Redis 7).
const perKeyOverhead = 128

// bindingCost is what binding q's key adds: the claim (the fingerprint)
// and guard's fencing counter, each under a name of about the lookup key's
// length plus guard's prefix and suffix.
func bindingCost(q *request) int64 {
	name := int64(len(q.lookup) + 32)
	return 2*(perKeyOverhead+name) + sha256.Size + 20
}

// recordCost is what a record of n bytes adds in place of a binding: the
// allocator rounds a large value up to its size class, up to a quarter
// more (jemalloc: a 1 MiB body takes 1.25 MiB).
func recordCost(n int) int64 {
	return int64(n) + int64(n)/4 + perKeyOverhead
}

// chargeNewKey charges q's principal for binding q's key before the
// request binds it, and reports whether the request may go on; otherwise
// it has answered (from the key's claim, or 429, or 503). A key that is
// bound already costs nothing more. This read of the claim comes before
// guard's, which binds: with Quota a new key costs three requests more,
// this read and the Charges for its binding and for its response.
func (h *handler) chargeNewKey(q *request) bool {
	ctx := q.r.Context()
	c, err := h.readClaim(ctx, q)
	if h.answered(q, c, err) {
		return false
	}
	return c.fingerprint != nil || h.spend(ctx, q, bindingCost(q))
}

// spend charges amount to q's principal before the handler runs, and
// reports whether the request may go on; otherwise it has answered: 429
// when the budget is spent, 503 when Redis failed.
func (h *handler) spend(ctx context.Context, q *request, amount int64) bool {
	if h.c.quota == 0 {
		return true
	}
	ok, left, err := h.l.Charge(ctx, quotaKey(q.principal), amount, h.c.quota, h.c.retention)
	switch {
	case err != nil:
		h.unavailable(q, err)
		return false
	case !ok:
		h.logRepeated(q, quotaKey(q.principal), "httpguard: quota spent; answered 429", "window_left", left)
		q.w.Header().Set("Retry-After", strconv.FormatInt(max(int64((left+time.Second-1)/time.Second), 1), 10))
		h.deny(q.w, q.r, problemQuotaSpent())
		return false
	}
	return true
}

// afford charges amount to q's principal for a response to store, and
// reports whether it may be stored. One that is not is still sent; a retry
// runs the handler again.
func (h *handler) afford(ctx context.Context, q *request, amount int64) bool {
	if h.c.quota == 0 {
		return true
	}
	ok, _, err := h.l.Charge(ctx, quotaKey(q.principal), amount, h.c.quota, h.c.retention)
	switch {
	case err != nil:
		q.log.Error("httpguard: response not stored: the quota could not be charged", "err", err)
	case !ok:
		h.logRepeated(q, quotaKey(q.principal), "httpguard: response not stored: the principal's quota is spent", "bytes", amount)
	}
	return ok && err == nil
}
