package guard

import (
	"context"
	"time"
)

// shard is one subscription connection and the channels subscribed on it.
type shard struct {
	feed     feed
	slot     int
	node     string // where the slot was served when feed was opened ("" outside Cluster)
	channels map[string]struct{}
}

func (n *notifier) subscribe(ctx context.Context, channel string, st *channelState) error {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	sh, subscribed, err := n.shardFor(ctx, channel)
	if err != nil {
		return err
	}
	sh.channels[channel] = struct{}{}
	n.mu.Lock()
	st.shard = sh
	n.mu.Unlock()
	if subscribed {
		return nil
	}
	_, err = await(ctx, n.l, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, sh.feed.subscribe(ctx, channel)
	}, nil)
	return err
}

// shardFor returns the subscription connection for channel, creating it and
// its reader on first use; subscribed reports that creating it subscribed
// channel already. Called with subMu held.
//
// On Cluster there is one connection per hash slot with waiters, not one
// per master: when a connection drops, go-redis resubscribes all its
// channels in a single SSUBSCRIBE, which Redis rejects with CROSSSLOT
// unless they share a slot, and the waiters would then hear nothing more.
// A slot's connection also follows the slot to a new master on reconnect.
// It is closed when its last channel's waiters leave (stopWaiting), so a
// Locker keeps as many as it has slots waited on, no more.
func (n *notifier) shardFor(ctx context.Context, channel string) (sh *shard, subscribed bool, err error) {
	slot := n.l.store.feedSlot(channel)
	if sh := n.subs[slot]; sh != nil {
		return sh, false, nil
	}
	if n.l.isClosed() {
		return nil, false, ErrClosed
	}
	node := n.l.store.renewalGroup(ctx, channel)
	f, subscribed := n.l.store.openFeed(ctx, channel)
	sh = &shard{feed: f, slot: slot, node: node, channels: make(map[string]struct{})}
	n.subs[slot] = sh
	n.wg.Go(func() { f.read(n.confirmed, n.dropped, n.released) })
	return sh, subscribed, nil
}

// unsubscribe drops channel from sh, closing sh instead when it is a
// slot's own connection and channel was its last. Called with subMu
// held.
func (n *notifier) unsubscribe(ctx context.Context, sh *shard, channel string) {
	delete(sh.channels, channel)
	switch {
	case sh.slot == noSlot || len(sh.channels) > 0:
		_ = sh.feed.unsubscribe(ctx, channel)
	case n.subs[sh.slot] == sh:
		// Closing the connection ends the subscription on the server too,
		// and the reader returns once go-redis closes its channel.
		delete(n.subs, sh.slot)
		_ = sh.feed.close()
	}
}

// dropped runs when the server confirms that channel was unsubscribed. If
// its waiters are still there, guard did not ask for it: Redis dropped the
// subscription because the channel's slot left the node (a manual
// CLUSTER FAILOVER, a resharding) and no release would reach them. The
// waiters are woken, since one may have been missed, and their slot's
// connection is replaced by one to the slot's current node, off the
// reader's goroutine.
func (n *notifier) dropped(channel string) {
	n.mu.Lock()
	st := n.chans[channel]
	if st == nil || len(st.waiters) == 0 || st.shard == nil {
		n.mu.Unlock()
		return
	}
	old := st.shard
	for _, w := range st.waiters {
		w.wake()
	}
	n.mu.Unlock()
	n.l.runner.start(func() { n.replace(old) })
}

// replace closes the subscription connection old and subscribes its
// channels that still have waiters on a new one.
func (n *notifier) replace(old *shard) {
	n.subMu.Lock()
	if n.subs[old.slot] != old || n.l.isClosed() {
		n.subMu.Unlock()
		return
	}
	delete(n.subs, old.slot)
	_ = old.feed.close()
	channels := make([]string, 0, len(old.channels))
	for ch := range old.channels {
		channels = append(channels, ch)
	}
	n.subMu.Unlock()
	// The new connection must go to the slot's new node. A slot map
	// reloaded from a node that has not heard of the move yet still names
	// the old one, which (a demoted master) the new master may not count
	// in its shard yet: releases published meanwhile would not reach it.
	ctx, cancel := context.WithTimeout(context.Background(), n.l.cfg.requestTimeout)
	defer cancel()
	for len(channels) > 0 && ctx.Err() == nil {
		n.l.store.refresh(ctx)
		if n.l.store.renewalGroup(ctx, channels[0]) != old.node {
			break
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-n.l.closed:
			t.Stop()
			return
		}
	}
	for _, ch := range channels {
		n.mu.Lock()
		st := n.chans[ch]
		n.mu.Unlock()
		if st == nil {
			continue
		}
		if err := n.subscribe(ctx, ch, st); err != nil {
			n.l.log.Warn("guard: resubscribe failed; waiting on the key's TTL", "channel", ch, "err", err)
		}
	}
}
