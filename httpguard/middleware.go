package httpguard

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/throttle"
)

// Middleware returns middleware that makes the guarded requests of a
// handler idempotent by their Idempotency-Key header, across every process
// that shares l's Redis (see the package documentation).
//
// Wrap each route's handler, not the whole ServeMux: only then is
// r.Pattern set when the middleware runs, and keys are scoped by route
// pattern; otherwise they are scoped by URL path.
//
//	mux.Handle("POST /orders", httpguard.Middleware(locker)(createOrder))
//
// Middleware panics if l is nil or an option is invalid, as ServeMux.Handle
// does for a bad pattern: that is a programming error, found when the
// server is wired rather than on some later request. The panic value is an
// error matching guard.ErrInvalid. The returned function panics likewise if
// the handler is nil.
func Middleware(l *guard.Locker, opts ...Option) func(http.Handler) http.Handler {
	c, err := newConfig(l, opts)
	if err != nil {
		panic(err)
	}
	busy := throttle.New(throttle.Every, throttle.Keys)
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic(invalid("nil handler"))
		}
		return &handler{l: l, c: c, next: next, busy: busy}
	}
}

// handler is one guarded http.Handler.
type handler struct {
	l    *guard.Locker
	c    config
	next http.Handler
	busy *throttle.Throttle // refusals to log, per key or principal
}

// logRepeated logs a refusal that a client's retries repeat (a key in
// flight, a spent quota): at Info the first time for key and then at most
// once a minute, with the count of those not logged, at Debug otherwise.
func (h *handler) logRepeated(q *request, key, msg string, args ...any) {
	ok, repeated := h.busy.Allow(key, time.Now())
	if !ok {
		q.log.Debug(msg, args...)
		return
	}
	if repeated > 0 {
		args = append(args, "repeated", repeated)
	}
	q.log.Info(msg, args...)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.c.methods[r.Method] {
		h.next.ServeHTTP(w, r)
		return
	}
	key, err := keyFrom(r.Header)
	switch {
	case errors.Is(err, errNoKeyPresent) && !h.c.required:
		h.next.ServeHTTP(w, r)
		return
	case errors.Is(err, errNoKeyPresent):
		h.deny(w, r, problemKeyMissing())
		return
	case err != nil:
		h.deny(w, r, problemKeyInvalid(err))
		return
	}
	body, problem := h.readBody(r)
	if problem != nil {
		h.deny(w, r, *problem)
		return
	}
	principal := ""
	if h.c.principal != nil {
		principal = h.c.principal(r)
	}
	q := &request{
		w: w, r: r, body: body,
		key:         key,
		principal:   principal,
		fingerprint: fingerprint(r, body),
		lookup:      lookupKey(r.Method, route(r), principal, key),
	}
	q.log = h.c.log.With("route", r.Pattern, "method", r.Method, "path", r.URL.Path, "idempotency_key", key)
	h.serve(q)
}

// request is one guarded request with a valid key.
type request struct {
	w           http.ResponseWriter
	r           *http.Request
	body        []byte
	key         string // the client's key
	principal   string
	fingerprint []byte
	lookup      string // lock and claim key; never sent to the client
	log         *slog.Logger
}

// serve answers a guarded request with a valid key: from storage, with a
// refusal, or by running the handler under the key's lease. Without Quota
// that is two requests to Redis (guard.Locker.WithClaim): one reads the
// key's claim and, unless it answers the request, acquires the key and
// binds it to the payload; the other stores the response, fenced, and
// releases the key. A replay, a reuse and a key in flight are answered by
// the first alone. A completed request is answered from storage without
// taking the lock, so that retries of a finished request never conflict;
// and while the first request runs, a different payload is refused as
// reused rather than as in flight.
func (h *handler) serve(q *request) {
	if h.c.quota != 0 && !h.chargeNewKey(q) {
		return
	}
	h.run(q, q.fingerprint)
}

// run tries to run the handler under the key's lease for a request whose
// key is, or may be bound, to bind (the payload's fingerprint, or a form
// of it that answerClaim found), and answers it.
func (h *handler) run(q *request, bind []byte) {
	ctx := q.r.Context()
	// The acquisition honours the client's context, but the lease context
	// must not end with it: disarm the link once the lock is held, so that
	// a canceled lease context means the lease was lost.
	base, cancelBase := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelBase(nil)
	unlink := context.AfterFunc(ctx, func() { cancelBase(context.Cause(ctx)) })
	var done *completed
	claim, err := h.l.WithClaim(throttle.CallerLogs(base, q.lookup), q.lookup, bind, h.c.errRetention, func(lease context.Context) ([]byte, time.Duration, error) {
		if !unlink() { // the client left while we acquired
			return nil, 0, context.Cause(ctx)
		}
		done = h.locked(lease, q)
		return done.value, done.ttl, nil
	}, h.lockOptions(q.r)...)
	unlink()
	switch {
	case done != nil:
		h.report(q, done, claim, err)
	case ctx.Err() != nil: // the client is gone: nobody to answer
	case err == nil:
		h.answerClaim(q, bind, claim)
	case errors.Is(err, guard.ErrNotAcquired):
		after := retryAfter(err, h.c.maxRetryAfter)
		h.logRepeated(q, q.lookup, "httpguard: key in flight", "retry_after", after)
		q.w.Header().Set("Retry-After", strconv.FormatInt(after, 10))
		h.deny(q.w, q.r, problemInFlight())
	default:
		h.unavailable(q, err)
	}
}

