package httpguard

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// Problem is an RFC 9457 problem details object: what the middleware
// answers, through the DenyHandler, when it does not run the handler. It
// never carries the lock key, an owner token or the key's hash.
type Problem struct {
	// Type is a URI that names the kind of problem: one of the Type
	// constants of this package.
	Type string `json:"type"`
	// Title is a short, fixed summary of Type.
	Title string `json:"title"`
	// Status is the HTTP status code: 400, 409, 413, 422, 429 or 503.
	Status int `json:"status"`
	// Detail explains this occurrence to the client.
	Detail string `json:"detail,omitempty"`
}

// Problem types: the Type of each Problem the middleware makes. Each names
// its own documentation.
const (
	// TypeKeyMissing (400): Required is set and the request has no
	// Idempotency-Key header.
	TypeKeyMissing = "https://pkg.go.dev/github.com/jobguard/jobguard/httpguard#TypeKeyMissing"
	// TypeKeyInvalid (400): the Idempotency-Key header is not 1 to 255
	// printable ASCII characters (bare or as a quoted string), or it
	// appears more than once.
	TypeKeyInvalid = "https://pkg.go.dev/github.com/jobguard/jobguard/httpguard#TypeKeyInvalid"
	// TypeBodyUnreadable (400): the request body could not be read.
	TypeBodyUnreadable = "https://pkg.go.dev/github.com/jobguard/jobguard/httpguard#TypeBodyUnreadable"
	// TypeInFlight (409): a request with the same key is being processed.
	// The response carries Retry-After.
	TypeInFlight = "https://pkg.go.dev/github.com/jobguard/jobguard/httpguard#TypeInFlight"
	// TypeBodyTooLarge (413): the request body is larger than MaxBody, so
	// it cannot be fingerprinted.
	TypeBodyTooLarge = "https://pkg.go.dev/github.com/jobguard/jobguard/httpguard#TypeBodyTooLarge"
	// TypeKeyReused (422): the key was used before with a different
	// payload (method, path, query or body).
	TypeKeyReused = "https://pkg.go.dev/github.com/jobguard/jobguard/httpguard#TypeKeyReused"
	// TypeQuotaSpent (429): the principal has stored as much as Quota
	// allows in this Retention window, so a request with a new key is not
	// processed. The response carries Retry-After: when the window ends.
	TypeQuotaSpent = "https://pkg.go.dev/github.com/jobguard/jobguard/httpguard#TypeQuotaSpent"
	// TypeUnavailable (503): Redis could not be asked whether the key is in
	// use, so the request was not processed. The response carries
	// Retry-After.
	TypeUnavailable = "https://pkg.go.dev/github.com/jobguard/jobguard/httpguard#TypeUnavailable"
)

// WriteProblem writes p as application/problem+json with p.Status. It is
// the default DenyHandler; a custom one may call it after its own work (for
// example, counting refusals). It leaves the headers already set on w, such
// as Cache-Control and Retry-After, in place.
func WriteProblem(w http.ResponseWriter, _ *http.Request, p Problem) {
	body, err := json.Marshal(p)
	if err != nil { // a struct of strings and an int always marshals
		panic(err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// The problems the middleware makes.
func problemKeyMissing() Problem {
	return Problem{TypeKeyMissing, "Idempotency-Key required", http.StatusBadRequest,
		"This operation requires an Idempotency-Key header."}
}

func problemKeyInvalid(reason error) Problem {
	r := reason.Error()
	return Problem{TypeKeyInvalid, "Invalid Idempotency-Key", http.StatusBadRequest,
		strings.ToUpper(r[:1]) + r[1:] + "; it must be 1 to 255 printable ASCII characters, bare or as a quoted string."}
}

func problemBodyUnreadable() Problem {
	return Problem{TypeBodyUnreadable, "Request body unreadable", http.StatusBadRequest,
		"The request body could not be read."}
}

func problemInFlight() Problem {
	return Problem{TypeInFlight, "Request in progress", http.StatusConflict,
		"A request with the same Idempotency-Key is being processed; retry after it completes."}
}

func problemBodyTooLarge(limit int64) Problem {
	return Problem{TypeBodyTooLarge, "Request body too large", http.StatusRequestEntityTooLarge,
		"Requests with an Idempotency-Key may have a body of at most " + strconv.FormatInt(limit, 10) + " bytes."}
}

func problemKeyReused() Problem {
	return Problem{TypeKeyReused, "Idempotency-Key reused", http.StatusUnprocessableEntity,
		"The Idempotency-Key was already used with a different request payload."}
}

func problemQuotaSpent() Problem {
	return Problem{TypeQuotaSpent, "Idempotency quota spent", http.StatusTooManyRequests,
		"Too many requests with new Idempotency-Keys were stored for this client; retry later."}
}

func problemUnavailable() Problem {
	return Problem{TypeUnavailable, "Idempotency store unavailable", http.StatusServiceUnavailable,
		"The request was not processed; retry later."}
}
