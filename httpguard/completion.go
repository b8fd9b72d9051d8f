package httpguard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jobguard/jobguard/guard"
)

// Fenced completion: a response becomes the key's only if the request's
// hold is still the newest on the key, and guard checks that in the same
// script that stores it (guard.Locker.ClaimFenced, against the lock's
// fencing counter). So a request whose lease ran out while its handler ran
// (a pause, a partition) can neither overwrite a newer request's response
// nor have its own replayed instead of one: once a newer request holds the
// key, the older one's store is refused, whether it stored first or not.
//
// The key's claim (guard.Locker.Claim, under the lookup key, beside the
// lock) holds the binding, the payload's fingerprint, from the first run of
// the handler, and then the completed response, which carries the
// fingerprint too and replaces the binding. One read answers a retry.

// errUnreadable is what readClaim finds wrong with a claim it cannot decode.
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
	// A binding is a fingerprint; an earlier version appended an 8-byte
	// token. A record is JSON, always longer.
	if len(b) == sha256.Size || len(b) == sha256.Size+8 {
		return claim{fingerprint: b[:sha256.Size]}, nil
	}
	rec, err := decodeRecord(b)
	if err != nil {
		return claim{}, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	return claim{fingerprint: rec.Fingerprint, rec: &rec}, nil
}

// answered answers the request from c, the key's claim as readClaim
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

// bind binds the key to the request's payload for the retention window,
// unless a request bound it before, and reports whether the handler may
// run: the key is bound to this payload and holds no response to replay.
// Otherwise it has answered.
func (h *handler) bind(ctx context.Context, q *request) bool {
	bound, err := h.l.Claim(ctx, q.lookup, q.fingerprint, h.c.retention)
	if err != nil {
		h.unavailable(q, err)
		return false
	}
	if bound {
		return true
	}
	c, err := h.readClaim(ctx, q)
	return !h.answered(q, c, err)
}

// store keeps rec as the key's response for the retention window if the
// request's hold, with token, is still the newest on the key, and reports
// whether it did. It writes with the lease's own context: the response is
// stored also when the client has gone, and not once the lease is known
// lost. A lease lost unnoticed (a pause) is caught by the token check.
func (h *handler) store(lease context.Context, q *request, token int64, rec record) bool {
	rec.Fingerprint = q.fingerprint
	b, err := json.Marshal(rec)
	if err != nil {
		q.log.Error("httpguard: response not stored", "err", err)
		return false
	}
	err = h.l.ClaimFenced(lease, q.lookup, token, b, h.c.retention)
	switch {
	case errors.Is(err, guard.ErrSuperseded):
		q.log.Warn("httpguard: response not stored: the request's hold is no longer the key's newest (its lease was lost, or it outlived Retention)", "status", rec.Status, "err", err)
	case err != nil:
		q.log.Error("httpguard: response not stored; a retry runs the handler again", "err", err)
	default:
		q.log.Debug("httpguard: handled; response stored", "status", rec.Status)
	}
	return err == nil
}
