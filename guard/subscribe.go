package guard

import "context"

// shard is one subscription connection and the channels subscribed on it.
type shard struct {
	feed     feed
	slot     int
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
	f, subscribed := n.l.store.openFeed(ctx, channel)
	sh = &shard{feed: f, slot: slot, channels: make(map[string]struct{})}
	n.subs[slot] = sh
	n.wg.Go(func() { f.read(n.confirmed, n.released) })
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
