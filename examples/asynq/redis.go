package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// connect returns the options of the Redis in REDIS_URL or, when REDIS_URL
// is unset, of a redis-server it starts on a free loopback port (asynq's
// Lua scripts need a real Redis). stop stops that server; call it after
// closing every client.
func connect(ctx context.Context) (opts *redis.Options, stop func(), err error) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		if err := waitReady(ctx, opts, nil); err != nil {
			return nil, nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		return opts, func() {}, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, nil, errors.New("REDIS_URL is unset and no redis-server is installed; asynq needs a real Redis: " +
			"set REDIS_URL (for example REDIS_URL=redis://127.0.0.1:6379/15) or install redis-server")
	}
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "asynqguard-example-")
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = os.RemoveAll(dir)
	}
	opts = &redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	if err := waitReady(ctx, opts, exited); err != nil {
		stop()
		return nil, nil, err
	}
	return opts, stop, nil
}

// waitReady waits up to 5s for the server to answer PING, or until exited
// (which may be nil) is closed.
func waitReady(ctx context.Context, opts *redis.Options, exited <-chan struct{}) error {
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited: %w", opts.Addr, err)
		case <-ctx.Done():
			return fmt.Errorf("redis at %s not ready within 5s: %w", opts.Addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
