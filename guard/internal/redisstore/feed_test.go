package redisstore

import (
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// feedLog collects what a feed's reader reports.
type feedLog struct {
	mu        sync.Mutex
	confirmed int
	messages  []string
	changed   chan struct{}
}

func newFeedLog() *feedLog { return &feedLog{changed: make(chan struct{}, 1)} }

func (g *feedLog) confirm(string) { g.note(func() { g.confirmed++ }) }

// notice records the Locker a notice names: the tests publish "free
// <word>" and read the word back.
func (g *feedLog) notice(_ string, n store.Notice) {
	g.note(func() { g.messages = append(g.messages, n.Locker) })
}

// events is what the feed reports to the log.
func (g *feedLog) events() store.FeedEvents {
	return store.FeedEvents{Confirmed: g.confirm, Dropped: func(string) {}, Notice: g.notice}
}

// nothing is a feed's events that go nowhere.
var nothing = store.FeedEvents{Confirmed: func(string) {}, Dropped: func(string) {}, Notice: func(string, store.Notice) {}}

func (g *feedLog) note(f func()) {
	g.mu.Lock()
	f()
	g.mu.Unlock()
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// await waits until cond holds of the log.
func (g *feedLog) await(t *testing.T, what string, cond func(g *feedLog) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		g.mu.Lock()
		ok := cond(g)
		g.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-g.changed:
		case <-deadline:
			t.Fatalf("feed: no %s within 10s", what)
		}
	}
}

// startFeed opens a feed on channel through a store on addr and runs its
// reader until the test ends; done is closed when the reader returns.
func startFeed(t *testing.T, addr, channel string) (rf *redisFeed, log *feedLog, done <-chan struct{}) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = client.Close() })
	s := New(client, Options{})
	f, subscribed := s.OpenFeed(t.Context(), channel)
	rf = f.(*redisFeed)
	if !subscribed {
		if err := rf.Subscribe(t.Context(), channel); err != nil {
			t.Fatal(err)
		}
	}
	log = newFeedLog()
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		rf.Read(log.events())
	}()
	t.Cleanup(func() {
		_ = rf.Close()
		<-exited
	})
	return rf, log, exited
}

// A subscription that carries nothing for feedIdle is pinged, and still
// delivers afterwards: the reader's own health check (go-redis's channel,
// which did it before, is not used).
func TestFeedPingsWhenIdle(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	_, log, _ := startFeed(t, srv.Addr(), "feed-idle")
	log.await(t, "subscription", func(g *feedLog) bool { return g.confirmed == 1 })
	pingsBefore := commandCalls(t, admin, "ping")
	time.Sleep(feedIdle + feedIdle/2)
	if got := commandCalls(t, admin, "ping") - pingsBefore; got < 1 {
		t.Fatalf("%d pings after %v of silence, want at least 1", got, feedIdle+feedIdle/2)
	}
	if err := admin.Publish(t.Context(), "feed-idle", "free after-ping").Err(); err != nil {
		t.Fatal(err)
	}
	log.await(t, "message after the ping", func(g *feedLog) bool {
		return len(g.messages) == 1 && g.messages[0] == "after-ping"
	})
}

