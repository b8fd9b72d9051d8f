package guard_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/guard"
)

// A busy key is the normal state of a fleet: it is logged at Info once a
// minute per key (with how many were not), at Debug otherwise.
func TestBusyLoggedOnceAMinutePerKey(t *testing.T) {
	srv, ls := newLockers(t, 1)
	var logged syncBuffer
	l := newLocker(t, srv.Addr(), guard.WithLogger(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	for _, key := range []string{"busy-a", "busy-b"} {
		le := mustAcquire(t, t.Context(), ls[0], key, guard.Wait(0))
		defer mustRelease(t, le)
		for range 5 {
			if _, err := l.Acquire(t.Context(), key, guard.Wait(0)); err == nil {
				t.Fatal("acquired a held key")
			}
		}
	}
	out := logged.String()
	info := strings.Count(out, "level=INFO msg=\"guard: lock busy\"")
	debug := strings.Count(out, "level=DEBUG msg=\"guard: lock busy\"")
	if info != 2 || debug != 8 {
		t.Fatalf("%d busy lines at Info and %d at Debug, want 2 (one per key) and 8:\n%s", info, debug, out)
	}
}
