package httpguard

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/adapt"
)

// Option configures Middleware. Middleware validates every option and panics
// with an error matching guard.ErrInvalid when one does not fit.
type Option func(*config)

// config is the middleware's validated configuration.
type config struct {
	required      bool
	methodNames   []string        // as given to Methods
	methods       map[string]bool // upper-cased methodNames
	principal     func(*http.Request) string
	deny          func(http.ResponseWriter, *http.Request, Problem)
	retention     time.Duration
	maxBody       int64
	maxStoredBody int64
	replayHeaders []string // canonical names
	replay        bool
	ttl           time.Duration // 0: the Locker's TTL
	maxRetryAfter time.Duration
	log           *slog.Logger
	shared        bool          // SharedKeys: no principal, by choice
	errRetention  time.Duration // how long a key whose response is not kept for Retention stays bound
	quota         int64         // bytes one principal may store per Retention window; 0: no quota

	principalSet, ttlSet, errRetentionSet bool
}

// Defaults.
const (
	defaultRetention      = 24 * time.Hour
	defaultErrorRetention = time.Minute
	defaultMaxBody        = 1 << 20
	defaultMaxStoredBody  = 1 << 20
	defaultMaxRetryAfter  = 5 * time.Second
)

// defaultReplayHeaders are the response headers a replay carries unless
// ReplayHeaders says otherwise: those that describe the representation or
// the resource that was created, none that belong to one client or one
// connection (Set-Cookie, Date, Content-Length).
var defaultReplayHeaders = []string{
	"Cache-Control", "Content-Language", "Content-Location", "Content-Type",
	"ETag", "Last-Modified", "Location",
}

// Required makes a guarded request without an Idempotency-Key header fail
// with 400 Bad Request. Default: such a request passes through unguarded.
func Required() Option { return func(c *config) { c.required = true } }

// Methods sets the request methods the middleware guards; requests with any
// other method pass through untouched. Names are upper-cased, as every
// registered HTTP method is: Methods("put") guards PUT. A request's method is
// matched as sent, so a request whose method is not upper-case is never
// guarded. Default: POST and PATCH. At least one method is required, and
// each must be an HTTP token (no spaces or separators).
func Methods(methods ...string) Option {
	return func(c *config) { c.methodNames = append([]string{}, methods...) }
}

// Principal scopes keys to the principal f returns for a request, such as
// the authenticated tenant or user, so that two principals sending the same
// key neither block nor replay each other: a stored response is replayed
// only to the principal whose request produced it. An empty string is a
// principal of its own (the anonymous one), shared by every request f
// finds no principal for. f runs before the handler, on every guarded
// request with a key, so wrap the handler inside the authentication
// middleware that f relies on. Must not be nil.
//
// Middleware requires Principal or SharedKeys: whose keys are whose is
// decided when the endpoint is wired, never by default. Without it, a
// second caller who sends another caller's key and payload (keys are often
// predictable, and clients reuse defaults) would be handed the first
// caller's stored response.
func Principal(f func(*http.Request) string) Option {
	return func(c *config) { c.principal, c.principalSet = f, true }
}

// SharedKeys declares that every caller of the endpoint shares one key
// space: keys are scoped by method and route only, and any caller who
// sends a key and payload gets the response stored for them, whoever's
// request produced it. Use it only where every caller may see every other
// caller's responses (a service with a single client, an internal job
// runner); anywhere else, use Principal. Not with Principal.
func SharedKeys() Option { return func(c *config) { c.shared = true } }

// ErrorRetention sets how long a key stays bound when its request's
// response is not kept for Retention: a 4xx response is stored and replayed
// for this long only, and a key whose response is not stored at all (a
// 5xx, 408, 425 or 429, a truncated response, one over MaxStoredBody or
// with more than 16 KiB of headers to replay) stays bound to its payload for this long, so a retry
// with the same payload runs the handler again and another payload gets
// 422. So a client that makes requests fail (a stream of 400s, say) keeps
// nothing in Redis beyond this window but the key's fencing counter. Default:
// 1m, or Retention if that is shorter. Must be at least 1ms and at most
// Retention.
func ErrorRetention(d time.Duration) Option {
	return func(c *config) { c.errRetention, c.errRetentionSet = d, true }
}

// Quota caps the bytes one principal (see Principal; all callers together
// under SharedKeys) may store in Redis per Retention window: each key's
// binding and stored response counts what it adds to Redis, key names and
// fencing counter included (see the package documentation, What is
// stored). A request with a new key from a principal whose budget is spent
// is refused with 429 Too Many Requests, and a Retry-After until its window
// ends, before the handler runs; a response that would overspend it is
// sent but not stored (a retry runs the handler again). The budget is kept
// in Redis, so it holds across every instance that shares the Locker.
// Default: 0, no quota. Must not be negative.
func Quota(bytes int64) Option { return func(c *config) { c.quota = bytes } }

