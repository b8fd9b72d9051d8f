package main

import (
	"strings"
	"testing"
)

// nameInKey reads every Redis key of a lock, under any prefix, back to the
// lock's name, and refuses other keys with what to pass instead.
func TestNameInKey(t *testing.T) {
	for _, tc := range []struct {
		prefix, key string
		name, what  string // the name and what the key is, when read
		err         string // else a part of the error
	}{
		{"guard:", "guard:{nightly-report}", "nightly-report", "the Redis key", ""},
		{"guard:", "guard:{nightly-report}:fence", "nightly-report", "the fencing counter", ""},
		{"guard:", "guard:{nightly-report}:waiters", "nightly-report", "the queue of waiting acquisitions", ""},
		{"guard:", "guard:{nightly-report}:released", "nightly-report", "the release channel", ""},
		{"guard:", "guard:{nightly-report}:done:T5ATZBZEN5EY6NJVF4EDXJ3QEO", "nightly-report", "a release marker", ""},
		{"guard:", "guard:{a{b}", "a{b", "the Redis key", ""}, // '{' may be in a name
		{"guard:", "guard:{clé 日本}", "clé 日本", "the Redis key", ""},
		{"guard:", "guard:{deploy@prod}", "deploy@prod", "the Redis key", ""}, // '@': not a URL for that
		{"", "{x}", "x", "the Redis key", ""},
		{"team:", "team:{report}:fence", "report", "the fencing counter", ""},

		{"guard:", "team:{report}", "", "", `under the prefix "team:", not under --prefix "guard:": pass --prefix "team:" and the name "report"`},
		{"guard:", "{report}:waiters", "", "", `under the prefix "", not under --prefix "guard:"`},
		{"", "guard:{report}", "", "", `under the prefix "guard:", not under --prefix ""`},
		{"guard:", "guard:{report}:claim", "", "", `is the claim (guard.Claim) of "report", not a lock`},
		{"guard:", "guard:{report}:budget", "", "", `is the budget (guard.Charge) of "report", not a lock`},
		{"guard:", "guard:{report}:done:", "", "", `pass the name "report"`},
		{"guard:", "guard:{report}x", "", "", `nor a Redis key of lock "report" (guard:{report}, or that followed by`},
		{"guard:", "guard:{}", "", "", "nothing is between the braces"},
		{"guard:", "a}b", "", "", "a name has no '}'; pass the lock's name, or its Redis key as redis-cli shows it (guard:{NAME})"},
		{"guard:", "a}b{c}", "", "", "(guard:{NAME})"},
		{"guard:", "team:{}", "", "", "(guard:{NAME})"},
		{"guard:", "redis://admin:s3cret@h/{x}", "", "", "(a URL: pass it with --url) is not a lock name"},
		{"guard:", "guard:{admin:s3cret@h}x", "", "", "(an argument that looks like a URL; not shown) is not a lock name"},
		{"guard:", "admin:s3cret@h{x}", "", "", "(an argument that looks like a URL; not shown) is not a lock name"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			name, what, err := nameInKey(tc.prefix, tc.key)
			if tc.err == "" {
				if err != nil || name != tc.name || what != tc.what {
					t.Fatalf("nameInKey(%q, %q) = %q, %q, %v; want %q, %q", tc.prefix, tc.key, name, what, err, tc.name, tc.what)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || name != "" {
				t.Fatalf("nameInKey(%q, %q) = %q, %v; want an error with %q", tc.prefix, tc.key, name, err, tc.err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}
