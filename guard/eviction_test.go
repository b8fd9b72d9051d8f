package guard_test

import (
	"log/slog"
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
// evict lock keys under memory pressure; a server that evicts nothing
// (noeviction, or no maxmemory) gets no warning.
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			var logged syncBuffer
			l := newLocker(t, srv.Addr(), guard.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
			// The check runs beside the first acquisition.
			mustRelease(t, mustAcquire(t, t.Context(), l, "k", guard.Wait(0)))
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
		})
	}
}