// DenyHandler sets the function that writes every response the middleware
// makes itself instead of running the handler: 400, 409, 413, 422 and 503
// (see Problem). Before calling f, the middleware sets "Cache-Control:
// no-store" on w's header, and Retry-After for 409 (see MaxRetryAfter) and
// 503 ("1"); f may change them. f must write the response. Default:
// WriteProblem. Must not be nil.
func DenyHandler(f func(w http.ResponseWriter, r *http.Request, p Problem)) Option {
	return func(c *config) { c.deny = f }
}

// Retention sets how long a key stays bound to the payload of its first
// request and how long a completed response is kept for replay, counted on
// the Redis server from when each was stored. The key's fencing counter is
// kept as long after each request begins (guard.FenceTTL; at least the
// lease TTL): a request that runs longer than both stores no response,
// since its hold can no longer be proven the newest, and a retry runs the
// handler again. Keep it above the longest a request can run.
// Default: 24h. Must be positive and at least one millisecond.
func Retention(d time.Duration) Option { return func(c *config) { c.retention = d } }

// MaxBody sets how many bytes of a guarded request's body the middleware
// reads to fingerprint it; a larger body fails with 413 Content Too Large
// before the handler runs. The handler reads the same bytes from r.Body.
// Default: 1 MiB. Must be positive.
func MaxBody(n int64) Option { return func(c *config) { c.maxBody = n } }

// MaxStoredBody sets the largest response body kept for replay. A response
// with a larger body is passed to the client but not stored at all, so a
// retry runs the handler again. Default: 1 MiB. Must be positive.
func MaxStoredBody(n int64) Option { return func(c *config) { c.maxStoredBody = n } }

// ReplayHeaders sets the response headers that are stored and replayed
// (case-insensitive). With no names, a replay carries no header of the
// original response but Idempotent-Replayed. Default: Cache-Control,
// Content-Language, Content-Location, Content-Type, ETag, Last-Modified,
// Location. Names must be valid header field names; Connection,
// Content-Length, Keep-Alive, Trailer, Transfer-Encoding, Upgrade and
// Idempotent-Replayed are refused, since the server computes them, and so
// are Set-Cookie, Set-Cookie2, Authentication-Info and
// Proxy-Authentication-Info: they carry one client's credentials or
// session, which a replay must never hand to whoever sends the key next.
func ReplayHeaders(names ...string) Option {
	return func(c *config) {
		c.replayHeaders = append([]string{}, names...)
	}
}

// NoReplay turns response storage off: the middleware still refuses a
// request while another with the same key is in flight (409) and a key
// reused with a different payload (422), but a retry after completion runs
// the handler again. Default: replay on.
func NoReplay() Option { return func(c *config) { c.replay = false } }

// TTL sets the TTL of the lease held while the handler runs, which bounds
// how long a crashed instance blocks its keys. The lease is renewed while the
// handler runs, so a slow handler keeps it. Default: the Locker's TTL
// (guard.WithTTL). Must be positive and leave room for the Locker's renew
// interval, stop grace and request timeout, which guard scales to it
// (guard.TTL); Middleware checks that.
func TTL(d time.Duration) Option { return func(c *config) { c.ttl, c.ttlSet = d, true } }

// MaxRetryAfter caps the Retry-After of a 409, the answer to a request
// whose key another request holds. Below the cap, Retry-After is the time
// Redis reports the key stays held unless its holder renews its lease, in
// whole seconds rounded up, and at least 1. A holder that crashed renews
// nothing, so its clients are told when its key frees and are let in then.
// A live request renews its lease while it runs, so the time reported stays
// near the lease's TTL however soon it will finish: the cap is how long its
// clients wait at most before asking again. Default: 5s. Must be at least
// 1s; it is rounded up to whole seconds.
func MaxRetryAfter(d time.Duration) Option { return func(c *config) { c.maxRetryAfter = d } }

// Logger sets the logger: a completed, stored or replayed request at Debug;
// a request refused because its key is in flight, or because its
// principal's quota is spent, at Info the first time for that key (or
// principal) and then at most once a minute, at Debug otherwise; a response not
// stored because the lease was lost at Warn (guard logs the loss itself),
// and a failure of Redis (answered with 503) at Error. Default: a logger
// that discards everything. Must not be nil.
func Logger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// refusedReplayHeaders are framing and connection headers that a replay
// must not copy (the server computes them for the replayed body), and
// secretHeaders those that carry one client's credentials or session.
var (
	refusedReplayHeaders = map[string]bool{
		"Connection": true, "Content-Length": true, "Keep-Alive": true, "Trailer": true,
		"Transfer-Encoding": true, "Upgrade": true, headerReplayed: true,
	}
	secretHeaders = map[string]bool{
		"Set-Cookie": true, "Set-Cookie2": true, "Authentication-Info": true, "Proxy-Authentication-Info": true,
	}
)

