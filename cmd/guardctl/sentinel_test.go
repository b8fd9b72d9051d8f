package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// startSentinel starts one Sentinel (redis-server --sentinel) that monitors
// master as "mymaster", with the master's password if it has one, and
// returns its address. It is killed when the test ends.
func startSentinel(t *testing.T, master *redistest.Server, password string) string {
	t.Helper()
	bin := redistest.RequireBinary(t)
	dir := t.TempDir()
	port := strconv.Itoa(freePort(t))
	conf := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster 127.0.0.1 %d 1\nsentinel down-after-milliseconds mymaster 60000\n",
		port, dir, master.Port())
	if password != "" {
		conf += "sentinel auth-pass mymaster " + password + "\n"
	}
	path := filepath.Join(dir, "sentinel.conf") // Sentinel rewrites it
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "sentinel.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, path, "--sentinel")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", port)
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer sc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := sc.GetMasterAddrByName(context.Background(), "mymaster").Result()
		if err == nil && len(got) == 2 && got[1] == strconv.Itoa(master.Port()) {
			return addr
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
			t.Fatalf("sentinel on %s not ready: %v, %v\n%s", addr, got, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// redis-sentinel:// asks the Sentinel for the master and authenticates to
// the master with the URL's password.
func TestSentinel(t *testing.T) {
	master := redistest.Start(t)
	// Set after the start: the harness checks readiness without a password.
	if err := master.Client(t).ConfigSet(t.Context(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	sentinel := startSentinel(t, master, "s3cret")
	client := master.Client(t, func(o *redis.Options) { o.Password = "s3cret" })
	l := newLocker(t, client, guard.WithIdentity("behind-sentinel"))
	le := acquire(t, t.Context(), l, "failover-safe")
	defer func() { _ = le.Release(context.Background()) }()

	r := must(t, 0, nil, "--url=redis-sentinel://:s3cret@"+sentinel+"/mymaster", "ls")
	if rows := table(r.stdout); len(rows) != 2 || rows[1][0] != "failover-safe" || rows[1][2] != "behind-sentinel" {
		t.Errorf("ls through Sentinel:\n%s", r.stdout)
	}
	// Another Sentinel that is down is skipped.
	down := closedPort(t)
	must(t, 0, nil, "--url=redis-sentinel://:s3cret@"+down+","+sentinel+"/mymaster", "show", "failover-safe")

	r = must(t, 2, nil, "--url=redis-sentinel://:wrong@"+sentinel+"/mymaster", "--timeout=2s", "show", "failover-safe")
	if strings.Contains(r.stderr, "wrong") || !strings.HasPrefix(r.stderr, "guardctl: ") {
		t.Errorf("wrong password: %q", r.stderr)
	}
	r = must(t, 2, nil, "--url=redis-sentinel://:s3cret@"+sentinel+"/nosuchmaster", "--timeout=2s", "show", "failover-safe")
	if !strings.HasPrefix(r.stderr, "guardctl: ") {
		t.Errorf("unknown master: %q", r.stderr)
	}
}
