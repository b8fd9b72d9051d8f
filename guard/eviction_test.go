package guard_test

import (
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A Locker warns, once and off the caller's path, when its Redis may
// evict lock keys under memory pressure, naming what the policy evicts; a
// server that evicts nothing (noeviction, or no maxmemory) gets no
// warning. It reads INFO memory, so a server whose CONFIG is renamed away
// is checked too, and it asks once, not at every acquisition.
func TestWarnsWhenRedisMayEvictLocks(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		warn bool
	}{
		{"allkeys-lru", []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}, true},
		{"volatile-ttl", []string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"}, true},
		{"noeviction", []string{"--maxmemory", "64mb", "--maxmemory-policy", "noeviction"}, false},
		{"no maxmemory", []string{"--maxmemory-policy", "allkeys-lru"}, false},
		{"allkeys-random", []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-random", "--rename-command", "CONFIG", ""}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			var logged syncBuffer
			l := newLocker(t, srv.Addr(), guard.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
			calls := infoCalls(t, srv) // redistest's own, before the Locker's
			// The check runs beside the first acquisition, and only then.
			for range 5 {
				mustRelease(t, mustAcquire(t, t.Context(), l, "k", guard.Wait(0)))
			}
			deadline := time.Now().Add(2 * time.Second)
			for !strings.Contains(logged.String(), "may evict") && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			got := logged.String()
			if warned := strings.Contains(got, "may evict"); warned != tc.warn {
				t.Fatalf("warned %v, want %v; log:\n%s", warned, tc.warn, got)
			}
			if tc.warn && (!strings.Contains(got, "maxmemory-policy="+tc.name) || strings.Count(got, "may evict") != 1) {
				t.Errorf("want one warning naming the policy %s; log:\n%s", tc.name, got)
			}
			evicts := "any key"
			if strings.HasPrefix(tc.name, "volatile-") {
				evicts = "keys with a TTL"
			}
			if tc.warn && !strings.Contains(got, "evicts=\""+evicts) {
				t.Errorf("want the warning to say the policy evicts %s; log:\n%s", evicts, got)
			}
			if n := infoCalls(t, srv) - calls - 1; n != 1 { // less the first infoCalls
				t.Errorf("INFO was called %d times in 5 acquisitions, want once", n)
			}
		})
	}
}

// infoCalls returns how many INFO commands srv has answered, this one
// not counted (the server counts a command once it has run).
func infoCalls(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	stats, err := srv.Client(t).Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(stats) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_info:calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}
