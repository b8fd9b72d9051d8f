package httpguard

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// headerReplayed marks a response that was replayed from storage.
const headerReplayed = "Idempotent-Replayed"

// record is a completed response as stored in Redis for replay, together
// with the fingerprint of the request that produced it.
type record struct {
	Version     int         `json:"v"`
	Fingerprint []byte      `json:"fp"`
	Status      int         `json:"status"`
	Header      http.Header `json:"header,omitempty"`
	Body        []byte      `json:"body,omitempty"`
}

// recordVersion is the JSON form an earlier version stored (the body in
// base64, a third larger than itself); this one writes recordMagic's
// binary form and still reads the JSON one, for records stored before an
// upgrade.
const recordVersion = 1

// recordMagic starts a record in the binary form:
//
//	"jgr2" | fingerprint (32 bytes) | status (uint16) | header length (uint32) | header (JSON) | body
//
// The body is stored as it was sent, so a response costs Redis its own
// size plus its replayed headers and 42 bytes. At least 42 bytes long, a
// record is never taken for a binding (a bare fingerprint of 32 bytes, or
// 40 from an earlier version).
const recordMagic = "jgr2"

// recordOverhead is the size of a binary record beyond its header and body.
const recordOverhead = len(recordMagic) + sha256.Size + 2 + 4

// maxStoredHeader bounds the replayed headers a record keeps, as JSON; a
// response with more is sent but not stored.
const maxStoredHeader = 16 << 10

func encodeRecord(rec record) ([]byte, error) {
	var header []byte
	if len(rec.Header) > 0 {
		var err error
		if header, err = json.Marshal(rec.Header); err != nil {
			return nil, err
		}
	}
	if len(rec.Fingerprint) != sha256.Size || rec.Status < 200 || rec.Status > 999 {
		return nil, fmt.Errorf("httpguard: record with a %d-byte fingerprint and status %d", len(rec.Fingerprint), rec.Status)
	}
	b := make([]byte, 0, recordOverhead+len(header)+len(rec.Body))
	b = append(b, recordMagic...)
	b = append(b, rec.Fingerprint...)
	b = binary.BigEndian.AppendUint16(b, uint16(rec.Status))
	b = binary.BigEndian.AppendUint32(b, uint32(len(header)))
	b = append(b, header...)
	return append(b, rec.Body...), nil
}

func decodeRecord(b []byte) (record, error) {
	if !bytes.HasPrefix(b, []byte(recordMagic)) {
		return decodeJSONRecord(b)
	}
	if len(b) < recordOverhead {
		return record{}, fmt.Errorf("httpguard: stored response of %d bytes is cut short", len(b))
	}
	rest := b[len(recordMagic):]
	rec := record{Version: 2, Fingerprint: rest[:sha256.Size]}
	rest = rest[sha256.Size:]
	rec.Status = int(binary.BigEndian.Uint16(rest))
	n := binary.BigEndian.Uint32(rest[2:])
	rest = rest[6:]
	if uint64(n) > uint64(len(rest)) || rec.Status < 200 || rec.Status > 999 {
		return record{}, fmt.Errorf("httpguard: stored response: status %d, %d header bytes of %d", rec.Status, n, len(rest))
	}
	if n > 0 {
		if err := json.Unmarshal(rest[:n], &rec.Header); err != nil {
			return record{}, fmt.Errorf("httpguard: stored response header: %w", err)
		}
	}
	rec.Body = rest[n:]
	return rec, nil
}

func decodeJSONRecord(b []byte) (record, error) {
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("httpguard: stored response: %w", err)
	}
	if rec.Version != recordVersion || rec.Status < 200 || rec.Status > 999 {
		return rec, fmt.Errorf("httpguard: stored response: unknown version %d or status %d", rec.Version, rec.Status)
	}
	return rec, nil
}

