package guard

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// notifier turns release messages into wake-ups for waiting acquisitions.
// A Locker has one subscription connection, shared by every waiter; on
// Cluster it has one per hash slot that has waiters (sharded pub/sub), see
// shardFor. Waiters on a channel queue in order. An acquisition that waits
// registers in the lock's queue (acquire.lua), and a release that frees the
// key grants it to the oldest registered writer (set_counts.lua): the
// message carries the grant, so a hand-off costs no retry at all. A release
// that cannot grant (a reader is oldest, the key is still held, the writer
// waits for replica acks) names the Locker of the oldest registration: that
// Locker wakes its first waiter, the others stay asleep, so a hand-off costs
// one retry in the whole fleet. If the named Locker does not take the key
// within handOffGrace (it crashed, or its waiters just left), the others
// wake their first waiter too. A reader at the head wakes the readers
// behind it.
type notifier struct {
	l     *Locker
	mu    sync.Mutex
	chans map[string]*channelState
	subMu sync.Mutex     // orders SUBSCRIBE/UNSUBSCRIBE of one channel; guards subs and shards' channels
	subs  map[int]*shard // by hash slot on Cluster; one, under noSlot, outside it
	wg    sync.WaitGroup
}

type channelState struct {
	channel string
	keys    keys
	shard   *shard
	backup  *time.Timer   // wakes the first waiter if the named Locker does not act
	ready   chan struct{} // closed when the server confirmed the subscription
	live    bool          // confirmed at least once
	seq     uint64        // messages and resubscriptions seen
	waiters []*waiter
}

// mark is what a waiter knew of a channel before an attempt.
type mark struct {
	st  *channelState
	seq uint64
}

// mark records the channel's state before an acquisition attempt.
func (n *notifier) mark(channel string) mark {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.chans[channel]
	if st == nil || !st.live {
		return mark{}
	}
	return mark{st: st, seq: st.seq}
}

// quietSince reports whether the channel was subscribed before m was taken
// and has carried nothing since. Then a waiter that joined after a failed
// attempt need not try again at once: a release after the attempt was
// delivered to a waiter of this Locker that will act on it, or will be
// delivered with this waiter already in the queue.
func (n *notifier) quietSince(m mark) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return m.st != nil && n.chans[m.st.channel] == m.st && m.st.seq == m.seq
}

// handOffGrace is how long a Locker that was not named in a release waits
// for the named one to take the key before its own first waiter tries.
const handOffGrace = 50 * time.Millisecond

// waiter is one acquisition waiting for a key.
type waiter struct {
	n        *notifier
	channel  string
	write    bool
	owner    string        // the acquisition's owner id, to which a release may grant the key
	granted  atomic.Int64  // the token of a grant; 0 while none came
	C        chan struct{} // a wake-up: try again, or take the grant
	acquired bool
	// woken is set when a wake-up was taken from C and no attempt has been
	// answered since: if the waiter leaves then, the wake-up goes on.
	woken bool
}

func newNotifier(l *Locker) *notifier {
	return &notifier{l: l, chans: make(map[string]*channelState), subs: make(map[int]*shard)}
}

