package guard

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"
)

// heartbeat renews every hold of a Locker with two goroutines, however many
// holds there are. The scheduler owns time: it batches holds that are due for
// renewal and cancels those whose safe end has come. The worker sends each
// batch as one pipeline. Keeping them apart means a renewal stuck on a dead
// link never delays a stop deadline.
type heartbeat struct {
	l       *Locker
	mu      sync.Mutex
	queue   holdQueue
	pending []*hold // batches for the worker
	poke    chan struct{}
	work    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

// maxBatch bounds one renewal pipeline.
const maxBatch = 1000

func newHeartbeat(l *Locker) *heartbeat {
	hb := &heartbeat{
		l:    l,
		poke: make(chan struct{}, 1),
		work: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	hb.wg.Add(2)
	go hb.schedule()
	go hb.renew()
	return hb
}

func (hb *heartbeat) close() {
	close(hb.done)
	hb.wg.Wait()
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (hb *heartbeat) add(h *hold) {
	hb.mu.Lock()
	heap.Push(&hb.queue, h)
	hb.mu.Unlock()
	signal(hb.poke)
}

// remove stops renewing h. Once it returns, no renewal of h is sent and no
// answer to one in flight is applied.
func (hb *heartbeat) remove(h *hold) {
	hb.mu.Lock()
	if h.index >= 0 {
		heap.Remove(&hb.queue, h.index)
	}
	hb.mu.Unlock()
}

// leaseEnd returns h's safe end as the heartbeat last moved it.
func (hb *heartbeat) leaseEnd(h *hold) time.Time {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return h.leaseEnd
}

func (hb *heartbeat) renewals(h *hold) int {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return h.renewals
}

// due is when the scheduler must next look at h: its next renewal or, when
// a renewal is in flight or overdue, its safe end.
func (h *hold) due() time.Time {
	stop := h.stopAt()
	if h.inFlight || stop.Before(h.nextRenew) {
		return stop
	}
	return h.nextRenew
}

// renewable reports whether h may join a batch sent at now: its renewal is
// at most a tenth of an interval away. The scheduler wakes at the end of the
// first hold's window and takes every hold whose window has opened, so holds
// acquired at about the same time share a pipeline.
func (h *hold) renewable(now time.Time) bool {
	return !h.inFlight && !h.nextRenew.Add(-h.timing.interval/10).After(now)
}

func (hb *heartbeat) schedule() {
	defer hb.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var lost, batch []*hold
		hb.mu.Lock()
		now := time.Now()
		for len(hb.queue) > 0 {
			h := hb.queue[0]
			if !now.Before(h.stopAt()) {
				heap.Pop(&hb.queue)
				lost = append(lost, h)
				continue
			}
			if !h.renewable(now) {
				break
			}
			h.inFlight = true
			heap.Fix(&hb.queue, 0)
			batch = append(batch, h)
		}
		if len(batch) > 0 {
			hb.pending = append(hb.pending, batch...)
		}
		next := time.Hour
		if len(hb.queue) > 0 {
			next = hb.queue[0].due().Sub(now)
		}
		hb.mu.Unlock()

		if len(batch) > 0 {
			signal(hb.work)
		}
		for _, h := range lost {
			hb.l.lose(h, fmt.Errorf("%w: %q: no renewal confirmed in time; the lease could expire at %s",
				ErrLeaseLost, h.key, h.leaseEnd.Format(time.RFC3339Nano)))
		}
		timer.Reset(next)
		select {
		case <-timer.C:
		case <-hb.poke:
		case <-hb.done:
			return
		}
	}
}

func (hb *heartbeat) renew() {
	defer hb.wg.Done()
	for {
		select {
		case <-hb.work:
		case <-hb.done:
			return
		}
		hb.mu.Lock()
		pending := hb.pending
		hb.pending = nil
		hb.mu.Unlock()
		for len(pending) > 0 {
			n := min(len(pending), maxBatch)
			hb.renewBatch(pending[:n])
			pending = pending[n:]
		}
	}
}

// renewBatch renews holds in one pipeline and applies the answers.
func (hb *heartbeat) renewBatch(batch []*hold) {
	l := hb.l
	timeout := batch[0].timing.timeout
	for _, h := range batch[1:] {
		timeout = min(timeout, h.timing.timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	sent := time.Now()
	results, err := call(ctx, l, func(ctx context.Context) ([]renewResult, error) {
		return l.renewPipeline(ctx, batch)
	}, nil)
	cancel()
	rtt := time.Since(sent)

	var lost []*hold
	var causes []error
	hb.mu.Lock()
	now := time.Now()
	for i, h := range batch {
		if h.index < 0 {
			continue // released or lost meanwhile
		}
		h.inFlight = false
		r := renewResult{err: err}
		if err == nil {
			r = results[i]
		}
		switch {
		case r.err != nil:
			h.nextRenew = now.Add(h.timing.retryEvery())
			l.obs.Event(h.obsCtx, EventRenewFailed, Info{Key: h.key, Name: h.name, Token: h.token, Err: r.err})
		case r.res == resultOK:
			if end := sent.Add(h.timing.ttl - h.timing.drift()); end.After(h.leaseEnd) {
				h.leaseEnd = end
			}
			h.nextRenew = sent.Add(h.timing.interval)
			h.renewals++
		default:
			heap.Remove(&hb.queue, h.index)
			lost = append(lost, h)
			causes = append(causes, lostCause(h.key, r.res))
			continue
		}
		heap.Fix(&hb.queue, h.index)
	}
	hb.mu.Unlock()
	signal(hb.poke)

	l.obs.Event(context.Background(), EventRoundTrip, Info{Op: "renew", Duration: rtt, Err: err})
	if err != nil {
		l.log.Warn("guard: renewal failed; retrying", "leases", len(batch), "err", err)
	}
	for i, h := range lost {
		l.lose(h, causes[i])
	}
}

type renewResult struct {
	res int64
	err error
}

func (l *Locker) renewPipeline(ctx context.Context, batch []*hold) ([]renewResult, error) {
	for attempt := 0; ; attempt++ {
		pipe := l.client.Pipeline()
		cmds := make([]interface{ Int64() (int64, error) }, len(batch))
		for i, h := range batch {
			cmds[i] = l.scripts.renew.EvalSha(ctx, pipe, []string{h.keys.lock}, h.owner, ms(h.timing.ttl))
		}
		var acked interface{ Int64() (int64, error) }
		if l.cfg.replicas > 0 {
			acked = pipe.Do(ctx, "WAIT", l.cfg.replicas, ms(l.cfg.replicaTimeout))
		}
		_, _ = pipe.Exec(ctx)
		out := make([]renewResult, len(batch))
		noScript := false
		for i, c := range cmds {
			out[i].res, out[i].err = c.Int64()
			noScript = noScript || isNoScript(out[i].err)
			out[i].err = redisError(batch[i].key, out[i].err)
		}
		if noScript && attempt == 0 {
			if err := l.scripts.renew.Load(ctx, l.client).Err(); err != nil {
				return nil, err
			}
			continue
		}
		if acked != nil {
			n, err := acked.Int64()
			if err == nil && n < int64(l.cfg.replicas) {
				err = fmt.Errorf("guard: renewal acknowledged by %d of %d replicas", n, l.cfg.replicas)
			}
			if err != nil {
				for i := range out {
					if out[i].err == nil {
						out[i].err = err
					}
				}
			}
		}
		return out, nil
	}
}

// holdQueue is a min-heap of holds by due time.
type holdQueue []*hold

func (q holdQueue) Len() int           { return len(q) }
func (q holdQueue) Less(i, j int) bool { return q[i].due().Before(q[j].due()) }
func (q holdQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *holdQueue) Push(x any) {
	h := x.(*hold)
	h.index = len(*q)
	*q = append(*q, h)
}
func (q *holdQueue) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.index = -1
	*q = old[:len(old)-1]
	return h
}
