package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// errBadURL marks an error about the --url or REDIS_URL value. Its message
// shows the URL only as maskURL rebuilds it.
var errBadURL = errors.New("bad Redis URL")

// schemes lists the URL forms, for messages.
const schemes = "redis://, rediss://, unix://, redis-sentinel://, redis-cluster://"

// mask replaces every secret in a URL that guardctl shows.
const mask = "xxxxx"

// dial returns a client for the deployment that rawURL names (see the
// package doc, Connecting), each request bounded by timeout; a TLS URL
// trusts the certificates in the PEM file cacert, if given, instead of the
// system's. It connects lazily: a bad address shows at the first request.
// Its errors show the URL only as maskURL does: go-redis's parse errors
// quote values of the URL, so they are described, never passed on.
func dial(rawURL string, timeout time.Duration, cacert string) (redis.UniversalClient, error) {
	p, err := splitURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadURL, err)
	}
	bad := func(what string) error { return fmt.Errorf("%w %s: %s", errBadURL, p.masked(), what) }
	var roots *x509.CertPool
	if cacert != "" {
		if !strings.HasPrefix(p.scheme, "rediss") {
			return nil, fmt.Errorf("--cacert needs a TLS URL (rediss://, rediss-sentinel://, rediss-cluster://), got %s://", p.scheme)
		}
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificate in it", cacert)
		}
	}
	trust := func(c *tls.Config) {
		if c != nil && roots != nil {
			c.RootCAs = roots
		}
	}
	switch p.scheme {
	case "redis", "rediss", "unix":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, bad(describeParseError(err, p))
		}
		bound(timeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout)
		o.ContextTimeoutEnabled = true
		trust(o.TLSConfig)
		return redis.NewClient(o), nil
	case "redis-sentinel", "rediss-sentinel":
		o, err := sentinelOptions(rawURL)
		if err != nil {
			return nil, bad(describeParseError(err, p))
		}
		bound(timeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout)
		o.ContextTimeoutEnabled = true
		trust(o.TLSConfig)
		return redis.NewFailoverClient(o), nil
	case "redis-cluster", "rediss-cluster":
		o, err := clusterOptions(rawURL)
		if err != nil {
			return nil, bad(describeParseError(err, p))
		}
		bound(timeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout)
		o.ContextTimeoutEnabled = true
		trust(o.TLSConfig)
		return redis.NewClusterClient(o), nil
	}
	return nil, bad(fmt.Sprintf("unknown scheme %q (%s)", p.scheme, schemes))
}

// bound sets each duration that the URL left unset to timeout.
func bound(timeout time.Duration, ds ...*time.Duration) {
	for _, d := range ds {
		if *d == 0 {
			*d = timeout
		}
	}
}

// urlError is a mistake in a URL that says what is wrong without quoting
// any of the URL, which may hold secrets.
type urlError string

func (e urlError) Error() string { return string(e) }

// sentinelOptions reads
// redis-sentinel://[user:password@]host:port[,host:port...]/MASTER[/db][?options]
// into go-redis's form, redis://host:port[/db]?master_name=MASTER&addr=...
func sentinelOptions(rawURL string) (*redis.FailoverOptions, error) {
	u, hosts, err := multiHost(rawURL, "26379")
	if err != nil {
		return nil, err
	}
	path := strings.Split(strings.Trim(u.Path, "/"), "/")
	if path[0] == "" || len(path) > 2 {
		return nil, urlError("name the master: redis-sentinel://host:port[,host:port...]/MASTER[/db]")
	}
	q := u.Query()
	q.Set("master_name", path[0])
	if len(path) == 2 {
		q.Set("db", path[1])
	}
	// user:password of the URL are the data servers'; go-redis's URL gives
	// them to the Sentinels.
	if u.User != nil {
		q.Set("username", u.User.Username())
		if p, ok := u.User.Password(); ok {
			q.Set("password", p)
		}
	}
	var sentinelUser *url.Userinfo
	if su, sp := q.Get("sentinel_username"), q.Get("sentinel_password"); su != "" || sp != "" {
		sentinelUser = url.UserPassword(su, sp)
	}
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	g := url.URL{Scheme: strings.TrimSuffix(u.Scheme, "-sentinel"), User: sentinelUser, Host: hosts[0], RawQuery: q.Encode()}
	return redis.ParseFailoverURL(g.String())
}

// clusterOptions reads redis-cluster://[user:password@]host:port[,host:port...][?options]
// into go-redis's form, redis://[user:password@]host:port?addr=...
func clusterOptions(rawURL string) (*redis.ClusterOptions, error) {
	u, hosts, err := multiHost(rawURL, "6379")
	if err != nil {
		return nil, err
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		return nil, urlError("a Cluster has no database or master name: drop the path after the hosts")
	}
	q := u.Query()
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	g := url.URL{Scheme: strings.TrimSuffix(u.Scheme, "-cluster"), User: u.User, Host: hosts[0], RawQuery: q.Encode()}
	return redis.ParseClusterURL(g.String())
}

