package guard

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// heartbeat renews every hold of a Locker with two long-lived goroutines,
// however many holds there are, and a goroutine per renewal pipeline on the
// wire. The scheduler owns time: it collects holds that are due for renewal
// and cancels those whose safe end has come. The worker groups due holds by
// the node that serves their key (one group outside Cluster) and sends each
// group in pipelines of up to maxBatch, up to nodeBatches of them at once per
// node, each with its own timeout and outcome. Keeping them apart means a
// renewal stuck on a dead link never delays a stop deadline, and a hung node
// costs only the leases that live on it. Logging and observer calls that
// follow a renewal or a loss run off these goroutines (see report).
type heartbeat struct {
	l       *Locker
	mu      sync.Mutex
	queue   holdQueue
	pending []*hold        // due holds for the worker
	sending map[string]int // pipelines on the wire per node
	poke    chan struct{}
	work    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

const (
	// maxBatch bounds one renewal pipeline.
	maxBatch = 1000
	// nodeBatches bounds the renewal pipelines on the wire to one node:
	// enough that a round of many leases is not sent one pipeline after
	// another, few enough not to crowd out other clients of that node.
	nodeBatches = 4
)

func newHeartbeat(l *Locker) *heartbeat {
	hb := &heartbeat{
		l:       l,
		sending: make(map[string]int),
		poke:    make(chan struct{}, 1),
		work:    make(chan struct{}, 1),
		done:    make(chan struct{}),
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
		if len(lost) > 0 {
			hb.endAll(lost, func(h *hold) error {
				return fmt.Errorf("%w: %q: no renewal confirmed in time; the lease could expire at %s",
					ErrLeaseLost, h.key, h.leaseEnd.Format(time.RFC3339Nano))
			})
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

// endAll cancels every hold in lost, then reports the losses: one job's
// cancellation never waits on another's log line.
func (hb *heartbeat) endAll(lost []*hold, cause func(*hold) error) {
	ended := make([]*hold, 0, len(lost))
	causes := make([]error, 0, len(lost))
	for _, h := range lost {
		c := cause(h)
		if h.end(c) {
			ended = append(ended, h)
			causes = append(causes, c)
		}
	}
	if len(ended) > 0 {
		hb.report(func() {
			for i, h := range ended {
				hb.l.reportLost(h, causes[i])
			}
		})
	}
}

// report runs f, which logs or notifies observers, on the Locker's runner,
// so that a slow log handler or observer holds up no renewal and no stop
// deadline. After Close has stopped the runner, f runs here.
func (hb *heartbeat) report(f func()) {
	if !hb.l.runner.run(f) {
		f()
	}
}

// renew is the worker: it queues due holds by node and starts a pipeline
// for each node whenever that node has fewer than nodeBatches on the wire.
func (hb *heartbeat) renew() {
	defer hb.wg.Done()
	queued := make(map[string][]*hold)
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
		for _, h := range pending {
			node := hb.nodeOf(h)
			queued[node] = append(queued[node], h)
		}
		for node, holds := range queued {
			for len(holds) > 0 && hb.claim(node) {
				n := min(len(holds), maxBatch)
				batch := holds[:n:n]
				holds = holds[n:]
				hb.wg.Go(func() {
					defer hb.unclaim(node)
					hb.renewBatch(batch)
				})
			}
			if len(holds) == 0 {
				delete(queued, node)
			} else {
				queued[node] = holds
			}
		}
	}
}

// nodeOf names the node that serves h's key: its master's address on
// Cluster, "" otherwise. A slot that moved is found again at the next
// renewal; until then go-redis follows the redirection.
func (hb *heartbeat) nodeOf(h *hold) string {
	cc, ok := hb.l.client.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	// The cluster state is loaded by the acquisition before any renewal,
	// so this is a lookup, not a request.
	ctx, cancel := context.WithTimeout(context.Background(), h.timing.timeout)
	defer cancel()
	node, err := cc.MasterForKey(ctx, h.keys.lock)
	if err != nil {
		return ""
	}
	return node.Options().Addr
}

// claim reserves a place for one more pipeline to node, if it has one.
func (hb *heartbeat) claim(node string) bool {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if hb.sending[node] >= nodeBatches {
		return false
	}
	hb.sending[node]++
	return true
}

// unclaim frees a place claim reserved and wakes the worker to fill it.
func (hb *heartbeat) unclaim(node string) {
	hb.mu.Lock()
	if hb.sending[node]--; hb.sending[node] == 0 {
		delete(hb.sending, node)
	}
	hb.mu.Unlock()
	signal(hb.work)
}

// renewBatch renews holds in one pipeline and applies the answers. Holds
// whose renewal failed are retried; holds that Redis says are gone, or whose
// key is not a lock any more (WRONGTYPE), are lost at once.
func (hb *heartbeat) renewBatch(batch []*hold) {
	l := hb.l
	batch = hb.scheduled(batch)
	if len(batch) == 0 {
		return
	}
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
	if err != nil {
		results = make([]renewResult, len(batch))
		for i := range results {
			results[i].err = err
		}
	}
	failed, lost, causes := hb.apply(batch, results, sent)
	signal(hb.poke)

	hb.endAll(lost, func(h *hold) error { return causes[h] })
	hb.report(func() {
		for _, f := range failed {
			l.obs.Event(f.h.obsCtx, EventRenewFailed, Info{Key: f.h.key, Name: f.h.name, Token: f.h.token, Err: f.err})
		}
		l.obs.Event(context.Background(), EventRoundTrip, Info{Op: "renew", Duration: rtt, Err: err})
		if err != nil {
			l.log.Warn("guard: renewal failed; retrying", "leases", len(batch), "err", err)
		}
	})
}

// scheduled returns the holds of batch that are still scheduled: one
// released or lost while it waited for its pipeline is not renewed.
func (hb *heartbeat) scheduled(batch []*hold) []*hold {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return slices.DeleteFunc(batch, func(h *hold) bool { return h.index < 0 })
}

// failedRenewal is a renewal to report to observers.
type failedRenewal struct {
	h   *hold
	err error
}

// apply records the answers to a pipeline sent at sent: it moves the safe
// end of renewed holds, schedules retries of failed ones and unschedules
// the lost ones, which it returns with their causes for endAll.
func (hb *heartbeat) apply(batch []*hold, results []renewResult, sent time.Time) ([]failedRenewal, []*hold, map[*hold]error) {
	var failed []failedRenewal
	var lost []*hold
	var causes map[*hold]error
	hb.mu.Lock()
	defer hb.mu.Unlock()
	now := time.Now()
	for i, h := range batch {
		if h.index < 0 {
			continue // released or lost meanwhile
		}
		h.inFlight = false
		r := results[i]
		var cause error
		switch {
		case errors.Is(r.err, ErrWrongType):
			// Not a fault that a retry outlives: the key is not a lock now.
			cause = fmt.Errorf("%w: %w", ErrLeaseLost, r.err)
		case r.err != nil:
			h.nextRenew = now.Add(h.timing.retryEvery())
			failed = append(failed, failedRenewal{h, r.err})
		case r.res == resultOK:
			if end := sent.Add(h.timing.ttl - h.timing.drift()); end.After(h.leaseEnd) {
				h.leaseEnd = end
			}
			h.nextRenew = sent.Add(h.timing.interval)
			h.renewals++
		default:
			cause = lostCause(h.key, r.res)
		}
		if cause == nil {
			heap.Fix(&hb.queue, h.index)
			continue
		}
		heap.Remove(&hb.queue, h.index)
		lost = append(lost, h)
		if causes == nil {
			causes = make(map[*hold]error)
		}
		causes[h] = cause
	}
	return failed, lost, causes
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
			if err := l.scripts.renew.Load(ctx, l.renewLoader(ctx, batch[0])).Err(); err != nil {
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

// renewLoader returns the client to load the renewal script through for a
// batch of one node that h is in: on Cluster that node's master alone, since
// ClusterClient.ScriptLoad waits for every master and a hung one would fail
// the renewals of the healthy ones.
func (l *Locker) renewLoader(ctx context.Context, h *hold) redis.Scripter {
	if cc, ok := l.client.(*redis.ClusterClient); ok {
		if node, err := cc.MasterForKey(ctx, h.keys.lock); err == nil {
			return node
		}
	}
	return l.client
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
