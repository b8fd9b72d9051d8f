package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Where Debian (and a build from source) put libfaketime, and glibc's
// malloc_debug library: see StartWithClock.
var (
	faketimeLibs    = []string{"/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1", "/usr/local/lib/faketime/libfaketime.so.1"}
	mallocDebugLibs = []string{"/lib/*/libc_malloc_debug.so.0", "/usr/lib/*/libc_malloc_debug.so.0"}
)

// Clock is the wall clock of a server started by StartWithClock: the
// real time plus an offset that Step changes while the server runs, as
// an NTP step or a manual `date -s` changes a host's clock. It fakes
// CLOCK_REALTIME only (gettimeofday, TIME, the expiry of keys); the
// server's monotonic clock, which drives its timers, is left alone, as a
// step leaves a host's. Its methods are safe for concurrent use.
type Clock struct {
	file string // libfaketime's FAKETIME_TIMESTAMP_FILE

	mu     sync.Mutex
	offset time.Duration
}

// StartWithClock is Start for a server whose wall clock Step can move:
// redis-server runs under libfaketime (Debian's package faketime; see
// requireFaketime for when it is missing), which reads the offset from a
// file on every clock read, so a step takes effect at the server's next
// one. The offset starts at 0 and is kept across Restart, as a host's
// clock is across a process restart.
//
// Debian's redis-server is linked with jemalloc, whose initialization
// reads the clock while libfaketime's own initialization allocates, and
// the two deadlock (wolfcw/libfaketime#130); glibc's libc_malloc_debug.so.0,
// preloaded first, gives the server glibc's malloc instead. The server
// still believes it runs jemalloc: INFO's allocator and fragmentation
// fields are wrong, and active defragmentation (off by default) must stay
// off. None of the tests that step a clock reads them.
func StartWithClock(t testing.TB, args ...string) (*Server, *Clock) {
	t.Helper()
	preload := requireFaketime(t)
	c := &Clock{file: filepath.Join(t.TempDir(), "faketime")}
	if err := c.write(0); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s := newServer(t, args)
	s.env = []string{
		"LD_PRELOAD=" + preload,
		"FAKETIME_TIMESTAMP_FILE=" + c.file,
		"FAKETIME_NO_CACHE=1",            // read the offset on every call: a step is seen at once
		"FAKETIME_DONT_FAKE_MONOTONIC=1", // a step moves the wall clock only
	}
	s.reaped = removeFaketimeShm
	s.run(t, nil)
	return s, c
}

// Step moves the server's wall clock by d (forward when d > 0, back when
// d < 0) from where it is, for good: later steps add to it.
func (c *Clock) Step(t testing.TB, d time.Duration) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.write(c.offset + d); err != nil {
		t.Fatalf("redistest: step the clock by %v: %v", d, err)
	}
	c.offset += d
}

// Offset returns how far the server's wall clock is from the real one.
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// write replaces the offset file with offset, in seconds as libfaketime
// reads it ("+1.500000"). A rename, so that the server never reads a file
// half written.
func (c *Clock) write(offset time.Duration) error {
	tmp := c.file + ".tmp"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%+.6f\n", offset.Seconds()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, c.file)
}

// requireFaketime returns the LD_PRELOAD value that runs redis-server
// under libfaketime. If libfaketime is missing it fails the test when the
// environment variable CI is "true" and skips it otherwise, as
// RequireBinary does for redis-server.
func requireFaketime(t testing.TB) string {
	t.Helper()
	lib := findLib(faketimeLibs)
	if lib == "" {
		const msg = "libfaketime not found; run `make test` or apt-get install faketime"
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true, so this is an error)", msg)
		}
		t.Skip(msg)
	}
	malloc := findLib(mallocDebugLibs)
	if malloc == "" {
		// Without it the server would hang at its start (see
		// StartWithClock) rather than fail.
		const msg = "glibc's libc_malloc_debug.so.0 not found (glibc 2.34 or later has it): libfaketime and jemalloc deadlock without it"
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true, so this is an error)", msg)
		}
		t.Skip(msg)
	}
	return malloc + " " + lib
}

// findLib returns the first file that one of patterns matches, or "".
func findLib(patterns []string) string {
	for _, p := range patterns {
		if m, _ := filepath.Glob(p); len(m) > 0 {
			return m[0]
		}
	}
	return ""
}

// removeFaketimeShm removes the shared memory and semaphore libfaketime
// creates for process pid, which a SIGKILLed process leaves in /dev/shm.
func removeFaketimeShm(pid int) {
	_ = os.Remove(fmt.Sprintf("/dev/shm/faketime_shm_%d", pid))
	_ = os.Remove(fmt.Sprintf("/dev/shm/sem.faketime_sem_%d", pid))
}
