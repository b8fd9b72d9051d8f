// Package redistest starts real redis-server processes for tests.
//
// Every server listens on a free port of 127.0.0.1 (never 6379), keeps its
// files and log in its own t.TempDir(), persists nothing, and is killed and
// reaped when the test that started it ends. The redis-server binary is looked
// up on PATH; see RequireBinary for what happens when it is missing.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds how long a server may take to answer PING.
	readyTimeout = 10 * time.Second
	// exitTimeout bounds how long a killed server may take to be reaped.
	exitTimeout = 10 * time.Second
	// startAttempts is how many ports Start tries when another process wins
	// the race for a free port.
	startAttempts = 5
	// logTailLines is how much of the server log failure messages include.
	logTailLines = 40
	// infoTimeout bounds each request of the helpers that poll servers.
	infoTimeout = time.Second
)

// errPortInUse reports that redis-server could not bind its port.
var errPortInUse = errors.New("redistest: port in use")

// Server is a redis-server process started by Start. Its methods are safe
// for concurrent use. The process is killed and reaped when the test that
// started it ends.
type Server struct {
	bin  string
	dir  string
	log  string
	args []string // extra arguments, as passed to Start
	port int
	// conf, if set, is a config file that comes first on the command line,
	// and sentinel runs the server as a Sentinel (redis-server CONF
	// --sentinel), which rewrites that file as it learns the topology.
	conf     string
	sentinel bool
	// env is added to the process's environment (StartWithClock), and
	// reaped, if set, is called with the pid of each process once it has
	// exited.
	env    []string
	reaped func(pid int)

	mu     sync.Mutex
	proc   *process // current process; nil before the first start and after Kill
	paused bool     // stopped by Pause and not resumed
}

// process is one run of redis-server. Its reaper goroutine, started by
// launch and owned by the Server, waits on cmd and then closes done.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // result of cmd.Wait; valid once done is closed
}

// RequireBinary returns the path of redis-server from PATH. If it is
// missing, RequireBinary fails the test when the environment variable CI is
// "true" and skips it otherwise.
func RequireBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err == nil {
		return bin
	}
	const msg = "redis-server not found; run `make test` or apt-get install redis-server"
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true, so this is an error): %v", msg, err)
	}
	t.Skipf("%s: %v", msg, err)
	return ""
}

// Start launches a standalone redis-server on a free loopback port in its
// own t.TempDir() and waits until it answers PING. The command line is
//
//	--save "" --appendonly no --bind 127.0.0.1 --port N --dir <tmp>
//	--repl-diskless-sync-delay 0 <args>
//
// so args override the defaults (for example "--maxmemory", "10mb"); the
// sync delay lets replicas attach at once. If another process takes the
// free port first, Start retries on a new one, up to 5 times. If the server
// does not become ready within 10s, Start fails the test with the tail of
// the server's log. The server is killed and reaped in t.Cleanup.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return start(t, nil, args)
}

// start is Start with perAttempt, if not nil, called before each attempt
// for more arguments: ports of its own that a retry must pick afresh too.
func start(t testing.TB, perAttempt func() ([]string, error), args []string) *Server {
	t.Helper()
	s := newServer(t, args)
	s.run(t, perAttempt)
	return s
}

// newServer prepares a Server in its own t.TempDir(), not started yet,
// and registers its kill in t.Cleanup.
func newServer(t testing.TB, args []string) *Server {
	t.Helper()
	s := &Server{
		bin:  RequireBinary(t),
		dir:  t.TempDir(),
		args: append([]string(nil), args...),
	}
	s.log = filepath.Join(s.dir, "redis.log")
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.killLocked(); err != nil {
			t.Errorf("redistest: stop %s: %v", s.Addr(), err)
		}
	})
	return s
}

// run starts s on a free port, retrying on another one if a different
// process takes it first; see start for perAttempt.
func (s *Server) run(t testing.TB, perAttempt func() ([]string, error)) {
	t.Helper()
	args := s.args
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		if perAttempt != nil {
			extra, err := perAttempt()
			if err != nil {
				t.Fatalf("redistest: %v", err)
			}
			s.args = append(append([]string(nil), args...), extra...)
		}
		err = s.startOn(port)
		if err == nil {
			return
		}
		if !errors.Is(err, errPortInUse) || attempt == startAttempts {
			t.Fatalf("redistest: %v\n%s", err, s.logTail())
		}
	}
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the server's TCP port. It is fixed when Start returns and
// does not change across Restart.
func (s *Server) Port() int {
	return s.port
}

// Client returns a new go-redis client for the server, closed in
// t.Cleanup. Each opts function may modify the options before the client is
// created; Addr is preset.
func (s *Server) Client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr()}
	for _, opt := range opts {
		opt(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill sends SIGKILL to the server and waits for it to exit. Killing a
// server that is not running does nothing.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		t.Fatalf("redistest: kill %s: %v", s.Addr(), err)
	}
}

// Pause sends SIGSTOP to the server: it keeps its connections and its
// listening socket but answers nothing until Resume.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGSTOP, true)
}

// Resume sends SIGCONT to a server stopped by Pause.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGCONT, false)
}

// Running reports whether the server's process runs and is not paused: it
// was started and not killed since, or restarted, and not stopped by Pause
// without Resume. Cluster and Sentinel helpers ask only running nodes.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.paused
}

