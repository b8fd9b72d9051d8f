package main

import (
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestSentinelURL(t *testing.T) {
	o, err := sentinelOptions("rediss-sentinel://app:pw@s1,s2:26380,[::1]:26381/mymaster/3?sentinel_password=spw&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"s1:26379", "s2:26380", "[::1]:26381"}; !slices.Equal(o.SentinelAddrs, want) {
		t.Errorf("SentinelAddrs = %q, want %q", o.SentinelAddrs, want)
	}
	if o.MasterName != "mymaster" || o.DB != 3 || o.Username != "app" || o.Password != "pw" ||
		o.SentinelPassword != "spw" || o.SentinelUsername != "" || o.DialTimeout != 2*time.Second || o.TLSConfig == nil {
		t.Errorf("options = %+v", o)
	}
	o, err = sentinelOptions("redis-sentinel://s1:1/m")
	if err != nil || o.TLSConfig != nil || o.Password != "" || o.SentinelPassword != "" || o.MasterName != "m" {
		t.Errorf("plain: %+v, %v", o, err)
	}
	for _, bad := range []string{"redis-sentinel://s1:1", "redis-sentinel://s1:1/", "redis-sentinel://s1:1/m/0/x", "redis-sentinel://s1:1/m/x", "redis-sentinel:///m", "redis-sentinel://s1/m?bogus=1"} {
		if _, err := sentinelOptions(bad); err == nil {
			t.Errorf("sentinelOptions(%q) accepted it", bad)
		}
	}
}

func TestClusterURL(t *testing.T) {
	o, err := clusterOptions("rediss-cluster://u:p@n1:7000,n2:7001,n3?read_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"n1:7000", "n2:7001", "n3:6379"}; !slices.Equal(o.Addrs, want) {
		t.Errorf("Addrs = %q, want %q", o.Addrs, want)
	}
	if o.Username != "u" || o.Password != "p" || o.ReadTimeout != time.Second || o.TLSConfig == nil {
		t.Errorf("options = %+v", o)
	}
	for _, bad := range []string{"redis-cluster://n1/0", "redis-cluster://", "redis-cluster://n1?bogus=1"} {
		if _, err := clusterOptions(bad); err == nil {
			t.Errorf("clusterOptions(%q) accepted it", bad)
		}
	}
}

func TestDial(t *testing.T) {
	for _, tc := range []struct {
		url  string
		kind string
	}{
		{"redis://localhost:6390/2", "*redis.Client"},
		{"rediss://localhost:6390", "*redis.Client"},
		{"unix:///tmp/redis.sock", "*redis.Client"},
		{"redis-sentinel://localhost/m", "*redis.Client"},
		{"redis-cluster://localhost:7000", "*redis.ClusterClient"},
	} {
		c, err := dial(tc.url, time.Second, "")
		if err != nil {
			t.Errorf("dial(%q): %v", tc.url, err)
			continue
		}
		switch c.(type) {
		case *redis.Client:
			if tc.kind != "*redis.Client" {
				t.Errorf("dial(%q) = %T", tc.url, c)
			}
		case *redis.ClusterClient:
			if tc.kind != "*redis.ClusterClient" {
				t.Errorf("dial(%q) = %T", tc.url, c)
			}
		}
		_ = c.Close()
	}
	// The URL's own timeouts win; the others are --timeout's.
	c, err := dial("redis://localhost:6390?read_timeout=7s", 3*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	o := c.(*redis.Client).Options()
	if o.ReadTimeout != 7*time.Second || o.DialTimeout != 3*time.Second || o.WriteTimeout != 3*time.Second || !o.ContextTimeoutEnabled {
		t.Errorf("timeouts: dial %v read %v write %v", o.DialTimeout, o.ReadTimeout, o.WriteTimeout)
	}
	_ = c.Close()

	for _, bad := range []string{
		"redis://user:hunter2@localhost:6390/?nope=1",
		"redis://user:hunter2@local host:6390",
		"redis-cluster://user:hunter2@a:1,b:2/?nope=1",
		"redis-sentinel://user:hunter2@a:1,b:2/m?nope=1",
		"redis-sentinel://user:hunter2@a:1,b:2/m/x%zz",
	} {
		_, err := dial(bad, time.Second, "")
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("dial(%q) = %v; want an error without the password", bad, err)
		}
	}
}

// leaked returns the first form of a secret (as written, %q-quoted,
// URL-escaped) found in out, or "".
func leaked(out string, secrets ...string) string {
	for _, s := range secrets {
		q := strconv.Quote(s)
		for _, form := range []string{s, q, q[1 : len(q)-1], url.QueryEscape(s), url.PathEscape(s)} {
			if strings.Contains(out, form) {
				return form
			}
		}
	}
	return ""
}

func TestMaskURL(t *testing.T) {
	for _, tc := range []struct {
		name    string
		url     string
		want    string // "" when the URL must not be shown at all
		secrets []string
	}{
		{"scheme without ://", "redis//admin:S3cretPass@host:6379", "", []string{"S3cretPass"}},
		{"no scheme", "admin:S3cretPass@host:6379", "", []string{"S3cretPass"}},
		{"host only", "localhost:6379", "", nil},
		{"colon slash", "redis:/admin:S3cretPass@host", "", []string{"S3cretPass"}},
		{"userinfo before ://", "admin:S3cretPass@host://x", "", []string{"S3cretPass"}},
		{"quote and backslash", `redis://admin:S3c"ret\Pass@host`, "", []string{`S3c"ret\Pass`}},
		{"escaped quote and backslash", "redis://admin:S3c%22ret%5CPass%25@host:6379/0",
			"redis://admin:xxxxx@host:6379/0", []string{"S3c%22ret%5CPass%25", `S3c"ret\Pass%`}},
		{"@ in password", "redis://u:S3cret@Pass@h", "redis://u:xxxxx@h", []string{"S3cret@Pass"}},
		{"/ in password", "redis://u:S3cret/Pass@h", "", []string{"S3cret/Pass", "S3cret"}},
		{"? in password", "redis://u:S3cret?Pass@h:1", "", []string{"S3cret?Pass", "S3cret"}},
		{"# in password", "redis://u:S3cret#Pass@h", "", []string{"S3cret#Pass", "S3cret"}},
		{"space in host", "redis://u:S3cretPass@local host:6390", "", []string{"S3cretPass"}},
		{"control character", "redis://u:S3cretPass@h/\x1b[2J", "", []string{"S3cretPass"}},
		{"sentinel_password", "redis-sentinel://app:S3cretPass@s1,s2:26380,[::1]:26381/mymaster/2?sentinel_password=Sent%26S3cret&dial_timeout=2s",
			"redis-sentinel://app:xxxxx@s1,s2:26380,[::1]:26381/mymaster/2?dial_timeout=2s&sentinel_password=xxxxx",
			[]string{"S3cretPass", "Sent&S3cret", "Sent%26S3cret"}},
		{"sentinel_password alone", "rediss-sentinel://s1/m?sentinel_password=S3cretPass&sentinel_username=ops",
			"rediss-sentinel://s1/m?sentinel_password=xxxxx&sentinel_username=ops", []string{"S3cretPass"}},
		{"bad escape in an option", "redis-sentinel://s1/m?sentinel_password=S3cret%zzPass", "", []string{"S3cret%zzPass", "S3cret"}},
		{"mistyped option", "redis-sentinel://s1/m?sentinel_pasword=S3cretPass", "redis-sentinel://s1/m?sentinel_pasword=xxxxx", []string{"S3cretPass"}},
		{"password option", "redis://h?password=S3cretPass&db=1", "redis://h?db=1&password=xxxxx", []string{"S3cretPass"}},
		{"mistyped scheme", "rediz://u:S3cretPass@h", "rediz://u:xxxxx@h", []string{"S3cretPass"}},
		{"mistyped sentinel scheme", "redis-sentinl://h1,h2/m?sentinel_password=S3cretPass", "redis-sentinl://h1,h2/m?sentinel_password=xxxxx", []string{"S3cretPass"}},
		{"rediss-cluster", "rediss-cluster://u:S3cretPass@n1:7000,n2:7001?read_timeout=1s",
			"rediss-cluster://u:xxxxx@n1:7000,n2:7001?read_timeout=1s", []string{"S3cretPass"}},
		{"empty password", "redis://u:@h", "redis://u:xxxxx@h", nil},
		{"user only", "redis://u@h:1", "redis://u@h:1", nil},
		{"no user", "redis://h:1/2", "redis://h:1/2", nil},
		{"unix", "unix:///tmp/redis.sock?db=2", "unix:///tmp/redis.sock?db=2", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := maskURL(tc.url)
			if tc.want == "" && (err == nil || got != "") {
				t.Errorf("maskURL = %q, %v; want no URL and an error", got, err)
			}
			if tc.want != "" && (got != tc.want || err != nil) {
				t.Errorf("maskURL = %q, %v; want %q", got, err, tc.want)
			}
			out := got
			if err != nil {
				out += " " + err.Error()
				if strings.Contains(err.Error(), tc.url) {
					t.Errorf("the error quotes the URL: %v", err)
				}
			}
			if form := leaked(out, tc.secrets...); form != "" {
				t.Errorf("the secret shows as %q in %q", form, out)
			}
		})
	}
}

