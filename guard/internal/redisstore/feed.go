package redisstore

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/guard/internal/clock"
	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/redis/go-redis/v9"
)

// feedIdle is how long a subscription connection may carry nothing before
// it is pinged, as go-redis's own channel does; a ping that is not
// answered within feedIdle more means the connection is dead without
// having been closed (half-open: a stateful firewall or NAT on the path
// lost its state), and the feed moves to a new one.
const feedIdle = 3 * time.Second

// feedRetry is the pause between two failed reads in a row (the server is
// down and go-redis cannot reconnect yet), as in go-redis's channel.
const feedRetry = 100 * time.Millisecond

// redisFeed is a subscription connection (SSUBSCRIBE on Cluster) that
// heals itself: go-redis reconnects one that fails and subscribes its
// channels again, and the feed replaces one that stops answering.
//
// It reads the connection itself instead of through go-redis's Channel,
// whose goroutine would read each message, wake its health check and hand
// the message over to the reader here: a release's grant reaches its
// waiter one goroutine switch sooner, and a hand-off is mostly that path.
// The read has no deadline: one that expired in the middle of a message
// would leave the rest of it to be parsed as a message of its own, and the
// message would be lost without an error. The idle check runs beside it
// instead (watch), and the reader only records when it last read.
type redisFeed struct {
	// open returns a new connection subscribed to channels: on Cluster it
	// connects to the node of their slot (all of a feed's channels share
	// one). With no channels it connects on its first subscription, or on
	// its first read: outside Cluster only, where every channel lives on
	// the one server.
	open    func(ctx context.Context, channels ...string) *redis.PubSub
	sharded bool

	mu       sync.Mutex
	ps       *redis.PubSub       // the current connection
	channels map[string]struct{} // subscribed by the caller, to subscribe again on a new connection

	clock     clock.Clock
	lastRead  atomic.Int64 // unix ns of the last reply read
	closeOnce sync.Once
	closed    chan struct{}
	wg        sync.WaitGroup // the watch goroutine and replacements' requests
}

// newRedisFeed returns a feed subscribed to channels (see open), and
// watching its connection.
func newRedisFeed(ctx context.Context, c clock.Clock, open func(ctx context.Context, channels ...string) *redis.PubSub, sharded bool, channels ...string) *redisFeed {
	f := &redisFeed{clock: c, open: open, sharded: sharded, ps: open(ctx, channels...), channels: make(map[string]struct{}), closed: make(chan struct{})}
	for _, ch := range channels {
		f.channels[ch] = struct{}{}
	}
	f.lastRead.Store(f.clock.Now().UnixNano())
	f.wg.Go(f.watch)
	return f
}

func (f *redisFeed) current() *redis.PubSub {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ps
}

func (f *redisFeed) Subscribe(ctx context.Context, channel string) error {
	f.mu.Lock()
	f.channels[channel] = struct{}{}
	ps := f.ps
	f.mu.Unlock()
	return subscribe(ctx, ps, f.sharded, channel)
}

func subscribe(ctx context.Context, ps *redis.PubSub, sharded bool, channels ...string) error {
	if sharded {
		return ps.SSubscribe(ctx, channels...)
	}
	return ps.Subscribe(ctx, channels...)
}

func (f *redisFeed) Unsubscribe(ctx context.Context, channel string) error {
	f.mu.Lock()
	delete(f.channels, channel)
	ps := f.ps
	f.mu.Unlock()
	if f.sharded {
		return ps.SUnsubscribe(ctx, channel)
	}
	return ps.Unsubscribe(ctx, channel)
}

