// Package faultproxy is a TCP proxy that injects network faults between a
// client and a server in tests: latency, a partition and reset connections.
//
// A Proxy listens on 127.0.0.1 and forwards every connection it accepts to
// one target, which must also be a loopback address. Faults apply to all
// connections at once and can be changed at any time.
package faultproxy

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// dialTimeout bounds a dial to the target.
	dialTimeout = 5 * time.Second
	// chunkSize is the most a single read takes from a connection.
	chunkSize = 32 << 10
	// queueLen is how many chunks may wait for delivery per direction
	// before reading stops.
	queueLen = 64
)

// Proxy is a fault-injecting TCP proxy started by New. Its methods are safe
// for concurrent use. It is closed, with all its connections, when the test
// that started it ends.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // canceled by close; bounds dials to target
	cancel context.CancelFunc

	latency   atomic.Int64 // a time.Duration
	blackhole atomic.Bool

	mu     sync.Mutex
	links  map[*link]struct{}
	cuts   int // number of CutAll calls, to catch connections still dialing
	closed bool

	wg sync.WaitGroup // the accept loop and one serve per connection
}

// link is one proxied connection: the client's side and the target's side.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed by close
	frozen         atomic.Bool   // set by Freeze: drop everything, stay open
}

// chunk is a run of bytes read from one side, due on the other at due.
type chunk struct {
	data []byte
	due  time.Time
}

// New starts a proxy on a free port of 127.0.0.1 that forwards to target, a
// loopback "host:port". It starts with no latency and no blackhole. The
// proxy is closed in t.Cleanup: its listener and all connections are closed
// and all its goroutines have ended when the cleanup returns.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	if !isLoopback(target) {
		t.Fatalf("faultproxy: target %q is not a loopback address", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		links:  make(map[*link]struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr returns the address clients should dial, "127.0.0.1:port".
func (p *Proxy) Addr() string {
	return p.ln.Addr().String()
}

// SetLatency delays every chunk of bytes, in both directions, by d from the
// moment the proxy read it; a request and its reply therefore take 2*d more.
// Order is preserved, and throughput is not limited by the delay. A new
// latency applies to bytes read from then on. Default: 0.
func (p *Proxy) SetLatency(d time.Duration) {
	p.latency.Store(int64(d))
}

// Blackhole turns a network partition on or off. While on, the proxy
// silently discards every byte it reads or was about to deliver, in both
// directions; connections stay open and new ones are still accepted, so
// requests hang until the client's own timeout. When turned off, forwarding
// resumes for bytes read from then on; bytes discarded are lost. Default:
// off.
func (p *Proxy) Blackhole(on bool) {
	p.blackhole.Store(on)
}

// Freeze silently drops every byte of the connections open now, in both
// directions, for as long as they stay open, and keeps them open: a
// half-open connection, as when a stateful firewall or NAT on the path lost
// its state. Connections accepted later are not affected, so a client that
// gives up on a frozen connection and dials again gets through.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.frozen.Store(true)
	}
}

// CutAll closes every current connection: the client's side is reset (RST)
// and the target's side is closed. The proxy keeps accepting new
// connections.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts++
	for l := range p.links {
		l.abort()
	}
}

// close stops the proxy and waits for all its goroutines.
func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.cancel()
	_ = p.ln.Close()
	for l := range p.links {
		l.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// accept serves connections until the listener is closed.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the target for client and forwards both ways until both
// directions end or the link is closed.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	cuts := p.cutCount()
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}
	defer l.close()
	if !p.track(l, cuts) {
		l.abort()
		return
	}
	defer p.untrack(l)

	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(l, server, client) })
	wg.Go(func() { p.pipe(l, client, server) })
	wg.Wait()
}

func (p *Proxy) cutCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// track registers l, unless the proxy was closed or CutAll was called since
// the count cuts was taken.
func (p *Proxy) track(l *link, cuts int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.cuts != cuts {
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Proxy) untrack(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.links, l)
}

// pipe forwards src to dst: this goroutine reads and queues chunks, a second
// one delivers each when it is due. When src ends, the end is passed on to
// dst as a half-close once the queue is drained.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	q := make(chan chunk, queueLen)
	var wg sync.WaitGroup
	wg.Go(func() { p.deliver(l, dst, q) })
	p.read(l, src, q)
	wg.Wait()
}

// read queues what it reads from src until src fails or the link closes,
// then closes q.
func (p *Proxy) read(l *link, src net.Conn, q chan<- chunk) {
	defer close(q)
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.dropping(l) {
			c := chunk{data: bytes.Clone(buf[:n]), due: time.Now().Add(time.Duration(p.latency.Load()))}
			select {
			case q <- c:
			case <-l.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// deliver writes each chunk of q to dst when it is due, until q is closed
// and drained or the link closes.
func (p *Proxy) deliver(l *link, dst net.Conn, q <-chan chunk) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for c := range q {
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-l.done:
				return
			}
		}
		if p.dropping(l) {
			continue
		}
		if _, err := dst.Write(c.data); err != nil {
			l.close()
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// dropping reports whether bytes of l are to be discarded.
func (p *Proxy) dropping(l *link) bool {
	return p.blackhole.Load() || l.frozen.Load()
}

// close closes both sides of l; it may be called any number of times.
func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// abort closes l, resetting the client's side.
func (l *link) abort() {
	if tc, ok := l.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close with RST instead of FIN
	}
	l.close()
}

// isLoopback reports whether addr is "host:port" with a loopback host.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
