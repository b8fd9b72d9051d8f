package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fastFail makes a client give up quickly on a dead or paused server.
func fastFail(o *redis.Options) {
	o.MaxRetries = -1
	o.DialTimeout = 300 * time.Millisecond
	o.ReadTimeout = 300 * time.Millisecond
	o.WriteTimeout = 300 * time.Millisecond
}

func TestStart(t *testing.T) {
	s := Start(t)
	if s.Port() == 6379 {
		t.Fatalf("Port() = 6379; must never use the default port")
	}
	if want := fmt.Sprintf("127.0.0.1:%d", s.Port()); s.Addr() != want {
		t.Fatalf("Addr() = %q, want %q", s.Addr(), want)
	}
	c := s.Client(t)
	if err := c.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	cfg, err := c.ConfigGet(t.Context(), "save").Result()
	if err != nil {
		t.Fatalf("CONFIG GET save: %v", err)
	}
	if cfg["save"] != "" {
		t.Errorf("save = %q, want persistence disabled", cfg["save"])
	}
}

func TestStartExtraArgs(t *testing.T) {
	s := Start(t, "--maxmemory", "10mb", "--appendonly", "yes")
	c := s.Client(t)
	tests := []struct{ param, want string }{
		{"maxmemory", "10485760"},
		{"appendonly", "yes"}, // extra args override the defaults
		{"bind", "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.param, func(t *testing.T) {
			got, err := c.ConfigGet(t.Context(), tt.param).Result()
			if err != nil {
				t.Fatalf("CONFIG GET %s: %v", tt.param, err)
			}
			if got[tt.param] != tt.want {
				t.Errorf("%s = %q, want %q", tt.param, got[tt.param], tt.want)
			}
		})
	}
}

func TestClientOptions(t *testing.T) {
	s := Start(t)
	c := s.Client(t, func(o *redis.Options) { o.ClientName = "redistest" })
	name, err := c.ClientGetName(t.Context()).Result()
	if err != nil || name != "redistest" {
		t.Fatalf("CLIENT GETNAME = %q, %v; want %q", name, err, "redistest")
	}
}

func TestKillRestart(t *testing.T) {
	s := Start(t)
	port := s.Port()
	c := s.Client(t, fastFail)
	if err := c.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	s.Kill(t)
	if err := c.Ping(t.Context()).Err(); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	s.Kill(t) // killing a dead server is a no-op

	s.Restart(t)
	if s.Port() != port {
		t.Fatalf("Port() after Restart = %d, want %d", s.Port(), port)
	}
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if n, err := c.Exists(t.Context(), "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k after Restart = %d, %v; want 0 (nothing persisted)", n, err)
	}

	s.Restart(t) // restarting a running server kills it first
	if err := s.Client(t).Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after second Restart: %v", err)
	}
}

func TestPauseResume(t *testing.T) {
	s := Start(t)
	c := s.Client(t, fastFail)
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}

	s.Pause(t)
	start := time.Now()
	err := c.Ping(t.Context()).Err()
	if err == nil {
		t.Fatal("PING on a paused server succeeded")
	}
	if !isTimeout(err) {
		t.Errorf("PING on a paused server: %v, want a timeout", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("PING failed after %v, want it to hang until the 300ms read timeout", d)
	}

	s.Resume(t)
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestKillPaused(t *testing.T) {
	s := Start(t)
	s.Pause(t)
	s.Kill(t) // SIGKILL ends a stopped process too
	s.Restart(t)
	if err := s.Client(t).Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

func TestStartReplica(t *testing.T) {
	m := Start(t)
	r1 := StartReplica(t, m)
	r2 := StartReplica(t, m) // a second replica waits for its own link

	if err := m.Client(t).Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET on master: %v", err)
	}
	for i, r := range []*Server{r1, r2} {
		c := r.Client(t)
		role, err := c.Do(t.Context(), "ROLE").Slice()
		if err != nil || len(role) == 0 || role[0] != "slave" {
			t.Fatalf("replica %d: ROLE = %v, %v; want slave", i, role, err)
		}
		waitFor(t, func() bool { return c.Get(t.Context(), "k").Val() == "v" })
	}
}

func TestStartMasters(t *testing.T) {
	servers := StartMasters(t, 3)
	if len(servers) != 3 {
		t.Fatalf("StartMasters(3) returned %d servers", len(servers))
	}
	ports := map[int]bool{}
	for _, s := range servers {
		ports[s.Port()] = true
		c := s.Client(t)
		role, err := c.Do(t.Context(), "ROLE").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			t.Fatalf("%s: ROLE = %v, %v; want master", s.Addr(), role, err)
		}
	}
	if len(ports) != 3 {
		t.Fatalf("ports %v are not distinct", ports)
	}
}

func TestStartConcurrent(t *testing.T) {
	// Many servers at once exercise the race for free ports.
	const n = 8
	servers := make([]*Server, n)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() {
			servers[i] = Start(t)
		})
	}
	wg.Wait()
	for _, s := range servers {
		if s == nil {
			t.Fatal("Start failed")
		}
		if err := s.Client(t).Ping(t.Context()).Err(); err != nil {
			t.Errorf("%s: PING: %v", s.Addr(), err)
		}
	}
}

func TestStartFailureIncludesLog(t *testing.T) {
	ft := &fakeTB{TB: t}
	ft.run(func() { Start(ft, "--no-such-option", "1") })
	if !ft.failed {
		t.Fatal("Start with a bad option did not fail the test")
	}
	if !strings.Contains(ft.msg, "server log") || !strings.Contains(ft.msg, "no-such-option") {
		t.Errorf("failure message lacks the server log:\n%s", ft.msg)
	}
}

func TestRequireBinary(t *testing.T) {
	if path := RequireBinary(t); path == "" {
		t.Fatal("RequireBinary returned an empty path")
	}

	t.Setenv("PATH", t.TempDir())
	tests := []struct {
		ci                  string
		wantSkip, wantFatal bool
	}{
		{ci: "", wantSkip: true},
		{ci: "true", wantFatal: true},
	}
	for _, tt := range tests {
		t.Run("CI="+tt.ci, func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			ft := &fakeTB{TB: t}
			ft.run(func() { RequireBinary(ft) })
			if ft.skipped != tt.wantSkip || ft.failed != tt.wantFatal {
				t.Fatalf("skipped=%v failed=%v, want skipped=%v failed=%v", ft.skipped, ft.failed, tt.wantSkip, tt.wantFatal)
			}
			if !strings.Contains(ft.msg, "redis-server not found") {
				t.Errorf("message %q does not say redis-server was not found", ft.msg)
			}
		})
	}
}

// fakeTB records Skip and Fatal instead of acting on them. Cleanups still
// go to the real test.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

// run calls f in a goroutine, so that Skipf and Fatalf can end it, and
// waits for it.
func (f *fakeTB) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// waitFor polls cond for up to 5s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition not met within 5s")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
