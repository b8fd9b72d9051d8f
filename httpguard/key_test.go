package httpguard_test

import (
	"strings"
	"testing"

	"github.com/jobguard/jobguard/httpguard"
)

func TestParseKey(t *testing.T) {
	long := strings.Repeat("k", 255)
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"abc", "abc", true},
		{"  abc\t", "abc", true},
		{"a b", "a b", true},
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{`"abc"`, "abc", true},
		{`"a\"b\\c"`, `a"b\c`, true},
		{`a"b`, `a"b`, true}, // bare: a quote inside is just a character
		{`}{`, `}{`, true},
		{long, long, true},
		{`"` + long + `"`, long, true},
		{"", "", false},
		{" ", "", false},
		{`""`, "", false},
		{long + "k", "", false},
		{`"` + long + `k"`, "", false},
		{"a\x00b", "", false},
		{"a\tb", "", false},
		{"a\x7fb", "", false},
		{"clé", "", false},
		{`"abc`, "", false},
		{`"a"b"`, "", false},
		{`"abc";p=1`, "", false},
		{`"a\b"`, "", false},
		{`"a\`, "", false},
		{`"`, "", false},
	} {
		got, err := httpguard.ParseKey(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// The lookup key is a hash: nothing a client sends reaches a Redis key.
func TestLockKeyIsHashed(t *testing.T) {
	a := httpguard.LockKey("POST", "POST /orders", "acme", "k}{x")
	for _, other := range []string{
		httpguard.LockKey("PATCH", "POST /orders", "acme", "k}{x"),
		httpguard.LockKey("POST", "POST /refunds", "acme", "k}{x"),
		httpguard.LockKey("POST", "POST /orders", "globex", "k}{x"),
		httpguard.LockKey("POST", "POST /orders", "acme", "k}{y"),
		httpguard.LockKey("POST", "POST /orders", "acmek}{", "x"), // fields cannot shift into each other
	} {
		if other == a {
			t.Errorf("two scopes share the lock key %s", a)
		}
	}
	inner := strings.TrimSuffix(strings.TrimPrefix(a, "guard:{httpguard:"), "}")
	if len(inner) != 64 || strings.Trim(inner, "0123456789abcdef") != "" {
		t.Fatalf("lock key %s is not the default prefix around a SHA-256 hex", a)
	}
}

// FuzzIdempotencyKey checks the header parser: it never panics, accepts
// only keys of 1 to 255 printable ASCII characters, and the bare and quoted
// forms of a key it accepts name the same key.
func FuzzIdempotencyKey(f *testing.F) {
	for _, s := range []string{
		"abc", `"abc"`, `"a\"b\\c"`, "", " ", `""`, `"`, `"\`, strings.Repeat("k", 255),
		strings.Repeat("k", 256), `"` + strings.Repeat("k", 255) + `"`, "a\x00b", "a\tb", "clé",
		`"abc";p=1`, `"a"b"`, "\x7f", " \t x \t ", `}{`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		key, err := httpguard.ParseKey(in)
		if err != nil {
			if key != "" {
				t.Fatalf("ParseKey(%q) = %q with error %v", in, key, err)
			}
			return
		}
		if len(key) < 1 || len(key) > 255 {
			t.Fatalf("ParseKey(%q) accepted %q of length %d", in, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) accepted %q with byte %#x", in, key, key[i])
			}
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if again, err := httpguard.ParseKey(quoted); err != nil || again != key {
			t.Fatalf("ParseKey(%q) = %q, %v; want %q as ParseKey(%q)", quoted, again, err, key, in)
		}
		if key[0] != '"' && key[0] != ' ' && key[len(key)-1] != ' ' {
			if again, err := httpguard.ParseKey(key); err != nil || again != key {
				t.Fatalf("bare ParseKey(%q) = %q, %v", key, again, err)
			}
		}
	})
}