// urlParts is a URL split by hand, as url.Parse refuses a list of hosts.
type urlParts struct {
	scheme   string
	userinfo string        // as written, before the last '@' of the authority
	user     *url.Userinfo // userinfo decoded; nil when there is none
	hosts    []string      // host[:port] as written; empty entries dropped
	tail     string        // the path, options and fragment, as written
	options  url.Values    // the parsed options: their values may be secrets
}

// splitURL splits rawURL into its parts and checks each, so that what is
// shown of it, rebuilt from the parts, is what a URL parser reads. Its
// errors quote nothing of rawURL.
func splitURL(rawURL string) (urlParts, error) {
	scheme, rest, found := strings.Cut(rawURL, "://")
	if !found {
		return urlParts{}, urlError("the URL has no scheme (" + schemes + ")")
	}
	if !validScheme(scheme) {
		// Whatever precedes "://" may be a mistyped user:password@host.
		return urlParts{}, urlError("the URL's scheme, before \"://\", is not a scheme (" + schemes + ")")
	}
	p := urlParts{scheme: scheme}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority := rest[:end]
	p.tail = rest[end:]
	if strings.Contains(p.tail, "@") {
		// A password with an unescaped '/', '?' or '#' ends the host early
		// and lands in the path or options, where nothing would mask it.
		return urlParts{}, urlError("the URL has an '@' after its host: percent-encode '/', '?', '#' and '@' in a user name, password or option (%2F, %3F, %23, %40)")
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		p.userinfo, authority = authority[:at], authority[at+1:]
		u, err := url.Parse("redis://" + p.userinfo + "@h")
		if err != nil {
			return urlParts{}, urlError(`the URL's user name or password has a character that must be percent-encoded (%22 for ", %5C for \, %25 for %, %20 for a space)`)
		}
		p.user = u.User
	}
	for h := range strings.SplitSeq(authority, ",") {
		if h == "" {
			continue
		}
		if _, err := url.Parse("redis://" + h); err != nil {
			return urlParts{}, urlError("a host of the URL is not host[:port] (an IPv6 address in brackets)")
		}
		p.hosts = append(p.hosts, h)
	}
	t, err := url.Parse("redis://h" + p.tail)
	if err != nil {
		return urlParts{}, urlError("the URL's path or options are not valid: percent-encode what is not a letter, digit or -._~")
	}
	if p.options, err = url.ParseQuery(t.RawQuery); err != nil {
		return urlParts{}, urlError("an option of the URL is not valid ('%' not followed by two hex digits, or a ';')")
	}
	return p, nil
}

// validScheme reports whether s is a URL scheme (RFC 3986: a letter, then
// letters, digits, '+', '-', '.').
func validScheme(s string) bool {
	if s == "" || !('a' <= s[0] && s[0] <= 'z' || 'A' <= s[0] && s[0] <= 'Z') {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '+' || r == '-' || r == '.')
	})
}

// maskURL returns rawURL as guardctl may show it: rebuilt from its parts,
// with the password, and the value of every option that is not one of
// go-redis's settings known to hold no secret (password, sentinel_password
// and a mistyped option name alike), replaced by xxxxx. A URL that it
// cannot split and check gives an error that says what is wrong and quotes
// nothing of it. It reads the multi-host forms redis-sentinel://h1,h2/M and
// redis-cluster://h1,h2 as dial does, and any scheme, so that a mistyped
// one can be shown.
func maskURL(rawURL string) (string, error) {
	p, err := splitURL(rawURL)
	if err != nil {
		return "", err
	}
	return p.masked(), nil
}

// masked is maskURL of the parts.
func (p urlParts) masked() string {
	var b strings.Builder
	b.WriteString(p.scheme + "://")
	if p.user != nil {
		u := url.User(p.user.Username())
		if _, ok := p.user.Password(); ok {
			u = url.UserPassword(p.user.Username(), mask)
		}
		b.WriteString(u.String() + "@")
	}
	for i, h := range p.hosts {
		if i > 0 {
			b.WriteByte(',')
		}
		u, _ := url.Parse("redis://" + h) // checked by splitURL
		b.WriteString(strings.TrimPrefix((&url.URL{Host: u.Host}).String(), "//"))
	}
	t, _ := url.Parse("redis://h" + p.tail) // checked by splitURL
	q := url.Values{}
	for name, vs := range p.options {
		for _, v := range vs {
			if !shownOption(name) {
				v = mask
			}
			q.Add(name, v)
		}
	}
	// Only the path, options and fragment: the rest is written above.
	rest := url.URL{Path: t.Path, RawPath: t.RawPath, RawQuery: q.Encode(), Fragment: t.Fragment, RawFragment: t.RawFragment}
	b.WriteString(rest.String())
	return b.String()
}

