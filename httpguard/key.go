package httpguard

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"strings"
)

// headerKey is the request header that carries the client's key.
const headerKey = "Idempotency-Key"

// maxKeyLen is the longest key accepted, in characters of the decoded key.
const maxKeyLen = 255

// Reasons a key is refused; their texts go into the 400 problem's detail,
// so they never quote the key itself.
var (
	errKeyEmpty     = errors.New("the Idempotency-Key is empty")
	errKeyTooLong   = errors.New("the Idempotency-Key is longer than 255 characters")
	errKeyChar      = errors.New("the Idempotency-Key contains a character outside printable ASCII")
	errKeyQuoted    = errors.New("the Idempotency-Key is a malformed quoted string")
	errKeyRepeated  = errors.New("the Idempotency-Key header appears more than once")
	errNoKeyPresent = errors.New("no Idempotency-Key header")
)

// keyFrom returns the key of the Idempotency-Key header in h:
// errNoKeyPresent when there is none, another error when it is not a valid
// key.
func keyFrom(h http.Header) (string, error) {
	vs := h.Values(headerKey)
	switch len(vs) {
	case 0:
		return "", errNoKeyPresent
	case 1:
		return parseKey(vs[0])
	default:
		return "", errKeyRepeated
	}
}

// parseKey returns the key a field value of Idempotency-Key names. The
// value is either the key itself (bare) or a Structured Field sf-string
// ("..." with \" and \\ escapes, no parameters), as the IETF draft defines
// it; both forms of the same characters name the same key. The key must be
// 1 to 255 characters of printable ASCII (0x20 to 0x7E). Spaces and tabs
// around the value are not part of it.
func parseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if strings.HasPrefix(v, `"`) {
		var err error
		if v, err = unquote(v); err != nil {
			return "", err
		}
	}
	switch {
	case v == "":
		return "", errKeyEmpty
	case len(v) > maxKeyLen:
		return "", errKeyTooLong
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7E {
			return "", errKeyChar
		}
	}
	return v, nil
}

// unquote decodes an sf-string (RFC 9651, section 4.2.5) that makes up all
// of v.
func unquote(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", errKeyQuoted
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 { // parameters or anything else after the string
				return "", errKeyQuoted
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7E:
			return "", errKeyChar
		default:
			b.WriteByte(c)
		}
	}
	return "", errKeyQuoted // no closing quote
}

// route returns what scopes a request's keys besides its method: the
// ServeMux pattern that matched it, or, when the handler is not behind a
// Go 1.22+ ServeMux pattern, its URL path. The two are told apart, so a
// pattern never names the same scope as a path.
func route(r *http.Request) string {
	if r.Pattern != "" {
		return "pattern:" + r.Pattern
	}
	return "path:" + r.URL.Path
}

// lookupKey returns the lock and claim key of a request: a SHA-256 over
// method, route, principal and client key, so that no byte a client sends
// reaches a Redis key (a '}' would break the Cluster hash tag) and no two
// scopes share a key.
func lookupKey(method, route, principal, key string) string {
	h := sha256.New()
	writeFields(h, "httpguard/v1", method, route, principal, key)
	return "httpguard:" + hex.EncodeToString(h.Sum(nil))
}

// quotaKey returns the guard key of a principal's storage budget (Quota).
func quotaKey(principal string) string {
	h := sha256.New()
	writeFields(h, "httpguard/quota/v1", principal)
	return "httpguard:quota:" + hex.EncodeToString(h.Sum(nil))
}

// fingerprint returns the SHA-256 of a request's payload: method, path,
// query and body.
func fingerprint(r *http.Request, body []byte) []byte {
	h := sha256.New()
	writeFields(h, r.Method, r.URL.EscapedPath(), r.URL.RawQuery)
	writeLen(h, len(body))
	h.Write(body)
	return h.Sum(nil)
}

// writeFields writes each field with its length before it, so that no two
// lists of fields hash the same bytes.
func writeFields(h hash.Hash, fields ...string) {
	for _, f := range fields {
		writeLen(h, len(f))
		h.Write([]byte(f))
	}
}

func writeLen(h hash.Hash, n int) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
}