// read receives until close, from whichever connection is current. The
// confirmations of the subscriptions a reconnection or a replacement makes
// reach confirmed like the first ones.
func (f *redisFeed) Read(ev store.FeedEvents) {
	ctx := context.Background()
	failed := 0
	for {
		ps := f.current()
		m, err := ps.Receive(ctx)
		switch {
		case f.isClosed():
			return
		case errors.Is(err, redis.ErrClosed) && f.current() != ps:
			continue // replaced: read the new connection
		case errors.Is(err, redis.ErrClosed):
			return // the client was closed under the Locker: nothing comes any more
		case err != nil:
			failed++
			if failed > 1 && !f.pause(feedRetry) {
				return
			}
			continue
		}
		failed = 0
		f.lastRead.Store(f.clock.Now().UnixNano())
		switch m := m.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				ev.Confirmed(m.Channel)
			case "sunsubscribe":
				// Also sent by Redis on its own when the channel's slot
				// leaves the node (a failover, a resharding); go-redis
				// keeps the connection, so nothing would come any more.
				ev.Dropped(m.Channel)
			}
		case *redis.Message:
			if n, ok := parseNotice(m.Payload); ok {
				ev.Notice(m.Channel, n)
			}
		}
	}
}

// watch pings the connection whenever it has read nothing for feedIdle,
// and replaces it when a ping is not answered within feedIdle more, until
// close. The reply comes back through read. A ping that cannot be written
// has go-redis reconnect at once; one that is written and never answered
// is what a half-open connection does, and only a new connection ends it.
func (f *redisFeed) watch() {
	t := f.clock.NewTimer(feedIdle / 6)
	defer t.Stop()
	var pinged time.Time // the unanswered ping, if any
	for {
		select {
		case <-t.C():
			t.Reset(feedIdle / 6)
		case <-f.closed:
			return
		}
		now := f.clock.Now()
		lastRead := time.Unix(0, f.lastRead.Load())
		switch {
		case !pinged.IsZero() && lastRead.Before(pinged) && now.Sub(pinged) >= feedIdle:
			pinged = time.Time{}
			f.replace()
		case !pinged.IsZero() && !lastRead.Before(pinged):
			pinged = time.Time{} // answered
		case pinged.IsZero() && now.Sub(lastRead) >= feedIdle:
			pinged = now
			ctx, cancel := context.WithTimeout(context.Background(), feedIdle)
			_ = f.current().Ping(ctx)
			cancel()
		}
	}
}

// replace moves the feed to a new connection, subscribed to its channels
// before the reader sees it (a Cluster connection without a channel would
// go to any node); the old one is closed, which ends its subscriptions on
// the server too. Channels subscribed meanwhile are subscribed again on the
// new connection.
func (f *redisFeed) replace() {
	f.mu.Lock()
	channels := slices.Collect(maps.Keys(f.channels))
	f.mu.Unlock()
	if f.sharded && len(channels) == 0 {
		return // nothing to hear; the shard is closing it
	}
	ctx, cancel := context.WithTimeout(context.Background(), feedIdle)
	defer cancel()
	ps := f.open(ctx, channels...) // go-redis subscribes them again on its next read if this failed

	f.mu.Lock()
	if f.isClosed() {
		f.mu.Unlock()
		_ = ps.Close()
		return
	}
	old := f.ps
	f.ps = ps
	var since []string
	for ch := range f.channels {
		if !slices.Contains(channels, ch) {
			since = append(since, ch)
		}
	}
	f.mu.Unlock()
	f.lastRead.Store(f.clock.Now().UnixNano())
	_ = old.Close()
	if len(since) > 0 {
		_ = subscribe(ctx, ps, f.sharded, since...)
	}
}

// pause waits d, or less if the feed is closed meanwhile; it reports
// whether the feed is still open.
func (f *redisFeed) pause(d time.Duration) bool {
	t := f.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-f.closed:
		return false
	}
}

func (f *redisFeed) isClosed() bool {
	select {
	case <-f.closed:
		return true
	default:
		return false
	}
}

// close closes the connection and waits for the watch goroutine. After it
// has marked the feed closed, replace opens no new connection.
func (f *redisFeed) Close() error {
	f.mu.Lock()
	f.closeOnce.Do(func() { close(f.closed) })
	ps := f.ps
	f.mu.Unlock()
	err := ps.Close()
	f.wg.Wait()
	if errors.Is(err, redis.ErrClosed) {
		err = nil
	}
	return err
}
