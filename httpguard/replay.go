package httpguard

import (
	"bytes"
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

const recordVersion = 1

func decodeRecord(b []byte) (record, error) {
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

// finish completes the copy after the handler returned and reports whether
// the response may be stored: the body fit, and the status is final and
// not one that invites a retry.
func (rw *recorder) finish() (record, bool) {
	if rw.status == 0 { // the handler wrote nothing: net/http sends 200
		rw.status = http.StatusOK
		rw.snapshot()
	}
	rec := record{Version: recordVersion, Status: rw.status, Header: rw.header, Body: rw.body.Bytes()}
	return rec, !rw.overflow && storable(rw.status)
}

// storable reports whether a response with status is kept for replay. A
// server error (5xx), 408 Request Timeout, 425 Too Early and 429 Too Many
// Requests tell the client to try again later, so a retry must run the
// handler again rather than replay them; 101 hands the connection over.
func storable(status int) bool {
	switch {
	case status < 200, status >= 500:
		return false
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		return false
	}
	return true
}
