package httpguard_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/httpguard"
	"github.com/redis/go-redis/v9"
)

// An invalid option is a programming error: Middleware panics at once with
// an error matching guard.ErrInvalid, before any request.
func TestInvalidOptionsPanic(t *testing.T) {
	// No request reaches Redis here: a miniredis stands in for the Locker's server.
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	l, err := guard.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })

	for _, tc := range []struct {
		name string
		l    *guard.Locker
		opts []httpguard.Option
	}{
		{"nil Locker", nil, nil},
		{"nil option", l, []httpguard.Option{nil}},
		{"no methods", l, []httpguard.Option{httpguard.Methods()}},
		{"bad method", l, []httpguard.Option{httpguard.Methods("PO ST")}},
		{"non-ASCII method", l, []httpguard.Option{httpguard.Methods("po\u017ft")}}, // upper-cases to POST
		{"nil Principal", l, []httpguard.Option{httpguard.Principal(nil)}},
		{"nil DenyHandler", l, []httpguard.Option{httpguard.DenyHandler(nil)}},
		{"nil Logger", l, []httpguard.Option{httpguard.Logger(nil)}},
		{"zero Retention", l, []httpguard.Option{httpguard.Retention(0)}},
		{"sub-ms Retention", l, []httpguard.Option{httpguard.Retention(time.Microsecond)}},
		{"zero MaxBody", l, []httpguard.Option{httpguard.MaxBody(0)}},
		{"negative MaxStoredBody", l, []httpguard.Option{httpguard.MaxStoredBody(-1)}},
		{"zero TTL", l, []httpguard.Option{httpguard.TTL(0)}},
		{"zero MaxRetryAfter", l, []httpguard.Option{httpguard.MaxRetryAfter(0)}},
		{"sub-second MaxRetryAfter", l, []httpguard.Option{httpguard.MaxRetryAfter(999 * time.Millisecond)}},
		{"bad replay header", l, []httpguard.Option{httpguard.ReplayHeaders("X Bad")}},
		{"framing replay header", l, []httpguard.Option{httpguard.ReplayHeaders("content-length")}},
		{"Idempotent-Replayed as replay header", l, []httpguard.Option{httpguard.ReplayHeaders("Idempotent-Replayed")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := panicked(func() { httpguard.Middleware(tc.l, tc.opts...) })
			if !errors.Is(err, guard.ErrInvalid) {
				t.Fatalf("panic %v, want an error matching guard.ErrInvalid", err)
			}
			t.Log(err)
		})
	}

	t.Run("nil handler", func(t *testing.T) {
		mw := httpguard.Middleware(l, httpguard.SharedKeys())
		if err := panicked(func() { mw(nil) }); !errors.Is(err, guard.ErrInvalid) {
			t.Fatalf("panic %v, want an error matching guard.ErrInvalid", err)
		}
	})
	t.Run("valid", func(t *testing.T) {
		err := panicked(func() {
			httpguard.Middleware(l, httpguard.Required(), httpguard.Methods("POST", "PUT"),
				httpguard.Principal(func(*http.Request) string { return "" }),
				httpguard.DenyHandler(httpguard.WriteProblem), httpguard.Retention(time.Hour),
				httpguard.MaxBody(1), httpguard.MaxStoredBody(1), httpguard.ReplayHeaders(),
				httpguard.NoReplay(), httpguard.TTL(time.Second), httpguard.Logger(slog.Default()),
				httpguard.MaxRetryAfter(time.Second),
			)(http.NotFoundHandler())
		})
		if err != nil {
			t.Fatalf("valid options panicked: %v", err)
		}
	})
}

func panicked(f func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			if e, ok := v.(error); ok {
				err = e
			} else {
				err = fmt.Errorf("non-error panic: %v", v)
			}
		}
	}()
	f()
	return nil
}