// dial's errors say what is wrong with a URL and show it only masked,
// whatever go-redis's own message quotes.
func TestDialErrors(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string
	}{
		{"redis//admin:S3cretPass@host", "has no scheme"},
		{"admin:S3cretPass@host", "has no scheme"},
		{`redis://admin:S3cretPass"@host`, "must be percent-encoded"},
		{`redis://admin:S3cret\Pass@host`, "must be percent-encoded"},
		{"redis://admin:S3cret%22Pass@host/?nope=1", `redis://admin:xxxxx@host/?nope=xxxxx: go-redis has no option "nope"`},
		{"redis://admin:S3cretPass@host/x", "the database number is not a number"},
		{"redis://admin:S3cretPass@host/0/1", "more than a database number"},
		{"redis://admin:S3cretPass@host?dial_timeout=soon", "the value of option dial_timeout is not a duration"},
		{"unix://admin:S3cretPass@", "socket's path"},
		{"rediz://admin:S3cretPass@host", `rediz://admin:xxxxx@host: unknown scheme "rediz"`},
		{"redis-sentinl://a,b/m?sentinel_password=S3cretPass", `redis-sentinl://a,b/m?sentinel_password=xxxxx: unknown scheme "redis-sentinl"`},
		{"redis-sentinel://a:1,b:2/m/x%zz?sentinel_password=S3cretPass", "path or options are not valid"},
		{"redis-sentinel://admin:S3cretPass@a/m?pool_size=many&sentinel_password=S3cretPass", "sentinel_password=xxxxx: the value of option pool_size is not a number"},
		{"redis-sentinel://admin:S3cretPass@a:1", "name the master"},
		{"rediss-cluster://admin:S3cretPass@n1,n2/0", "no database"},
		{"rediss-cluster://admin:S3cretPass@", "names no host"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := dial(tc.url, time.Second, "")
			if err == nil {
				t.Fatal("dial accepted it")
			}
			if !errors.Is(err, errBadURL) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("dial: %v; want errBadURL and %q", err, tc.want)
			}
			if form := leaked(err.Error(), "S3cretPass", `S3cretPass"`, `S3cret\Pass`, `S3cret"Pass`); form != "" {
				t.Errorf("the password shows as %q in %q", form, err)
			}
		})
	}
}
