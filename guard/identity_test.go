package guard_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

func TestWithIdentityValidation(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	for _, tc := range []struct {
		identity string
		ok       bool
	}{
		{"web-1/4242", true},
		{"pod web-7c9f (eu-west-1a)", true},
		{"über/1", true},
		{strings.Repeat("x", 128), true},
		{strings.Repeat("x", 129), false},
		{"", false},
		{"tab\there", false},
		{"new\nline", false},
		{"bad\xffutf8", false},
	} {
		l, err := guard.New(client, guard.WithIdentity(tc.identity))
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, guard.ErrInvalid)) {
			t.Errorf("WithIdentity(%q): %v; want ok = %v", tc.identity, err, tc.ok)
		}
		if l != nil {
			_ = l.Close()
		}
	}
}

// A hold records its identity in the same write that takes it, and drops it
// with the hold.
func TestIdentityStoredWithHold(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l := newLocker(t, srv.Addr(), guard.WithIdentity("web 1/42"))
	a := mustAcquire(t, t.Context(), l, "id")
	r, err := newLocker(t, srv.Addr(), guard.WithIdentity("reader")).AcquireRead(t.Context(), "id-read")
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"id": "web 1/42", "id-read": "reader"} {
		h, err := c.HGetAll(t.Context(), lockKey(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for f, v := range h {
			if strings.HasSuffix(f, ":i") {
				found = v == want
			}
		}
		if !found {
			t.Errorf("%s: no identity %q in %v", key, want, h)
		}
	}
	mustRelease(t, a)
	mustRelease(t, r)
	if n, err := c.Exists(t.Context(), lockKey("id"), lockKey("id-read")).Result(); err != nil || n != 0 {
		t.Fatalf("%d lock keys left after release (%v)", n, err)
	}
}