// A message that arrives in two parts, far apart, is still delivered whole:
// the reader has no read deadline that could expire between the parts and
// leave the rest of the message to be parsed as one of its own.
func TestFeedMessageSplitAcrossIdle(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	proxy := newSplittingProxy(t, srv.Addr(), "split-1", feedIdle+feedIdle/3)
	_, log, _ := startFeed(t, proxy, "feed-split")
	log.await(t, "subscription", func(g *feedLog) bool { return g.confirmed == 1 })
	for _, payload := range []string{"split-1", "after"} {
		if err := admin.Publish(t.Context(), "feed-split", "free "+payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
	log.await(t, "both messages", func(g *feedLog) bool { return len(g.messages) == 2 })
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.messages[0] != "split-1" || log.messages[1] != "after" || log.confirmed != 1 {
		t.Fatalf("messages %q, %d confirmations; want split-1, after and one confirmation", log.messages, log.confirmed)
	}
}

// newSplittingProxy relays one client connection to addr and back, except
// that a chunk from the server containing marker is sent in two halves
// with gap between them. It returns the proxy's address.
func newSplittingProxy(t *testing.T, addr, marker string, gap time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", addr)
			if err != nil {
				_ = client.Close()
				return
			}
			track(client)
			track(server)
			wg.Go(func() { _, _ = io.Copy(server, client) })
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := server.Read(buf)
					if err != nil {
						return
					}
					chunk := buf[:n]
					if i := strings.Index(string(chunk), marker); i >= 0 {
						if _, err := client.Write(chunk[:i]); err != nil {
							return
						}
						time.Sleep(gap)
						chunk = chunk[i:]
					}
					if _, err := client.Write(chunk); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// A cut connection is replaced and its channels subscribed again; the new
// confirmation is reported, so that waiters can retry in case a release was
// missed, and messages flow again.
func TestFeedResubscribesAfterCut(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	admin := srv.Client(t)
	_, log, _ := startFeed(t, proxy.Addr(), "feed-cut")
	log.await(t, "subscription", func(g *feedLog) bool { return g.confirmed == 1 })
	proxy.CutAll()
	log.await(t, "second confirmation", func(g *feedLog) bool { return g.confirmed >= 2 })
	if err := admin.Publish(t.Context(), "feed-cut", "free after-cut").Err(); err != nil {
		t.Fatal(err)
	}
	log.await(t, "message after the cut", func(g *feedLog) bool {
		return len(g.messages) == 1 && g.messages[0] == "after-cut"
	})
}

// A connection that goes silent without being closed (half-open: a
// firewall on the path lost its state) is noticed by an unanswered ping and
// replaced; the new connection's confirmation is reported, and messages
// flow again.
func TestFeedReplacesSilentConnection(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	admin := srv.Client(t)
	_, log, _ := startFeed(t, proxy.Addr(), "feed-silent")
	log.await(t, "subscription", func(g *feedLog) bool { return g.confirmed == 1 })
	proxy.Freeze()
	frozen := time.Now()
	log.await(t, "confirmation on a new connection", func(g *feedLog) bool { return g.confirmed >= 2 })
	// Idle for feedIdle, then a ping unanswered for feedIdle, each checked
	// every feedIdle/6.
	if d := time.Since(frozen); d > 2*feedIdle+feedIdle {
		t.Errorf("replaced %v after the connection went silent, want within %v", d, 3*feedIdle)
	}
	if err := admin.Publish(t.Context(), "feed-silent", "free after").Err(); err != nil {
		t.Fatal(err)
	}
	log.await(t, "message on the new connection", func(g *feedLog) bool {
		return len(g.messages) == 1 && g.messages[0] == "after"
	})
}

// A feed whose client is closed under it (by its owner, before the
// Locker) stops reading, rather than reading a closed client in a loop.
func TestFeedStopsWhenItsClientIsClosed(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	s := New(client, Options{})
	f, _ := s.OpenFeed(t.Context(), "feed-client-closed")
	rf := f.(*redisFeed)
	if err := rf.Subscribe(t.Context(), "feed-client-closed"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rf.Read(nothing)
	}()
	defer func() { _ = rf.Close() }()
	time.Sleep(50 * time.Millisecond)
	_ = rf.current().Close() // what closing the client does to its PubSubs
	_ = client.Close()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the reader still reads 2s after its client was closed")
	}
}

// A Cluster feed is opened subscribed, so it connects to the node that
// serves its channel's slot: opened bare, its reader would connect it to
// any node, where a subscription would get MOVED and hear nothing.
func TestClusterFeedConnectsToItsSlot(t *testing.T) {
	c := redistest.StartCluster(t)
	client := c.Client(t)
	s := New(client, Options{})
	for i := range 12 {
		channel := "guard:{feed-" + strconv.Itoa(i) + "}:released"
		f, subscribed := s.OpenFeed(t.Context(), channel)
		if !subscribed {
			t.Fatal("a Cluster feed opened without its channel")
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.Read(nothing)
		}()
		master := c.MasterOf(t, channel).Client(t)
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err := master.PubSubShardNumSub(t.Context(), channel).Result()
			if err == nil && n[channel] == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v subscribers on the slot's master after 5s (%v)", channel, n, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = f.Close()
		<-done
	}
}

// A feed whose server is gone keeps retrying at feedRetry, not in a tight
// loop, and its reader returns at once when it is closed.
func TestFeedCloseWhileServerDown(t *testing.T) {
	srv := redistest.Start(t)
	rf, log, done := startFeed(t, srv.Addr(), "feed-down")
	log.await(t, "subscription", func(g *feedLog) bool { return g.confirmed == 1 })
	srv.Kill(t)
	time.Sleep(3 * feedRetry)
	start := time.Now()
	if err := rf.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the reader still runs 5s after close")
	}
	// It must not wait out its retry pause, let alone a dial timeout.
	if d := time.Since(start); d >= feedRetry {
		t.Fatalf("the reader returned %v after close", d)
	}
}

// commandCalls returns how many times the server ran command, by INFO
// commandstats.
func commandCalls(t *testing.T, c *redis.Client, command string) int {
	t.Helper()
	stats, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	prefix := "cmdstat_" + command + ":calls="
	for line := range strings.Lines(stats) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			digits, _, _ := strings.Cut(rest, ",")
			n, err := strconv.Atoi(digits)
			if err != nil {
				t.Fatalf("commandstats line %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}
