package guard

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/jobguard/jobguard/guard/observe"
)

// The heartbeat's worker side: sending due renewals, grouped by node, in
// pipelines, and applying their answers. The scheduler (heartbeat.go)
// decides when.

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
			node := hb.renewalGroup(h)
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

// renewalGroup names the node that serves h's key: its master's address on
// Cluster, "" otherwise.
func (hb *heartbeat) renewalGroup(h *hold) string {
	ctx, cancel := context.WithTimeout(context.Background(), h.timing.timeout)
	defer cancel()
	return hb.l.store.RenewalGroup(ctx, h.keys.Lock)
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
	sent := hb.clock.Now()
	// Not request: the round trip is reported off this goroutine, below.
	results, err := await(ctx, l, func(ctx context.Context) ([]store.RenewReply, error) {
		return l.store.Renew(ctx, renewArgsOf(batch))
	}, nil)
	cancel()
	rtt := hb.clock.Now().Sub(sent)
	if err == nil && len(results) != len(batch) {
		err = fmt.Errorf("guard: %d renewal replies for %d leases", len(results), len(batch))
	}
	if err != nil {
		results = make([]store.RenewReply, len(batch))
		for i := range results {
			results[i].Err = err
		}
	}
	for i, h := range batch {
		results[i].Err = redisError(h.key, results[i].Err)
	}
	failed, lost, causes, early := hb.apply(batch, results, sent)
	if early {
		signal(hb.poke)
	}

	hb.endAll(lost, func(h *hold) error { return causes[h] })
	hb.report(func() {
		for _, f := range failed {
			l.obs.Event(f.h.obsCtx, observe.RenewFailed, observe.Info{Key: f.h.key, Name: f.h.name, Token: f.h.token, Err: f.err})
		}
		l.obs.Event(context.Background(), observe.RoundTrip, observe.Info{Op: "renew", Duration: rtt, Err: err})
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
// the lost ones, which it returns with their causes for endAll. early
// reports a hold now due before the time the scheduler sleeps until, which
// must wake it, as add does. Waking it otherwise would split the next
// holds to come due into a batch per answer: it takes every hold whose
// window has opened when it wakes, and an answer comes back while the next
// holds' windows are still opening.
func (hb *heartbeat) apply(batch []*hold, results []store.RenewReply, sent time.Time) (failed []failedRenewal, lost []*hold, causes map[*hold]error, early bool) {
	causes = make(map[*hold]error)
	hb.mu.Lock()
	defer hb.mu.Unlock()
	now := hb.clock.Now()
	for i, h := range batch {
		if h.index < 0 {
			continue // released or lost meanwhile
		}
		cause := h.settle(results[i], sent, now)
		switch {
		case cause != nil:
			heap.Remove(&hb.queue, h.index)
			lost = append(lost, h)
			causes[h] = cause
		case results[i].Err != nil:
			failed = append(failed, failedRenewal{h, results[i].Err})
			fallthrough
		default:
			heap.Fix(&hb.queue, h.index)
			early = early || h.due().Before(hb.wakeAt)
		}
	}
	return failed, lost, causes, early
}

func renewArgsOf(batch []*hold) []store.RenewArgs {
	args := make([]store.RenewArgs, len(batch))
	for i, h := range batch {
		args[i] = store.RenewArgs{Lock: h.keys.Lock, Owner: h.owner, TTL: h.timing.ttl}
	}
	return args
}