// newConfig applies opts over the defaults and validates the result. The
// checks run in a fixed order and the first error is returned.
func newConfig(l *guard.Locker, opts []Option) (config, error) {
	c := config{
		methodNames:   []string{http.MethodPost, http.MethodPatch},
		deny:          WriteProblem,
		retention:     defaultRetention,
		maxBody:       defaultMaxBody,
		maxStoredBody: defaultMaxStoredBody,
		replayHeaders: defaultReplayHeaders,
		replay:        true,
		maxRetryAfter: defaultMaxRetryAfter,
		log:           slog.New(slog.DiscardHandler),
		errRetention:  defaultErrorRetention,
	}
	if l == nil {
		return c, invalid("nil Locker")
	}
	if err := c.apply(opts); err != nil {
		return c, err
	}
	if !c.errRetentionSet {
		c.errRetention = min(c.errRetention, c.retention)
	}
	if err := c.checkMissing(); err != nil {
		return c, err
	}
	if err := c.checkLimits(); err != nil {
		return c, err
	}
	if err := c.setMethods(); err != nil {
		return c, err
	}
	if err := c.setReplayHeaders(); err != nil {
		return c, err
	}
	if err := c.checkTTL(l); err != nil {
		return c, err
	}
	return c, nil
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return invalid("nil option")
		}
		o(c)
	}
	return nil
}

// checkMissing refuses an option that leaves nothing to call or guard.
func (c *config) checkMissing() error {
	switch {
	case len(c.methodNames) == 0:
		return invalid("Methods needs at least one method")
	case c.principalSet && c.principal == nil:
		return invalid("nil Principal function")
	case c.principalSet && c.shared:
		return invalid("Principal and SharedKeys: keys are either scoped to a principal or shared by every caller")
	case !c.principalSet && !c.shared:
		return invalid("no Principal: pass Principal(f), f naming who sent a request (the tenant or user its credentials authenticate), " +
			"so that one caller's stored response is never replayed to another; or SharedKeys() if every caller may see every other's responses")
	case c.deny == nil:
		return invalid("nil DenyHandler function")
	case c.log == nil:
		return invalid("nil Logger")
	}
	return nil
}

// checkLimits refuses a duration or size out of its range.
func (c *config) checkLimits() error {
	switch {
	case c.retention < time.Millisecond:
		return invalid("Retention %v must be at least 1ms", c.retention)
	case c.maxBody <= 0:
		return invalid("MaxBody %d must be positive", c.maxBody)
	case c.maxStoredBody <= 0:
		return invalid("MaxStoredBody %d must be positive", c.maxStoredBody)
	case c.ttlSet && c.ttl <= 0:
		return invalid("TTL %v must be positive", c.ttl)
	case c.maxRetryAfter < time.Second:
		return invalid("MaxRetryAfter %v must be at least 1s", c.maxRetryAfter)
	case c.errRetention < time.Millisecond || c.errRetention > c.retention:
		return invalid("ErrorRetention %v must be at least 1ms and at most Retention %v", c.errRetention, c.retention)
	case c.quota < 0:
		return invalid("Quota %d must not be negative", c.quota)
	}
	return nil
}

// setMethods checks the method names and sets the methods matched, upper-cased.
func (c *config) setMethods() error {
	c.methods = make(map[string]bool, len(c.methodNames))
	for _, m := range c.methodNames {
		if !isToken(m) { // before upper-casing, which maps some non-ASCII letters to ASCII
			return invalid("method %q is not a valid HTTP method token", m)
		}
		c.methods[strings.ToUpper(m)] = true
	}
	return nil
}

// setReplayHeaders checks the replay header names and canonicalizes them,
// as the recorder looks them up in a response's http.Header.
func (c *config) setReplayHeaders() error {
	names := make([]string, 0, len(c.replayHeaders))
	for _, h := range c.replayHeaders {
		h = http.CanonicalHeaderKey(h)
		names = append(names, h)
		if !isToken(h) {
			return invalid("replay header %q is not a valid header field name", h)
		}
		if refusedReplayHeaders[h] {
			return invalid("replay header %q is computed by the server and cannot be replayed", h)
		}
		if secretHeaders[h] {
			return invalid("replay header %q carries one client's credentials or session: a replay would hand it to whoever sends the key next", h)
		}
	}
	c.replayHeaders = names
	return nil
}

// checkTTL refuses a TTL that leaves no room for l's renewal schedule, so
// that it fails when the server is wired, not on every request.
func (c *config) checkTTL(l *guard.Locker) error {
	if !c.ttlSet {
		return nil
	}
	if err := l.ValidateLockOptions(guard.TTL(c.ttl)); err != nil {
		return fmt.Errorf("httpguard: %w", err)
	}
	return nil
}

// invalid is a configuration error, matching guard.ErrInvalid.
func invalid(format string, args ...any) error { return adapt.Invalidf("httpguard", format, args...) }

// isToken reports whether s is an RFC 9110 token (a method or a field name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b >= 0x80 || !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0) {
			return false
		}
	}
	return true
}
