package main

import (
	"slices"
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

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:pw@h:1":                 "redis://:xxxxx@h:1",
		"redis-sentinel://u:pw@a:1,b:2/m": "redis-sentinel://u:xxxxx@a:1,b:2/m",
		"redis://h:1":                     "redis://h:1",
		"redis://u@h:1":                   "redis://u@h:1",
		"redis://u:p w%@h":                "redis://u:xxxxx@h",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}
