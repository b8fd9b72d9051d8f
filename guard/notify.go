package guard

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/guard/internal/clock"
	"github.com/jobguard/jobguard/guard/internal/store"
)

// notifier turns release messages into wake-ups for waiting acquisitions.
// A Locker has one subscription connection, shared by every waiter; on
// Cluster it has one per hash slot that has waiters (sharded pub/sub), see
// shard. Waiters on a channel queue in order. An acquisition that waits
// registers in the lock's queue (acquire.lua), and a release that frees the
// key grants it to the oldest registered writer (set_counts.lua): the
// message carries the grant, so a hand-off costs no retry at all. A release
// that cannot grant (a reader is oldest, the key is still held, the writer
// waits for replica acks) names the Locker of the oldest registration: that
// Locker wakes its first waiter, the others stay asleep, so a hand-off costs
// one retry in the whole fleet. If the named Locker does not take the key
// within handOffGrace (it crashed, or its waiters just left), the others
// wake their first waiter too; and a grant to another Locker wakes this
// one's first waiter when the grant would have expired, should its grantee
// have crashed. A reader at the head wakes the readers behind it.
//
// Every way a wait can end wakes the waiter or has a bounded timer do it,
// and no waiter is woken by what it did itself (a drop of a hold it could
// not use). The notifier's mutex guards state only: no request is made
// while it is held.
type notifier struct {
	l *Locker
	// life is canceled by close: it ends the shards' requests and waits.
	life context.Context
	end  context.CancelFunc

	mu     sync.Mutex
	chans  map[string]*channelState
	shards map[int]*shard // by feed slot: hash slot on Cluster; noSlot outside it
	closed bool
	wg     sync.WaitGroup // the shards' workers and their connections' readers
}

type channelState struct {
	channel string
	keys    store.Keys
	shard   *shard
	backup  clock.Timer   // wakes the first waiter if the named Locker does not act
	expiry  clock.Timer   // wakes the first waiter when another Locker's grant would expire
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
	life, end := context.WithCancel(context.Background())
	return &notifier{l: l, life: life, end: end, chans: make(map[string]*channelState), shards: make(map[int]*shard)}
}

