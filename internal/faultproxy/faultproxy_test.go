package faultproxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// setup starts a redis-server and a proxy in front of it.
func setup(t *testing.T) *Proxy {
	t.Helper()
	return New(t, redistest.Start(t).Addr())
}

// client returns a client that dials through p, never retries and gives up
// on a reply after 300ms.
func client(t *testing.T, p *Proxy) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:         p.Addr(),
		MaxRetries:   -1,
		DialTimeout:  time.Second,
		ReadTimeout:  300 * time.Millisecond,
		WriteTimeout: 300 * time.Millisecond,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestForward(t *testing.T) {
	p := setup(t)
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %q, want a 127.0.0.1 address", p.Addr())
	}
	c := client(t, p)
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING through proxy: %v", err)
	}

	// A value larger than many chunks and queues arrives intact.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	if err := c.Set(t.Context(), "big", big, 0).Err(); err != nil {
		t.Fatalf("SET big: %v", err)
	}
	got, err := c.Get(t.Context(), "big").Bytes()
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("GET big: %d bytes, %v; want the %d bytes sent", len(got), err, len(big))
	}
}

func TestLatency(t *testing.T) {
	p := setup(t)
	c := client(t, p)
	if err := c.Ping(t.Context()).Err(); err != nil { // connect first
		t.Fatalf("PING: %v", err)
	}

	p.SetLatency(50 * time.Millisecond)
	start := time.Now()
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING with latency: %v", err)
	}
	// Request and reply are each delayed.
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("PING took %v with 50ms latency each way, want >= 100ms", d)
	}

	// Pipelined commands keep their order under latency.
	pipe := c.Pipeline()
	incrs := make([]*redis.IntCmd, 100)
	for i := range incrs {
		incrs[i] = pipe.Incr(t.Context(), "n")
	}
	if _, err := pipe.Exec(t.Context()); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	for i, cmd := range incrs {
		if cmd.Val() != int64(i+1) {
			t.Fatalf("INCR %d = %d, want %d", i, cmd.Val(), i+1)
		}
	}

	p.SetLatency(0)
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING without latency: %v", err)
	}
}

func TestBlackhole(t *testing.T) {
	p := setup(t)
	c := client(t, p)
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}

	p.Blackhole(true)
	start := time.Now()
	err := c.Ping(t.Context()).Err()
	if !isTimeout(err) {
		t.Fatalf("PING in blackhole: %v, want a timeout", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("PING in blackhole failed after %v, want it to hang until the 300ms timeout", d)
	}
	// New connections are accepted but get no answer either.
	if err := client(t, p).Ping(t.Context()).Err(); !isTimeout(err) {
		t.Fatalf("PING on a new connection in blackhole: %v, want a timeout", err)
	}

	p.Blackhole(false)
	// go-redis dropped the timed-out connection, so this dials a fresh one.
	if err := c.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET after blackhole: %v", err)
	}
	if v, err := c.Get(t.Context(), "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET after blackhole = %q, %v; want %q", v, err, "v")
	}
}

func TestBlackholeKeepsConnectionOpen(t *testing.T) {
	p := setup(t)
	conn := dial(t, p)
	p.Blackhole(true)
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	// No reply, no EOF and no reset: the read just times out.
	_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := bufio.NewReader(conn).ReadString('\n'); !isTimeout(err) {
		t.Fatalf("read in blackhole: %v, want a timeout", err)
	}

	p.Blackhole(false)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	// The first PING was discarded, so exactly one reply comes back.
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("reply after blackhole = %q, %v; want +PONG", line, err)
	}
}

func TestFreeze(t *testing.T) {
	p := setup(t)
	frozen := dial(t, p)
	r := bufio.NewReader(frozen)
	if _, err := io.WriteString(frozen, "PING\r\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v", line, err)
	}

	p.Freeze()
	// The open connection is half-open: writes succeed, nothing comes back,
	// and it is neither closed nor reset.
	if _, err := io.WriteString(frozen, "PING\r\n"); err != nil {
		t.Fatalf("write to a frozen connection: %v", err)
	}
	_ = frozen.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := r.ReadString('\n'); !isTimeout(err) {
		t.Fatalf("read from a frozen connection: %v, want a timeout", err)
	}
	// A connection accepted after Freeze works.
	if err := client(t, p).Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING on a new connection after Freeze: %v", err)
	}
}

func TestCutAll(t *testing.T) {
	p := setup(t)
	conn := dial(t, p)
	r := bufio.NewReader(conn)
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v", line, err)
	}

	p.CutAll()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(conn, "PING\r\n")
	if _, err := r.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("read after CutAll: %v, want EOF or reset", err)
	}

	// A go-redis connection fails too, and the proxy still accepts.
	c := client(t, p)
	sticky := c.Conn()
	t.Cleanup(func() { _ = sticky.Close() })
	if err := sticky.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	p.CutAll()
	if err := sticky.Ping(t.Context()).Err(); err == nil {
		t.Fatal("PING on a cut connection succeeded")
	}
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING on a new connection after CutAll: %v", err)
	}
}

func TestCloseEndsConnections(t *testing.T) {
	target := redistest.Start(t).Addr()
	var conn net.Conn
	t.Run("proxy", func(t *testing.T) {
		p := New(t, target)
		p.SetLatency(time.Hour) // a chunk waits for delivery when the proxy closes
		conn = dial(t, p)
		if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
			t.Fatalf("write: %v", err)
		}
	})
	// The subtest's cleanup closed the proxy without waiting an hour.
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read after proxy closed: %v, want EOF or reset", err)
	}
}

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:6380", true},
		{"localhost:6380", true},
		{"[::1]:6380", true},
		{"10.0.0.1:6380", false},
		{"example.com:6380", false},
		{"127.0.0.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := isLoopback(tt.addr); got != tt.want {
				t.Errorf("isLoopback(%q) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
}

// dial opens a raw connection through p, closed in t.Cleanup.
func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