// replay writes the stored response with Idempotent-Replayed: true.
func replay(w http.ResponseWriter, rec record) {
	h := w.Header()
	for k, vs := range rec.Header {
		h[k] = vs
	}
	h.Set(headerReplayed, "true")
	if bodyAllowed(rec.Status) {
		h.Set("Content-Length", strconv.Itoa(len(rec.Body)))
	}
	w.WriteHeader(rec.Status)
	if bodyAllowed(rec.Status) {
		_, _ = w.Write(rec.Body)
	}
}

func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified
}

// recorder passes the handler's response through to the client and keeps
// a copy of what a replay needs: the status, the allow-listed headers as
// they were when the header was written, and the body up to a limit.
type recorder struct {
	http.ResponseWriter
	allow    []string
	limit    int64
	status   int // 0 until the final header is written
	header   http.Header
	body     bytes.Buffer
	overflow bool // the body passed limit; nothing is kept
}

func (rw *recorder) WriteHeader(code int) {
	if rw.status == 0 {
		if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
			rw.ResponseWriter.WriteHeader(code) // informational: the final one follows
			return
		}
		rw.status = code
		rw.snapshot()
	}
	rw.ResponseWriter.WriteHeader(code)
}

func (rw *recorder) Write(p []byte) (int, error) {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	// Keep what the handler wrote even if the client has gone: the stored
	// response is the handler's answer, not what reached this client.
	if !rw.overflow {
		if int64(rw.body.Len()+len(p)) > rw.limit {
			rw.overflow = true
			rw.body = bytes.Buffer{}
		} else {
			rw.body.Write(p)
		}
	}
	return rw.ResponseWriter.Write(p)
}

// Flush makes the recorder an http.Flusher for handlers that assert it.
func (rw *recorder) Flush() {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(rw.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (rw *recorder) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

// snapshot copies the allow-listed headers as they are now.
func (rw *recorder) snapshot() {
	src := rw.ResponseWriter.Header()
	for _, k := range rw.allow {
		if vs, ok := src[k]; ok {
			if rw.header == nil {
				rw.header = make(http.Header, len(rw.allow))
			}
			rw.header[k] = append([]string(nil), vs...)
		}
	}
}

// finish completes the copy after the handler returned and says how long
// the response may be kept: keepFull (Retention) for a final status below
// 400, keepBrief (ErrorRetention) for a 4xx that does not invite a retry,
// keepNone when its body passed the limit, its replayed headers passed
// maxStoredHeader, or its status invites a retry.
func (rw *recorder) finish() (record, keep) {
	if rw.status == 0 { // the handler wrote nothing: net/http sends 200
		rw.status = http.StatusOK
		rw.snapshot()
	}
	rec := record{Version: 2, Status: rw.status, Header: rw.header, Body: rw.body.Bytes()}
	switch {
	case rw.overflow, headerSize(rw.header) > maxStoredHeader:
		return rec, keepNone
	}
	return rec, keepFor(rw.status)
}

// keep is how long a response is kept for replay.
type keep int8

const (
	keepNone  keep = iota // not stored: a retry runs the handler again
	keepBrief             // for ErrorRetention
	keepFull              // for Retention
)

// keepFor says how long a response with status is kept. A server error
// (5xx), 408 Request Timeout, 425 Too Early and 429 Too Many Requests tell
// the client to try again later, so a retry must run the handler again
// rather than replay them; 101 hands the connection over. Other client
// errors are replayed for a short while only: a retry soon after gets the
// same answer, and a stream of refused requests keeps nothing for long.
func keepFor(status int) keep {
	switch {
	case status < 200, status >= 500:
		return keepNone
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		return keepNone
	case status >= 400:
		return keepBrief
	}
	return keepFull
}

// headerSize is roughly the size of h as stored: names and values.
func headerSize(h http.Header) int {
	n := 0
	for k, vs := range h {
		n += len(k) + 4
		for _, v := range vs {
			n += len(v) + 3
		}
	}
	return n
}
