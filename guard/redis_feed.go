package guard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// feedIdle is how long a subscription connection may carry nothing before
// it is pinged, as go-redis's own channel does, so that a connection the
// server or a proxy reset is noticed (the ping's write fails) and replaced.
const feedIdle = 3 * time.Second

// feedRetry is the pause between two failed reads in a row (the server is
// down and go-redis cannot reconnect yet), as in go-redis's channel.
const feedRetry = 100 * time.Millisecond

// redisFeed is a PubSub connection; sharded (SSUBSCRIBE) on Cluster.
//
// It reads the connection itself instead of through go-redis's Channel,
// whose goroutine would read each message, wake its health check and hand
// the message over to the reader here: a release's grant reaches its
// waiter one goroutine switch sooner, and a hand-off is mostly that path.
// The read has no deadline: one that expired in the middle of a message
// would leave the rest of it to be parsed as a message of its own, and the
// message would be lost without an error. The idle check runs beside it
// instead (pingIdle), and the reader only records when it last read.
type redisFeed struct {
	ps        *redis.PubSub
	sharded   bool
	lastRead  atomic.Int64 // unix ns of the last reply read
	closeOnce sync.Once
	closed    chan struct{}
}

func newRedisFeed(ps *redis.PubSub, sharded bool) *redisFeed {
	f := &redisFeed{ps: ps, sharded: sharded, closed: make(chan struct{})}
	f.lastRead.Store(time.Now().UnixNano())
	return f
}

func (f *redisFeed) subscribe(ctx context.Context, channel string) error {
	if f.sharded {
		return f.ps.SSubscribe(ctx, channel)
	}
	return f.ps.Subscribe(ctx, channel)
}

func (f *redisFeed) unsubscribe(ctx context.Context, channel string) error {
	if f.sharded {
		return f.ps.SUnsubscribe(ctx, channel)
	}
	return f.ps.Unsubscribe(ctx, channel)
}

// read receives until close. go-redis reconnects a connection that fails
// and subscribes its channels again; the confirmations of those
// subscriptions reach confirmed like the first ones.
func (f *redisFeed) read(confirmed, dropped func(string), message func(channel, payload string)) {
	var pinger sync.WaitGroup
	pinger.Go(f.pingIdle)
	defer pinger.Wait()
	ctx := context.Background()
	failed := 0
	for {
		m, err := f.ps.Receive(ctx)
		switch {
		case errors.Is(err, redis.ErrClosed):
			return
		case err != nil:
			failed++
			if failed > 1 && !f.pause(feedRetry) {
				return
			}
			continue
		}
		failed = 0
		f.lastRead.Store(time.Now().UnixNano())
		switch m := m.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				confirmed(m.Channel)
			case "sunsubscribe":
				// Also sent by Redis on its own when the channel's slot
				// leaves the node (a failover, a resharding); go-redis
				// keeps the connection, so nothing would come any more.
				dropped(m.Channel)
			}
		case *redis.Message:
			message(m.Channel, m.Payload)
		}
	}
}

// pingIdle pings the connection whenever it has read nothing for feedIdle,
// until close. The reply comes back through read; a ping that cannot be
// written has go-redis reconnect, and read sees the new subscriptions.
func (f *redisFeed) pingIdle() {
	t := time.NewTicker(feedIdle / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-f.closed:
			return
		}
		if time.Since(time.Unix(0, f.lastRead.Load())) < feedIdle {
			continue
		}
		_ = f.ps.Ping(context.Background())
		f.lastRead.Store(time.Now().UnixNano()) // one ping per silent feedIdle
	}
}

// pause waits d, or less if the feed is closed meanwhile; it reports
// whether the feed is still open.
func (f *redisFeed) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-f.closed:
		return false
	}
}

func (f *redisFeed) close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	return f.ps.Close()
}
