package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/guard/observe"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// slowHandler is a slog handler that takes delay over every warning and
// error, as a handler writing to a stalled pipe or a remote collector would.
// It drops the rest, so that acquisitions (logged at Debug) stay quick.
type slowHandler struct{ delay time.Duration }

func (h slowHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h slowHandler) Handle(context.Context, slog.Record) error    { time.Sleep(h.delay); return nil }
func (h slowHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h slowHandler) WithGroup(string) slog.Handler                { return h }

// slowObserver takes delay over every renewal failure and loss it is told of.
type slowObserver struct{ delay time.Duration }

func (slowObserver) Begin(ctx context.Context, _ observe.Phase, _ observe.Info) context.Context {
	return ctx
}
func (slowObserver) End(context.Context, observe.Phase, observe.Info) {}
func (o slowObserver) Event(_ context.Context, k observe.Event, _ observe.Info) {
	if k == observe.RenewFailed || k == observe.LeaseLost {
		time.Sleep(o.delay)
	}
}

// When many holds are lost at once, every job is told at once: a slow log
// handler or observer delays no cancellation, whether a renewal found the
// holds gone or no renewal came in time.
func TestLostHoldsCanceledBeforeSlowReports(t *testing.T) {
	const (
		ttl   = 1500 * time.Millisecond // renew every 500ms
		holds = 6
		delay = 300 * time.Millisecond // per log record and per event
		bound = 250 * time.Millisecond // from the first cancellation to the last
	)
	tests := []struct {
		name  string
		fault func(t *testing.T, srv *redistest.Server)
	}{
		{"keys deleted", func(t *testing.T, srv *redistest.Server) {
			if err := srv.Client(t).FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"server paused", func(t *testing.T, srv *redistest.Server) {
			srv.Pause(t)
			t.Cleanup(func() { srv.Resume(t) })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			client := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.ReadTimeout = 200 * time.Millisecond })
			l, err := guard.New(client, guard.WithTTL(ttl),
				guard.WithLogger(slog.New(slowHandler{delay})), guard.WithObserver(slowObserver{delay}))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			leases := make([]*guard.Lease, holds)
			for i := range leases {
				leases[i] = mustAcquire(t, t.Context(), l, fmt.Sprintf("many-%d", i))
			}

			tt.fault(t, srv)
			if !anyDone(leases, 2*ttl) {
				t.Fatalf("every lease still live %v after the fault", 2*ttl)
			}
			// Holds acquired a few ms apart are lost a few ms apart; before
			// the fix the second waited for the first one's reports.
			deadline := time.Now().Add(bound)
			for i, le := range leases {
				if le.Context().Err() == nil {
					select {
					case <-le.Context().Done():
					case <-time.After(time.Until(deadline)):
					}
				}
				if le.Context().Err() == nil {
					t.Fatalf("lease %d still live %v after the first was lost; cancellations wait on reports", i, bound)
				}
				if cause := context.Cause(le.Context()); !errors.Is(cause, guard.ErrLeaseLost) {
					t.Errorf("lease %d: cause %v, want ErrLeaseLost", i, cause)
				}
			}
		})
	}
}

// anyDone reports whether some lease's context is done within d.
func anyDone(leases []*guard.Lease, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, le := range leases {
			if le.Context().Err() != nil {
				return true
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

// A renewal answered WRONGTYPE (someone SET the lock key to a string) is no
// transient fault: the lease is lost at once, with a cause that says why.
func TestRenewalWrongTypeLosesLeaseAtOnce(t *testing.T) {
	const ttl = 3 * time.Second // renew every 1s; the stop deadline is 2.7s away
	srv, ls := newLockers(t, 1, guard.WithTTL(ttl))
	le := mustAcquire(t, t.Context(), ls[0], "typed")
	if err := srv.Client(t).Set(t.Context(), lockKey("typed"), "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-le.Context().Done():
	case <-time.After(ttl / 2):
		t.Fatalf("lease still live %v after its key became a string (renewals every %v)", ttl/2, ttl/3)
	}
	cause := context.Cause(le.Context())
	if !errors.Is(cause, guard.ErrLeaseLost) || !errors.Is(cause, guard.ErrWrongType) {
		t.Fatalf("cause = %v, want ErrLeaseLost and ErrWrongType", cause)
	}
	if err := le.Release(t.Context()); !errors.Is(err, guard.ErrNotHeld) {
		t.Errorf("Release: %v, want ErrNotHeld", err)
	}
}
