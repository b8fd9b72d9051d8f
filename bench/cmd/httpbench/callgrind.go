package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jobguard/jobguard/bench/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// The server's instructions per request, as cmd/servercost counts them
// per acquire+release: redis-server runs under valgrind's callgrind with
// instrumentation off; after a warm-up the idle cost (its cron) is sampled,
// then n sequential requests with fresh keys are counted, and a few
// seconds after them, so that the keys they leave to expire within that
// time (guard's release markers) are deleted inside the window. The count,
// less the idle cost scaled to the window, over n, is the figure. Keys kept
// longer (httpguard's stored responses and fencing counters, for
// Retention) are not deleted in the window.

const (
	idleWindow = 5 * time.Second
	// settle outlasts guard's release marker: twice the request timeout,
	// TTL/10 for the default TTL of 30s.
	settle = 7 * time.Second
)

// serverInstructions prints the instructions per request of the variants
// that use Redis, each on a server of its own.
func serverInstructions(n int, annotate string) error {
	for _, tool := range []string{"valgrind", "callgrind_control", "redis-server"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is needed: %w", tool, err)
		}
	}
	fmt.Printf("redis-server instructions (callgrind Ir) per request with a fresh Idempotency-Key, %d sequential requests\n", n)
	perOp := make(map[string]float64)
	for _, name := range []string{"redislock", "httpguard"} {
		ir, err := countVariant(name, n, annotate)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		perOp[name] = ir
		fmt.Printf("%-10s %12.0f\n", name, ir)
	}
	fmt.Printf("httpguard / redislock: %.2f\n", perOp["httpguard"]/perOp["redislock"])
	return nil
}

// countVariant counts variant name's instructions per request.
func countVariant(name string, n int, annotate string) (float64, error) {
	dir, err := os.MkdirTemp("", "httpbench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	srv, err := startCallgrind(dir)
	if err != nil {
		return 0, err
	}
	defer srv.kill()
	svc, err := newService(srv.addr, 4, 1)
	if err != nil {
		return 0, err
	}
	defer svc.close()
	var v variant
	for _, x := range svc.variants {
		if x.name == name {
			v = x
		}
	}
	send := func(prefix string, count int) error {
		for i := range count {
			if err := post(svc.client, svc.url(v), prefix+strconv.Itoa(i)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := send("warm-", 50); err != nil {
		return 0, err
	}
	time.Sleep(settle) // the warm-up's expiring keys are gone
	if err := srv.control("-i", "on"); err != nil {
		return 0, err
	}
	idleStart := time.Now()
	time.Sleep(idleWindow)
	if err := srv.control("-i", "off"); err != nil {
		return 0, err
	}
	idleTook := time.Since(idleStart)
	idle, err := srv.dump()
	if err != nil {
		return 0, err
	}
	if err := srv.control("-i", "on"); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := send("k-", n); err != nil {
		return 0, err
	}
	time.Sleep(settle)
	took := time.Since(start)
	if err := srv.control("-i", "off"); err != nil {
		return 0, err
	}
	window, err := srv.dump()
	if err != nil {
		return 0, err
	}
	if annotate != "" {
		if err := srv.annotate(filepath.Join(annotate, name+".txt")); err != nil {
			return 0, err
		}
	}
	scaled := float64(idle) * float64(took) / float64(idleTook)
	return (float64(window) - scaled) / float64(n), nil
}

// callgrindServer is one redis-server under callgrind.
type callgrindServer struct {
	addr, out string
	cmd       *exec.Cmd
	dumps     int
}

func startCallgrind(dir string) (*callgrindServer, error) {
	port, err := redisproc.FreePort()
	if err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "callgrind.out")
	cmd := exec.Command("valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file="+out,
		"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &callgrindServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), out: out, cmd: cmd}
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second) // valgrind starts slowly
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			s.kill()
			return nil, errors.New("redis-server under valgrind did not answer PING within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s, nil
}

func (s *callgrindServer) control(args ...string) error {
	args = append(args, strconv.Itoa(s.cmd.Process.Pid))
	if out, err := exec.Command("callgrind_control", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control %v: %w: %s", args, err, out)
	}
	return nil
}

// dump has callgrind write its counts since the last dump, which zeroes
// them, and returns their total.
func (s *callgrindServer) dump() (int64, error) {
	if err := s.control("-d"); err != nil {
		return 0, err
	}
	s.dumps++
	f, err := os.Open(fmt.Sprintf("%s.%d", s.out, s.dumps))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "totals: "); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no totals in callgrind's dump")
}

// annotate writes callgrind_annotate's inclusive listing of the latest
// dump to path.
func (s *callgrindServer) annotate(path string) error {
	out, err := exec.Command("callgrind_annotate", "--inclusive=yes", fmt.Sprintf("%s.%d", s.out, s.dumps)).Output()
	if err != nil {
		return fmt.Errorf("callgrind_annotate: %w", err)
	}
	return os.WriteFile(path, out, 0o644)
}

func (s *callgrindServer) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
}