// shownOption reports whether the value of the URL option name may be
// shown: only go-redis's settings that hold no credential. Any other name,
// a mistyped one included, may carry a secret.
func shownOption(name string) bool {
	switch name {
	case "db", "protocol", "client_name", "username", "sentinel_username", "master_name", "addr",
		"max_retries", "min_retry_backoff", "max_retry_backoff",
		"dial_timeout", "read_timeout", "write_timeout", "dialer_retries", "dialer_retry_timeout",
		"pool_fifo", "pool_size", "pool_timeout", "min_idle_conns", "max_idle_conns", "max_active_conns",
		"max_concurrent_dials", "pipeline_pool_size", "pipeline_read_buffer_size", "pipeline_write_buffer_size",
		"conn_max_idle_time", "idle_timeout", "conn_max_lifetime", "max_conn_age", "conn_max_lifetime_jitter",
		"skip_verify", "route_by_latency", "route_by_latency_tolerance", "route_randomly", "replica_only",
		"use_disconnected_replicas", "context_timeout_enabled", "disableIdentity", "identitySuffix",
		"unstable_resp3", "max_redirects", "read_only", "failing_timeout_seconds":
		return true
	}
	return false
}

// describeParseError says what go-redis (or url.Parse) found wrong in the
// URL p. Their messages quote parts of the URL, its password included, so
// none is passed on: only the names of options that p holds.
func describeParseError(err error, p urlParts) string {
	var ue urlError
	if errors.As(err, &ue) {
		return ue.Error()
	}
	msg := err.Error()
	var urlErr *url.Error
	switch {
	case errors.As(err, &urlErr):
		return "it is not a valid URL"
	case strings.HasPrefix(msg, "redis: invalid database number"):
		return "the database number is not a number"
	case strings.HasPrefix(msg, "redis: invalid URL path"):
		return "the path holds more than a database number"
	case strings.HasPrefix(msg, "redis: empty unix socket path"):
		return "unix:// needs the socket's path: unix:///path/to/redis.sock"
	case strings.HasPrefix(msg, "redis: unable to parse addr param"):
		return "an addr option is not host:port"
	case strings.HasPrefix(msg, "redis: unexpected option: "):
		names := strings.Split(strings.TrimPrefix(msg, "redis: unexpected option: "), ", ")
		// Names the URL holds are shown as masked shows them; no user
		// information reaches one, as splitURL refuses an '@' after the host.
		if !slices.ContainsFunc(names, func(n string) bool { return !p.options.Has(n) }) {
			quoted := make([]string, len(names))
			for i, n := range names {
				quoted[i] = strconv.Quote(n)
			}
			return "go-redis has no option " + strings.Join(quoted, ", ")
		}
		return "go-redis does not know one of its options"
	case strings.HasPrefix(msg, "redis: invalid "):
		// "redis: invalid NAME number|duration|boolean: ...", NAME being
		// one of go-redis's own option names.
		f := strings.Fields(strings.TrimPrefix(msg, "redis: invalid "))
		if len(f) >= 2 && p.options.Has(f[0]) && shownOption(f[0]) {
			return fmt.Sprintf("the value of option %s is not a %s", f[0], strings.TrimSuffix(f[1], ":"))
		}
	}
	return "go-redis cannot read it: check it against 'guardctl help'"
}

// multiHost parses a URL whose host is a comma-separated list of
// host[:port] (IPv6 in brackets), which url.Parse refuses, and returns the
// URL with the first host and every host with port if it had none.
func multiHost(rawURL, port string) (*url.URL, []string, error) {
	p, err := splitURL(rawURL)
	if err != nil {
		return nil, nil, err
	}
	var hosts []string
	for _, h := range p.hosts {
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), port)
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, nil, urlError("the URL names no host")
	}
	user := ""
	if p.user != nil {
		user = p.userinfo + "@"
	}
	u, err := url.Parse(p.scheme + "://" + user + hosts[0] + p.tail)
	if err != nil {
		return nil, nil, urlError("it is not a valid URL")
	}
	return u, hosts, nil
}

// secrets returns what in the URL must never be printed: its password and
// the values of its password options, each as written and decoded; none is
// empty.
func (p urlParts) secrets() []string {
	var out []string
	if _, pw, _ := strings.Cut(p.userinfo, ":"); pw != "" {
		dec, _ := p.user.Password()
		out = append(out, pw, dec)
	}
	for name, vs := range p.options {
		if n := strings.ToLower(name); n == "password" || strings.HasSuffix(n, "_password") {
			for _, v := range vs {
				if v != "" {
					out = append(out, v)
				}
			}
		}
	}
	return out
}

// scrub replaces in msg every secret of rawURL, as written, decoded,
// escaped for a URL or quoted by %q. It is for messages that must be passed
// on (a refused connection, a certificate error), which go-redis and Redis
// are not known to fill with a password: a second guard, not the first.
func scrub(msg, rawURL string) string {
	p, err := splitURL(rawURL)
	if err != nil {
		return msg // dial refused the URL: nothing reached Redis
	}
	var forms []string
	for _, s := range p.secrets() {
		q := strconv.Quote(s)
		forms = append(forms, s, q[1:len(q)-1], url.QueryEscape(s), url.PathEscape(s))
	}
	// Longest first, so that no form is left half replaced by a shorter one.
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	for _, f := range forms {
		msg = strings.ReplaceAll(msg, f, mask)
	}
	return msg
}
