package httpguard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Fenced completion: a response becomes the key's only if no request with a
// newer hold on the key has begun, so a request whose lease ran out while
// its handler ran (a pause, a partition) can neither overwrite a newer
// request's response nor have its own replayed instead of one.
//
// Guard hands every hold a fencing token, and the check must be atomic with
// the store. httpguard reaches Redis only through guard's Locker, so the
// atomic step is guard's set-once claim (Claim, one SET NX), not a script:
// each request that may store has a slot of its own, and a request with a
// newer token that begins before the slot is filled claims that same slot
// first, with a mark pointing to its own slot. Redis decides which of the
// two single commands came first: either the older response is stored, and
// the newer request, reading it, replays it without running the handler; or
// the mark is, and the older request's store fails.
//
// The slots form a chain from the head, lookup+":response". The request
// that binds the key (claims its fingerprint, recording its token with it)
// owns the head when it finds it empty, so a key whose first request
// completes keeps one response key and costs one read to replay, as it did
// before. A request that finds the chain longer (an earlier request stored
// nothing: a 5xx, a lost lease) marks the first empty slot and owns
// lookup+":response:"+token. A request that meets a token higher than its
// own, in the binding or in a mark, has been superseded and does not run.

// supersededPrefix starts a mark: the slot's owner was superseded by the
// request with the token that follows, whose slot is next in the chain.
const supersededPrefix = "superseded-by:"

// maxSlots bounds the chain a request follows: a key that ran this many
// times within the retention window without storing a response is answered
// 503 until its slots expire.
const maxSlots = 100

// What walk can find wrong with the values it reads, besides Redis errors.
var (
	errUnreadable   = errors.New("httpguard: stored response unreadable")
	errChainTooLong = fmt.Errorf("httpguard: more than %d runs of the key stored no response", maxSlots)
)

// head is the first slot of the key's chain.
func (q *request) head() string { return q.lookup + ":response" }

// slot is the slot of the request with token.
func (q *request) slot(token int64) string {
	return q.lookup + ":response:" + strconv.FormatInt(token, 10)
}

// binding is what bindKey claims: the payload's fingerprint, then the
// binding request's token (8 bytes, big-endian).
func binding(fingerprint []byte, token int64) []byte {
	return binary.BigEndian.AppendUint64(bytes.Clone(fingerprint), uint64(token))
}

// splitBinding returns the fingerprint and the token of a binding; a
// binding written before tokens were recorded has token 0.
func splitBinding(b []byte) (fingerprint []byte, token int64) {
	if len(b) == sha256.Size+8 {
		return b[:sha256.Size], int64(binary.BigEndian.Uint64(b[sha256.Size:]))
	}
	return b, 0
}

// begin readies a request that holds the key's lease with token to run:
// it binds the key to the payload and finds the slot the response will be
// stored in. It returns that slot, or "" when it has answered instead: a
// replay, a refusal, or 409 when a newer request has superseded this one.
func (h *handler) begin(ctx context.Context, q *request, token int64) string {
	rec, end, newest, err := h.walk(ctx, q, q.head())
	if err != nil || rec != nil {
		h.answerWith(q, rec, err)
		return ""
	}
	own, boundBy, ok := h.bindKey(ctx, q, token)
	if !ok {
		return ""
	}
	newest = max(newest, boundBy)
	for {
		if newest > token {
			h.superseded(q, token, newest)
			return ""
		}
		if own && end == q.head() {
			return end
		}
		// Twice the retention: a response stored in a later slot is reached
		// only through this mark, and is kept for the retention counted from
		// when it was stored, which is after this claim by the run's length.
		marked, err := h.l.Claim(ctx, end, []byte(supersededPrefix+strconv.FormatInt(token, 10)), 2*h.c.retention)
		if err != nil {
			h.unavailable(q, err)
			return ""
		}
		if marked {
			return q.slot(token)
		}
		// Another request filled end first: follow it.
		var n int64
		rec, end, n, err = h.walk(ctx, q, end)
		if err != nil || rec != nil {
			h.answerWith(q, rec, err)
			return ""
		}
		newest = max(newest, n)
	}
}

// bindKey binds the key to the request's payload, with the request's
// token, unless an earlier request did. It reports whether this request
// bound it, and the binding's token otherwise (0 for none), and whether the
// request may go on: the key is bound to this payload. Otherwise it has
// answered.
func (h *handler) bindKey(ctx context.Context, q *request, token int64) (own bool, boundBy int64, ok bool) {
	bound, err := h.l.Claim(ctx, q.lookup, binding(q.fingerprint, token), h.c.retention)
	if err != nil {
		h.unavailable(q, err)
		return false, 0, false
	}
	if bound {
		return true, token, true
	}
	b, found, err := h.l.Claimed(ctx, q.lookup)
	if err != nil {
		h.unavailable(q, err)
		return false, 0, false
	}
	if !found { // expired since: nothing to compare with
		return false, 0, true
	}
	fp, boundBy := splitBinding(b)
	if !bytes.Equal(fp, q.fingerprint) {
		h.deny(q.w, q.r, problemKeyReused())
		return false, 0, false
	}
	return false, boundBy, true
}

// walk follows the key's chain from slot from to the first slot that holds
// a response or is empty. It returns the response, or else the empty slot,
// and the highest token of the marks it passed (0 for none).
func (h *handler) walk(ctx context.Context, q *request, from string) (rec *record, end string, newest int64, err error) {
	end = from
	for range maxSlots {
		b, ok, err := h.l.Claimed(ctx, end)
		if err != nil || !ok {
			return nil, end, newest, err
		}
		next, marked := strings.CutPrefix(string(b), supersededPrefix)
		if !marked {
			r, err := decodeRecord(b)
			if err != nil {
				return nil, end, newest, fmt.Errorf("%w: %w", errUnreadable, err)
			}
			return &r, end, newest, nil
		}
		token, err := strconv.ParseInt(next, 10, 64)
		if err != nil || token <= 0 {
			return nil, end, newest, fmt.Errorf("%w: bad mark %q", errUnreadable, b)
		}
		newest = max(newest, token)
		end = q.slot(token)
	}
	return nil, end, newest, errChainTooLong
}

// answerWith replays rec, or refuses the request if rec belongs to another
// payload, or answers 503 for err (Redis failed, or what it holds cannot be
// read).
func (h *handler) answerWith(q *request, rec *record, err error) {
	switch {
	case errors.Is(err, errUnreadable), errors.Is(err, errChainTooLong):
		// Not a record this version can read (another version wrote it),
		// or a chain too long to follow: failing closed keeps the handler
		// from running twice for the key.
		q.log.Error("httpguard: stored response not usable; answered 503", "err", err)
		h.answer503(q)
	case err != nil:
		h.unavailable(q, err)
	case !bytes.Equal(rec.Fingerprint, q.fingerprint):
		h.deny(q.w, q.r, problemKeyReused())
	default:
		replay(q.w, *rec)
		q.log.Debug("httpguard: replayed", "status", rec.Status)
	}
}

// superseded answers a request whose lease ended before its handler ran:
// a request with a newer token holds the key, so it is in flight.
func (h *handler) superseded(q *request, token, newer int64) {
	q.log.Warn("httpguard: lease lost before the handler ran; a newer request has the key", "token", token, "newer_token", newer)
	q.w.Header().Set("Retry-After", "1")
	h.deny(q.w, q.r, problemInFlight())
}
