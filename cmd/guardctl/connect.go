package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// dial returns a client for the deployment that rawURL names (see the
// package doc, Connecting), each request bounded by timeout; a TLS URL
// trusts the certificates in the PEM file cacert, if given, instead of the
// system's. It connects lazily: a bad address shows at the first request.
func dial(rawURL string, timeout time.Duration, cacert string) (redis.UniversalClient, error) {
	scheme, _, found := strings.Cut(rawURL, "://")
	if !found {
		return nil, fmt.Errorf("%q has no scheme (redis://, rediss://, unix://, redis-sentinel://, redis-cluster://)", redact(rawURL))
	}
	var roots *x509.CertPool
	if cacert != "" {
		if !strings.HasPrefix(scheme, "rediss") {
			return nil, fmt.Errorf("--cacert needs a TLS URL (rediss://, rediss-sentinel://, rediss-cluster://), got %s://", scheme)
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
	switch scheme {
	case "redis", "rediss", "unix":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, cleanURLError(err, rawURL)
		}
		bound(timeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout)
		o.ContextTimeoutEnabled = true
		trust(o.TLSConfig)
		return redis.NewClient(o), nil
	case "redis-sentinel", "rediss-sentinel":
		o, err := sentinelOptions(rawURL)
		if err != nil {
			return nil, cleanURLError(err, rawURL)
		}
		bound(timeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout)
		o.ContextTimeoutEnabled = true
		trust(o.TLSConfig)
		return redis.NewFailoverClient(o), nil
	case "redis-cluster", "rediss-cluster":
		o, err := clusterOptions(rawURL)
		if err != nil {
			return nil, cleanURLError(err, rawURL)
		}
		bound(timeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout)
		o.ContextTimeoutEnabled = true
		trust(o.TLSConfig)
		return redis.NewClusterClient(o), nil
	}
	return nil, fmt.Errorf("unknown scheme %q in %q (redis://, rediss://, unix://, redis-sentinel://, redis-cluster://)", scheme, redact(rawURL))
}

// bound sets each duration that the URL left unset to timeout.
func bound(timeout time.Duration, ds ...*time.Duration) {
	for _, d := range ds {
		if *d == 0 {
			*d = timeout
		}
	}
}

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
		return nil, fmt.Errorf("name the master: redis-sentinel://host:port[,host:port...]/MASTER[/db]")
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
		return nil, fmt.Errorf("a Cluster has no database or master name, got path %q", u.Path)
	}
	q := u.Query()
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	g := url.URL{Scheme: strings.TrimSuffix(u.Scheme, "-cluster"), User: u.User, Host: hosts[0], RawQuery: q.Encode()}
	return redis.ParseClusterURL(g.String())
}

// multiHost parses a URL whose host is a comma-separated list of
// host[:port] (IPv6 in brackets), which url.Parse refuses, and returns the
// URL with the first host and every host with port if it had none.
func multiHost(rawURL, port string) (*url.URL, []string, error) {
	scheme, rest, _ := strings.Cut(rawURL, "://")
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	user := ""
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		user, authority = authority[:at+1], authority[at+1:]
	}
	var hosts []string
	for _, h := range strings.Split(authority, ",") {
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), port)
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, nil, fmt.Errorf("no host in %q", redact(rawURL))
	}
	u, err := url.Parse(scheme + "://" + user + hosts[0] + tail)
	if err != nil {
		return nil, nil, cleanURLError(err, rawURL)
	}
	return u, hosts, nil
}

// redact hides the password of a URL, for messages.
func redact(rawURL string) string {
	if p := password(rawURL); p != "" {
		return strings.Replace(rawURL, ":"+p+"@", ":xxxxx@", 1)
	}
	return rawURL
}

// cleanURLError keeps the URL's password out of an error about it.
func cleanURLError(err error, rawURL string) error {
	msg := err.Error()
	if p := password(rawURL); p != "" {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
	}
	return errors.New(msg)
}

// password returns the password in a URL's user information, as written
// (url.Parse refuses a list of hosts, so it is found by hand).
func password(rawURL string) string {
	_, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return ""
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	_, p, _ := strings.Cut(rest[:at], ":")
	return p
}