// retryAfter returns the Retry-After, in seconds, of a 409 refused with
// err (an ErrNotAcquired): how long Redis said the key stays held unless its
// holder renews, rounded up, at least 1 and at most limit rounded up. A
// crashed holder's key is free after that time; a live holder renews, so
// the cap keeps its clients from waiting out a whole TTL.
func retryAfter(err error, limit time.Duration) int64 {
	d, ok := guard.HeldFor(err)
	if !ok {
		d = time.Second
	}
	d = min(d, limit)
	return max(int64((d+time.Second-1)/time.Second), 1)
}

func (h *handler) lockOptions(r *http.Request) []guard.LockOption {
	// A key is remembered for the retention window, and so is its fencing
	// counter: it need not outlive the key. A request that outlives it (and
	// the lease TTL) can no longer prove its hold the newest, and stores
	// nothing (see completion.go).
	opts := []guard.LockOption{guard.Wait(0), guard.FenceTTL(h.c.retention)}
	if r.Pattern != "" {
		opts = append(opts, guard.Name(r.Pattern), guard.Attrs(slog.String("http.route", r.Pattern)))
	} else {
		opts = append(opts, guard.Name("httpguard "+r.Method))
	}
	if h.c.ttlSet {
		opts = append(opts, guard.TTL(h.c.ttl))
	}
	return opts
}

// locked runs with the lease held, the key bound to the payload; lease,
// its context, is done only if the lease is lost. It runs the handler and
// returns what to keep of its response (see completion.go).
func (h *handler) locked(lease context.Context, q *request) *completed {
	// The handler's context ends with the lease and with the client.
	ctx, cancel := context.WithCancelCause(lease)
	defer cancel(nil)
	stop := context.AfterFunc(q.r.Context(), func() { cancel(context.Cause(q.r.Context())) })
	defer stop()

	if !h.c.replay {
		h.serveOnly(ctx, q)
		return &completed{}
	}
	return h.serveAndKeep(ctx, lease, q)
}

// serveOnly runs the handler with ctx and the body read before, for
// NoReplay.
func (h *handler) serveOnly(ctx context.Context, q *request) {
	h.next.ServeHTTP(q.w, q.withBody(ctx))
	q.log.Debug("httpguard: handled")
}

// withBody returns the request with ctx and the body read before.
func (q *request) withBody(ctx context.Context) *http.Request {
	r := q.r.WithContext(ctx)
	r.Body = io.NopCloser(bytes.NewReader(q.body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(q.body)), nil }
	return r
}

// serveAndKeep runs the handler with ctx and the body read before, and
// returns its response to store for replay, for as long as it is kept (see
// keepFor): nothing once the lease is lost.
func (h *handler) serveAndKeep(ctx, lease context.Context, q *request) *completed {
	rw := &recorder{ResponseWriter: q.w, allow: h.c.replayHeaders, limit: h.c.maxStoredBody}
	h.next.ServeHTTP(rw, q.withBody(ctx)) // a panic propagates: nothing is stored
	// Whether the client's request ended while the handler ran, asked
	// before anything else can take time.
	clientGone := q.r.Context().Err() != nil

	rec, keep := rw.finish()
	switch {
	case lease.Err() != nil:
		return &completed{status: rec.Status} // the lease was lost: run reports it
	case clientGone:
		// What the handler wrote may be cut short: a handler that stops
		// when its request's context ends (a streamed export) has written
		// part of its answer. A retry runs it again.
		q.log.Debug("httpguard: the request ended before the handler returned; response not stored", "status", rec.Status)
		keep = keepNone
	case keep == keepNone:
		q.log.Debug("httpguard: handled; response not stored", "status", rec.Status, "body_over_limit", rw.overflow)
	}
	return h.keep(lease, q, rec, keep)
}

// readBody reads the body to fingerprint it, up to MaxBody bytes.
func (h *handler) readBody(r *http.Request) ([]byte, *Problem) {
	tooLarge := problemBodyTooLarge(h.c.maxBody)
	if r.ContentLength > h.c.maxBody {
		return nil, &tooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, h.c.maxBody+1))
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &maxErr), err == nil && int64(len(body)) > h.c.maxBody:
		return nil, &tooLarge
	case err != nil:
		p := problemBodyUnreadable()
		return nil, &p
	}
	return body, nil
}

func (h *handler) unavailable(q *request, err error) {
	if q.r.Context().Err() != nil {
		return // the client is gone
	}
	q.log.Error("httpguard: Redis failed; answered 503", "err", err)
	h.answer503(q)
}

// answer503 answers 503 with Retry-After: 1.
func (h *handler) answer503(q *request) {
	q.w.Header().Set("Retry-After", "1")
	h.deny(q.w, q.r, problemUnavailable())
}

// deny answers the request with p through the DenyHandler.
func (h *handler) deny(w http.ResponseWriter, r *http.Request, p Problem) {
	w.Header().Set("Cache-Control", "no-store")
	h.c.deny(w, r, p)
}