// Restart starts the server again on the same port and directory, with the
// same arguments, and waits until it answers PING. It is meant to follow
// Kill; if the server is still running, Restart kills it first. With the
// default arguments no data survives, since persistence is off.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		t.Fatalf("redistest: restart %s: %v", s.Addr(), err)
	}
	if err := s.startLocked(s.port); err != nil {
		t.Fatalf("redistest: restart: %v\n%s", err, s.logTail())
	}
}

// startOn sets the port and starts the server on it.
func (s *Server) startOn(port int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.port = port
	return s.startLocked(port)
}

// startLocked launches redis-server on port and waits until it is ready. On
// failure the process is killed and reaped. s.mu must be held.
func (s *Server) startLocked(port int) error {
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	if s.sentinel {
		args = append(args, "--sentinel")
	}
	args = append(args, []string{
		"--save", "",
		"--appendonly", "no",
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--dir", s.dir,
		"--repl-diskless-sync-delay", "0",
	}...)
	args = append(args, s.args...)
	var logStart int64
	if fi, err := os.Stat(s.log); err == nil {
		logStart = fi.Size()
	}
	p, err := launch(s.bin, s.log, args, s.env)
	if err != nil {
		return err
	}
	s.proc = p
	if err := waitReady(s.Addr(), p); err != nil {
		_ = s.killLocked()
		if s.logSince(logStart, "Address already in use") {
			return fmt.Errorf("%w: %v", errPortInUse, err)
		}
		return err
	}
	return nil
}

// killLocked kills the current process, if any, and waits for its reaper.
// s.mu must be held.
func (s *Server) killLocked() error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	s.paused = false
	// Signaling an exited process fails harmlessly with os.ErrProcessDone.
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		if s.reaped != nil {
			s.reaped(p.cmd.Process.Pid)
		}
		return nil
	case <-time.After(exitTimeout):
		return fmt.Errorf("pid %d did not exit within %v of SIGKILL", p.cmd.Process.Pid, exitTimeout)
	}
}

// signal sends sig to the server's process and records whether it is
// now paused.
func (s *Server) signal(t testing.TB, sig syscall.Signal, paused bool) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		t.Fatalf("redistest: %v %s: server is not running", sig, s.Addr())
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: %v %s: %v", sig, s.Addr(), err)
	}
	s.paused = paused
}

// logTail returns the last lines of the server log, for failure messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return "server log " + s.log + ":\n" + strings.Join(lines, "\n")
}

// logSince reports whether the server log contains substr after offset.
func (s *Server) logSince(offset int64, substr string) bool {
	b, err := os.ReadFile(s.log)
	if err != nil || int64(len(b)) < offset {
		return false
	}
	return strings.Contains(string(b[offset:]), substr)
}

// launch starts redis-server with stdout and stderr appended to logPath and
// env added to its environment, and a reaper goroutine that closes done
// when the process has exited.
func launch(bin, logPath string, args, env []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The child inherits the descriptor; ours is not needed after Start.
	defer logFile.Close()

	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = cmd.Wait()
	}()
	return p, nil
}

// waitReady polls addr until it answers PING as the server run by p, or
// until p exits or readyTimeout passes. It speaks RESP itself rather than use
// go-redis, whose pool keeps a dial-probe goroutine alive for a second after
// a refused connection.
func waitReady(addr string, p *process) error {
	deadline := time.After(readyTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	want := strconv.Itoa(p.cmd.Process.Pid)
	for {
		pid, err := probe(addr)
		if err == nil && pid == want {
			return nil
		}
		if err == nil {
			// Another process took the port before our server could.
			err = fmt.Errorf("process %s answers instead of %s", pid, want)
		}
		select {
		case <-p.done:
			return fmt.Errorf("redis-server on %s exited before it was ready: %v", addr, p.err)
		case <-deadline:
			return fmt.Errorf("redis-server on %s not ready after %v: %v", addr, readyTimeout, err)
		case <-tick.C:
		}
	}
}

// probe sends PING and INFO server to addr and returns the server's
// process_id once PING succeeds.
func probe(addr string) (pid string, err error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(conn, "PING\r\nINFO server\r\n"); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if line != "+PONG\r\n" {
		return "", fmt.Errorf("PING: %q", strings.TrimSpace(line)) // e.g. -LOADING
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if err != nil || !strings.HasPrefix(line, "$") {
		return "", fmt.Errorf("INFO: unexpected reply %q", strings.TrimSpace(line))
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(r, info); err != nil {
		return "", err
	}
	return infoField(string(info), "process_id"), nil
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago. It
// never returns 6379, the default port, to stay clear of real instances.
func freePort() (int, error) {
	for range 10 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if port != 6379 {
			return port, nil
		}
	}
	return 0, errors.New("find a free port: only got 6379")
}

// infoField returns the value of field in the output of INFO, or "".
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// infoClient returns a client for polling, which fails fast and never retries.
func infoClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         addr,
		Protocol:     2,
		MaxRetries:   -1,
		PoolSize:     1,
		DialTimeout:  infoTimeout,
		ReadTimeout:  infoTimeout,
		WriteTimeout: infoTimeout,
	})
}
