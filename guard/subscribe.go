package guard

import (
	"context"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
)

// shard is one subscription connection and the channels its waiters want
// on it: one per Locker outside Cluster (noSlot), one per hash slot with
// waiters on Cluster. Its worker (serve) makes the connection's
// subscriptions follow what is wanted, one request at a time and with no
// lock held across a request: a waiter only records what it wants and
// waits for the subscription no longer than its context allows, so a
// connection that is slow to open holds up nobody's call.
type shard struct {
	slot int
	kick chan struct{} // wakes the worker: want or stale changed

	// Guarded by the notifier's mu.
	want  map[string]*channelState // channels with waiters, each wanted for its state
	stale bool                     // the connection must be replaced (its slot moved)
	feed  store.Feed               // the connection now, nil while there is none
	// unsubscribing counts the unsubscriptions of each channel asked for
	// on feed and not yet confirmed: their confirmations are not drops
	// (see notifier.dropped).
	unsubscribing map[string]int
}

// shardLocked returns the shard of slot, starting it if it has none; n.mu
// is held.
func (n *notifier) shardLocked(slot int) *shard {
	sh := n.shards[slot]
	if sh == nil {
		sh = &shard{slot: slot, kick: make(chan struct{}, 1), want: make(map[string]*channelState), unsubscribing: make(map[string]int)}
		n.shards[slot] = sh
		n.wg.Go(func() { n.serve(sh) })
	}
	return sh
}

// subscription is what the worker does next, decided under n.mu.
type subscription struct {
	replace   bool
	subscribe []*channelState
	drop      []string
	exit      bool
}

// serve runs sh's connection until the Locker closes or, for a Cluster
// slot's shard, until no waiter wants any of its channels.
func (n *notifier) serve(sh *shard) {
	var f store.Feed
	var node string // where f was opened: the slot's master on Cluster
	have := make(map[string]*channelState)
	setFeed := func(to store.Feed) {
		n.mu.Lock()
		sh.feed = to
		clear(sh.unsubscribing) // confirmations of the old one no longer come
		n.mu.Unlock()
		f = to
	}
	defer func() {
		if f != nil {
			_ = f.Close()
		}
	}()
	for {
		n.mu.Lock()
		next := n.nextLocked(sh, f != nil, have)
		n.mu.Unlock()
		switch {
		case next.exit:
			return
		case next.replace:
			old := f
			setFeed(nil)
			_ = old.Close()
			clear(have)
			n.awaitMove(sh, node)
			continue
		case len(next.subscribe) == 0 && len(next.drop) == 0:
			select {
			case <-sh.kick:
			case <-n.life.Done():
			}
			continue
		}
		subscribe := next.subscribe
		if f == nil {
			opened, at, subscribed := n.open(subscribe[0].channel)
			setFeed(opened)
			n.read(sh, opened)
			node = at
			if subscribed {
				have[subscribe[0].channel] = subscribe[0]
				subscribe = subscribe[1:]
			}
		}
		for _, st := range subscribe {
			n.request(func(ctx context.Context) error { return f.Subscribe(ctx, st.channel) })
			// go-redis keeps the channel and subscribes it again on its
			// next connection should this request fail: the waiters
			// wait on their timers meanwhile.
			have[st.channel] = st
		}
		for _, channel := range next.drop {
			if err := n.request(func(ctx context.Context) error { return f.Unsubscribe(ctx, channel) }); err != nil {
				n.unsubscribed(sh, channel) // no confirmation comes for a request that failed
			}
			delete(have, channel)
		}
	}
}

// nextLocked decides the worker's next step from what is wanted and what
// the connection has (open tells whether it is); n.mu is held.
func (n *notifier) nextLocked(sh *shard, open bool, have map[string]*channelState) subscription {
	if n.closed {
		return subscription{exit: true}
	}
	if sh.stale {
		sh.stale = false
		if open {
			return subscription{replace: true}
		}
	}
	if len(sh.want) == 0 && sh.slot != store.NoSlot {
		// A Cluster slot's connection is closed when its waiters are gone
		// (serve's deferred close ends its subscriptions on the server). A
		// waiter that comes later starts a shard of its own.
		delete(n.shards, sh.slot)
		return subscription{exit: true}
	}
	var next subscription
	for channel, st := range sh.want {
		if have[channel] != st {
			// A new state for a channel subscribed before is subscribed
			// again: its confirmation is what marks it live.
			next.subscribe = append(next.subscribe, st)
		}
	}
	for channel := range have {
		if _, ok := sh.want[channel]; ok {
			continue
		}
		if sh.slot != store.NoSlot {
			sh.unsubscribing[channel]++
		}
		next.drop = append(next.drop, channel)
	}
	return next
}

// open opens a connection for channel's slot: subscribed to channel if
// subscribed (on Cluster, where a connection goes to the node of its first
// channel). It returns the node it was opened for (the slot's master on
// Cluster, "" elsewhere).
func (n *notifier) open(channel string) (f store.Feed, node string, subscribed bool) {
	ctx, cancel := context.WithTimeout(n.life, n.l.cfg.requestTimeout)
	defer cancel()
	node = n.l.store.RenewalGroup(ctx, channel)
	f, subscribed = n.l.store.OpenFeed(ctx, channel)
	return f, node, subscribed
}

// read starts the reader of f, sh's connection, until f is closed.
func (n *notifier) read(sh *shard, f store.Feed) {
	dropped := func(channel string) { n.dropped(sh, f, channel) }
	n.wg.Go(func() { f.Read(store.FeedEvents{Confirmed: n.confirmed, Dropped: dropped, Notice: n.released}) })
}

// request runs one subscription request, bounded by the request timeout
// and by Close, and returns its error.
func (n *notifier) request(do func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(n.life, n.l.cfg.requestTimeout)
	defer cancel()
	err := do(ctx)
	if err != nil && n.life.Err() == nil {
		n.l.log.Warn("guard: subscription request failed; waiting on the key's TTL meanwhile", "err", err)
	}
	return err
}

// awaitMove waits, after a Cluster slot's connection was dropped, until the
// client's slot map names another master than node for the slot, so the
// new connection goes to where the slot is now: a map reloaded from a node
// that has not heard of the move yet still names the old one, which (a
// demoted master) the new master may not count in its shard yet, and
// releases published meanwhile would not reach it. Bounded by the request
// timeout and by Close.
func (n *notifier) awaitMove(sh *shard, node string) {
	n.mu.Lock()
	var channel string
	for ch := range sh.want {
		channel = ch
		break
	}
	n.mu.Unlock()
	if channel == "" || node == "" {
		return
	}
	ctx, cancel := context.WithTimeout(n.life, n.l.cfg.requestTimeout)
	defer cancel()
	for ctx.Err() == nil {
		n.l.store.Refresh(ctx)
		if n.l.store.RenewalGroup(ctx, channel) != node {
			return
		}
		t := n.l.clock.NewTimer(50 * time.Millisecond)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
		}
	}
}