// join queues a waiter on channel and returns once the subscription is
// confirmed, ctx is done or the request timeout passed; in the last two cases
// the waiter still works, on its fallback timer.
func (n *notifier) join(ctx context.Context, k keys, write bool, owner string) (*waiter, error) {
	channel := k.channel
	w := &waiter{n: n, channel: channel, write: write, owner: owner, C: make(chan struct{}, 1)}
	n.mu.Lock()
	if n.l.isClosed() {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	st := n.chans[channel]
	fresh := st == nil
	if fresh {
		st = &channelState{channel: channel, keys: k, ready: make(chan struct{})}
		n.chans[channel] = st
	}
	st.waiters = append(st.waiters, w)
	n.mu.Unlock()
	if fresh {
		if err := n.subscribe(ctx, channel, st); err != nil {
			n.l.log.Warn("guard: subscribe failed; waiting on the key's TTL", "channel", channel, "err", err)
			return w, nil
		}
	}
	timer := time.NewTimer(n.l.cfg.requestTimeout)
	defer timer.Stop()
	select {
	case <-st.ready:
	case <-ctx.Done():
	case <-timer.C:
	case <-n.l.closed:
	}
	return w, nil
}

func (n *notifier) confirmed(channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.chans[channel]
	if st == nil {
		return
	}
	st.seq++
	if !st.live {
		st.live = true
		close(st.ready)
		return
	}
	// Subscribed again after a reconnect: a release may have been missed.
	for _, w := range st.waiters {
		w.wake()
	}
}

// released wakes waiters for a message of set_counts.lua or acquire.lua: "read"
// lets readers in; "taken" says a waiter got the key; "grant" that a
// release gave it to the waiter it names; the others name the Locker whose
// first waiter (and the readers behind a reader) should try.
func (n *notifier) released(channel, payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.chans[channel]
	if st == nil {
		return
	}
	st.seq++
	kind, target, _ := strings.Cut(payload, " ")
	switch {
	case kind == "taken" || kind == "grant":
		if st.backup != nil {
			st.backup.Stop()
		}
		if kind == "grant" {
			st.grant(n.l.id, target)
		}
	case len(st.waiters) == 0:
	case kind == "read":
		for _, w := range st.waiters {
			if !w.write {
				w.wake()
			}
		}
	case target == "" || target == n.l.id:
		st.wakeFirst()
	case st.backup == nil:
		st.backup = time.AfterFunc(handOffGrace, func() { n.handOffMissed(st) })
	default:
		st.backup.Reset(handOffGrace)
	}
}

// grant hands a grant ("<Locker id> <owner> <token>") to the waiter it
// names. A grant for an acquisition of this Locker that is not (yet, or
// any longer) waiting is left alone: one that is about to wait tries again
// at once, having missed a message, and finds the key its own; one that
// gave up withdraws and drops it.
func (st *channelState) grant(locker, target string) {
	id, rest, _ := strings.Cut(target, " ")
	if id != locker {
		return
	}
	owner, digits, _ := strings.Cut(rest, " ")
	token, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || token <= 0 {
		return
	}
	for _, w := range st.waiters {
		if w.owner == owner {
			w.granted.Store(token)
			w.wake()
			return
		}
	}
}

// handOffMissed runs when the Locker named in a release did not take the key.
func (n *notifier) handOffMissed(st *channelState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.chans[st.channel] == st && len(st.waiters) > 0 {
		st.wakeFirst()
	}
}

// wakeFirst wakes the first waiter and, if it is a reader, every reader.
func (st *channelState) wakeFirst() {
	st.waiters[0].wake()
	if st.waiters[0].write {
		return
	}
	for _, w := range st.waiters {
		if !w.write {
			w.wake()
		}
	}
}

func (w *waiter) wake() {
	select {
	case w.C <- struct{}{}:
	default:
	}
}

// leave dequeues the waiter. A waiter that leaves without the key passes an
// unused wake-up on, so that a hand-off is never lost with it.
func (w *waiter) leave() {
	n := w.n
	n.mu.Lock()
	st := n.chans[w.channel]
	if st == nil {
		n.mu.Unlock()
		return
	}
	st.waiters = slices.DeleteFunc(st.waiters, func(x *waiter) bool { return x == w })
	if !w.acquired {
		pending := w.woken
		select {
		case <-w.C:
			pending = true
		default:
		}
		if pending && len(st.waiters) > 0 {
			st.waiters[0].wake()
		}
	}
	last := len(st.waiters) == 0
	if last {
		delete(n.chans, w.channel)
		if st.backup != nil {
			st.backup.Stop()
		}
	}
	n.mu.Unlock()
	if last {
		n.l.runner.start(func() { n.stopWaiting(st) })
	}
}

// stopWaiting runs when the last waiter on a channel left: it unsubscribes.
// (Each acquisition takes its own registration out of the lock's queue.)
// It holds subMu, and a new first waiter subscribes under subMu, so this
// never drops a newer subscription.
func (n *notifier) stopWaiting(st *channelState) {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	n.mu.Lock()
	again := n.chans[st.channel] != nil // a new waiter came; keep waiting
	n.mu.Unlock()
	if again || n.l.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.l.cfg.requestTimeout)
	defer cancel()
	if st.shard != nil {
		n.unsubscribe(ctx, st.shard, st.channel)
	}
}

func (n *notifier) close() {
	n.mu.Lock()
	for _, st := range n.chans {
		if st.backup != nil {
			st.backup.Stop()
		}
	}
	n.mu.Unlock()
	n.subMu.Lock()
	for _, sh := range n.subs {
		_ = sh.feed.close()
	}
	n.subMu.Unlock()
	n.wg.Wait()
}