// join queues a waiter on k's channel and returns once the subscription is
// confirmed, ctx is done, the request timeout passed or the Locker closes;
// in all but the first case the waiter still works, on its fallback
// timer. Subscribing is the channel's shard's work: join only asks for it.
func (n *notifier) join(ctx context.Context, k store.Keys, write bool, owner string) (*waiter, error) {
	channel := k.Channel
	w := &waiter{n: n, channel: channel, write: write, owner: owner, C: make(chan struct{}, 1)}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	st := n.chans[channel]
	if st == nil {
		sh := n.shardLocked(n.l.store.FeedSlot(channel))
		st = &channelState{channel: channel, keys: k, shard: sh, ready: make(chan struct{})}
		n.chans[channel] = st
		sh.want[channel] = st
		signal(sh.kick)
	}
	st.waiters = append(st.waiters, w)
	ready := st.ready
	n.mu.Unlock()
	t := n.l.clock.NewTimer(n.l.cfg.requestTimeout)
	defer t.Stop()
	select {
	case <-ready:
	case <-ctx.Done():
	case <-t.C():
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

// released wakes waiters for a notice of channel: NoticeRead lets readers
// in; NoticeTaken says a waiter got the key; NoticeGrant that a release
// gave it to the waiter it names; the others name the Locker whose first
// waiter (and the readers behind a reader) should try.
func (n *notifier) released(channel string, nt store.Notice) {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.chans[channel]
	if st == nil {
		return
	}
	st.seq++
	// Whatever happened supersedes a grant's expiry timer.
	if st.expiry != nil {
		st.expiry.Stop()
	}
	switch {
	case nt.Kind == store.NoticeTaken || nt.Kind == store.NoticeGrant:
		if st.backup != nil {
			st.backup.Stop()
		}
		if nt.Kind == store.NoticeGrant {
			n.granted(st, nt)
		}
	case len(st.waiters) == 0:
	case nt.Kind == store.NoticeRead:
		for _, w := range st.waiters {
			if !w.write {
				w.wake()
			}
		}
	case nt.Locker == "" || nt.Locker == n.l.id:
		st.wakeFirst(nt.Owner)
	case st.backup == nil:
		st.backup = n.l.clock.AfterFunc(handOffGrace, func() { n.handOffMissed(st) })
	default:
		st.backup.Reset(handOffGrace)
	}
}

// granted hands a grant to the waiter it names. A grant for an acquisition
// of this Locker that is not (yet, or any longer) waiting is left alone: one
// that is about to wait tries again at once, having missed a message, and
// finds the key its own; one that gave up withdraws and drops it. A grant
// to another Locker wakes this one's first waiter once the grant has had
// time to expire: a grantee that crashed never renews it, and its expiry
// publishes nothing.
func (n *notifier) granted(st *channelState, nt store.Notice) {
	if nt.Locker != n.l.id {
		if nt.Left > 0 && len(st.waiters) > 0 {
			wait := nt.Left + time.Millisecond
			if st.expiry == nil {
				st.expiry = n.l.clock.AfterFunc(wait, func() { n.grantExpired(st) })
			} else {
				st.expiry.Reset(wait)
			}
		}
		return
	}
	for _, w := range st.waiters {
		if w.owner == nt.Owner {
			w.granted.Store(nt.Token)
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
		st.wakeFirst("")
	}
}

// grantExpired runs when a grant to another Locker would have expired
// unless its grantee renewed it: the first waiter tries, and sleeps again
// if the grantee holds the key.
func (n *notifier) grantExpired(st *channelState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.chans[st.channel] == st && len(st.waiters) > 0 {
		st.wakeFirst("")
	}
}

// wakeFirst wakes the first waiter other than the one whose owner is
// except (it dropped a hold and so sent the message), and, if it is a
// reader, every reader.
func (st *channelState) wakeFirst(except string) {
	i := 0
	if except != "" {
		i = slices.IndexFunc(st.waiters, func(w *waiter) bool { return w.owner != except })
		if i < 0 {
			return
		}
	}
	first := st.waiters[i]
	first.wake()
	if first.write {
		return
	}
	for _, w := range st.waiters {
		if !w.write && w.owner != except {
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
// unused wake-up on, so that a hand-off is never lost with it. The last
// waiter of a channel has its shard unsubscribe it.
func (w *waiter) leave() {
	n := w.n
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.chans[w.channel]
	if st == nil {
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
	if len(st.waiters) > 0 {
		return
	}
	delete(n.chans, w.channel)
	for _, t := range []clock.Timer{st.backup, st.expiry} {
		if t != nil {
			t.Stop()
		}
	}
	if st.shard.want[w.channel] == st {
		delete(st.shard.want, w.channel)
		signal(st.shard.kick)
	}
}

// dropped runs when the server confirms that channel was unsubscribed on
// f, sh's connection. If guard did not ask for it, Redis dropped the
// subscription because the channel's slot left the node (a manual
// CLUSTER FAILOVER, a resharding) and no release would reach its waiters:
// they are woken, since one may have been missed, and the slot's
// connection is replaced by one to the slot's current node. A connection
// sh no longer uses (replaced, or its shard ended) is not heard.
func (n *notifier) dropped(sh *shard, f store.Feed, channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.shards[sh.slot] != sh || sh.feed != f {
		return
	}
	if sh.unsubscribing[channel] > 0 {
		n.unsubscribedLocked(sh, channel)
		return
	}
	st := n.chans[channel]
	if st == nil || len(st.waiters) == 0 {
		return
	}
	for _, w := range st.waiters {
		w.wake()
	}
	sh.stale = true
	signal(sh.kick)
}

// unsubscribed settles one unsubscription of channel that sh asked for.
func (n *notifier) unsubscribed(sh *shard, channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.unsubscribedLocked(sh, channel)
}

func (n *notifier) unsubscribedLocked(sh *shard, channel string) {
	if sh.unsubscribing[channel] > 1 {
		sh.unsubscribing[channel]--
		return
	}
	delete(sh.unsubscribing, channel)
}

// close stops the shards, closing their connections, and waits for them.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	for _, st := range n.chans {
		for _, t := range []clock.Timer{st.backup, st.expiry} {
			if t != nil {
				t.Stop()
			}
		}
	}
	n.mu.Unlock()
	n.end()
	n.wg.Wait()
}
