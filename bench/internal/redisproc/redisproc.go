// Package redisproc starts and stops the throwaway redis-server each
// benchmark case runs against: on a free loopback port, without persistence,
// optionally pinned to one CPU with taskset.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// readyTimeout bounds how long Start waits for the server to answer PING.
const readyTimeout = 5 * time.Second

// Server is one redis-server process started by Start. Stop kills it.
type Server struct {
	addr string
	cmd  *exec.Cmd
	dir  string
	done chan struct{} // closed when the process has exited
}

// Start runs redis-server on a free port of 127.0.0.1 with
// "--save" "" "--appendonly" "no", in a temporary directory, and waits until it
// answers PING. With cpu >= 0 the server runs under `taskset -c cpu`. It
// never uses port 6379.
func Start(ctx context.Context, cpu int) (*Server, error) {
	var errs []error
	for range 3 { // a free port may be taken between probe and bind
		s, err := start(ctx, cpu)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func start(ctx context.Context, cpu int) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bench-redis-")
	if err != nil {
		return nil, err
	}
	args := []string{"redis-server",
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--logfile", "", "--loglevel", "warning"}
	if cpu >= 0 {
		args = append([]string{"taskset", "-c", strconv.Itoa(cpu)}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...) // taskset execs redis-server: one pid
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("redisproc: start %v: %w", args, err)
	}
	s := &Server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return nil, fmt.Errorf("redisproc: %s not ready: %w\n%s", s.addr, err, log.String())
	}
	return s, nil
}

// waitReady polls PING until the server answers, it exits, or readyTimeout.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return errors.New("redis-server exited")
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// FreePort returns a loopback port that was free a moment ago, never 6379.
func FreePort() (int, error) {
	for range 10 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port != 6379 {
			return port, nil
		}
	}
	return 0, errors.New("redisproc: no free port")
}

// Addr returns the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return s.addr }

// Pid returns the redis-server process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop kills the server, waits for it to exit and removes its directory.
// It is safe to call more than once.
func (s *Server) Stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
	_ = os.RemoveAll(s.dir)
}
