package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// guardctl never prints a password of its URL, nor a Sentinel's, however
// the URL is mistyped and however the connection fails.
func TestURLNeverShown(t *testing.T) {
	closed := closedPort(t) // nothing listens: no Sentinel, no server answers
	for _, tc := range []struct {
		name    string
		url     string
		stderr  string
		secrets []string
	}{
		{"scheme without ://", "redis//admin:S3cretPass@" + closed, "has no scheme", []string{"S3cretPass"}},
		{"no scheme", "admin:S3cretPass@" + closed, "has no scheme", []string{"S3cretPass"}},
		{"quote and backslash", `redis://admin:S3c"ret\Pass@` + closed, "percent-encoded", []string{`S3c"ret\Pass`}},
		{"escaped quote and backslash", "redis://admin:S3c%22ret%5CPass@" + closed, "redis://admin:xxxxx@" + closed,
			[]string{"S3c%22ret%5CPass", `S3c"ret\Pass`}},
		{"unknown option", "redis://admin:S3cretPass@" + closed + "/?nope=1", `no option "nope"`, []string{"S3cretPass"}},
		{"Sentinels do not answer", "redis-sentinel://app:S3cretPass@" + closed + "/mymaster?sentinel_password=Sentinel5ecret",
			"redis-sentinel://app:xxxxx@" + closed + "/mymaster?sentinel_password=xxxxx", []string{"S3cretPass", "Sentinel5ecret"}},
		{"mistyped Sentinel scheme", "redis-sentinl://" + closed + "/mymaster?sentinel_password=Sentinel5ecret",
			`unknown scheme "redis-sentinl"`, []string{"Sentinel5ecret"}},
		{"mistyped scheme", "rediz://u:S3cretPass@" + closed, `unknown scheme "rediz"`, []string{"S3cretPass"}},
		{"rediss-cluster", "rediss-cluster://u:S3cretPass@" + closed + "," + closed, "rediss-cluster://u:xxxxx@", []string{"S3cretPass"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, run := range []struct {
				env  []string
				args []string
			}{
				{nil, []string{"--url", tc.url, "--timeout=1s", "show", "k"}},
				{[]string{"REDIS_URL=" + tc.url}, []string{"--timeout=1s", "ls"}},
			} {
				r := must(t, 2, run.env, run.args...)
				if !strings.HasPrefix(r.stderr, "guardctl: ") || !strings.Contains(r.stderr, tc.stderr) {
					t.Errorf("%q: stderr %q; want it to contain %q", run.args, r.stderr, tc.stderr)
				}
				if form := leaked(r.stdout+r.stderr, tc.secrets...); form != "" {
					t.Errorf("%q: the password shows as %q:\nstdout %q\nstderr %q", run.args, form, r.stdout, r.stderr)
				}
			}
		})
	}
}

// A URL typed where a command or a pattern belongs is not echoed either.
func TestURLAsArgumentNeverShown(t *testing.T) {
	srv := redistest.Start(t)
	const secret = "S3cretPass"
	for _, args := range [][]string{
		{"redis://admin:" + secret + "@" + srv.Addr(), "ls"},
		{"--url=redis://" + srv.Addr(), "ls", "redis://admin:" + secret + "@h"},
		{"--url=redis://" + srv.Addr(), "ls", "a", "redis://admin:" + secret + "@h"},
		{"admin:" + secret + "@host"},
	} {
		r := guardctl(t, nil, args...)
		if form := leaked(r.stdout+r.stderr, secret); form != "" {
			t.Errorf("%q: the password shows as %q:\nstdout %q\nstderr %q", args, form, r.stdout, r.stderr)
		}
	}
}

// A lock whose name holds terminal control sequences is shown escaped by
// ls, show and release, and as JSON escapes by --json.
func TestControlCharactersInKeys(t *testing.T) {
	srv := redistest.Start(t)
	url := "--url=redis://" + srv.Addr()
	l := newLocker(t, srv.Client(t), guard.WithIdentity("plain"))
	const key = "evil\x1b[2J\x7f\u009b\xff"
	const shown = `evil\x1b[2J\x7f\u009b\xff`
	le := acquire(t, t.Context(), l, key)
	defer func() { _ = le.Release(context.Background()) }()

	for _, args := range [][]string{{"ls"}, {"show", key}, {"ls", "--json"}, {"show", key, "--json"}} {
		r := must(t, 0, nil, append([]string{url}, args...)...)
		if r, found := rawControl(r.stdout, ""); found {
			t.Errorf("%q prints %q raw", args, r)
		}
		want := shown
		if args[len(args)-1] == "--json" {
			want = `evil\u001b[2J\u007f\u009b\ufffd` // JSON has no invalid UTF-8
		}
		if !strings.Contains(r.stdout, want) {
			t.Errorf("%q lacks %s:\n%s", args, want, r.stdout)
		}
	}
	r := must(t, 0, nil, url, "--json", "ls")
	var locks []lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &locks); err != nil || len(locks) != 1 || locks[0].Key != strings.ToValidUTF8(key, "\uFFFD") {
		t.Errorf("ls --json read back %+v, %v", locks, err)
	}
	r = must(t, 1, nil, url, "show", "free\x1b[2J")
	if found := strings.ContainsRune(r.stderr, '\x1b'); found || !strings.Contains(r.stderr, `free\x1b[2J`) {
		t.Errorf("show of a free key: stderr %q", r.stderr)
	}
	// The note about a Redis key given as KEY quotes it escaped.
	r = must(t, 0, nil, url, "show", "guard:{"+key+"}")
	if _, found := rawControl(r.stderr, ""); found || !strings.Contains(r.stderr, shown) {
		t.Errorf("show of the lock's Redis key: stderr %q", r.stderr)
	}
	r = must(t, 0, nil, url, "release", "--force", key)
	if r, found := rawControl(r.stdout, ""); found {
		t.Errorf("release prints %q raw", r)
	}
	if !strings.Contains(r.stdout, shown) {
		t.Errorf("release lacks %s:\n%s", shown, r.stdout)
	}
}
