package guard

import (
	"container/heap"
	"fmt"
	"sync"
	"time"

	"github.com/jobguard/jobguard/guard/internal/clock"
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
	clock   clock.Clock
	mu      sync.Mutex
	queue   holdQueue
	pending []*hold        // due holds for the worker
	sending map[string]int // pipelines on the wire per node
	wakeAt  time.Time      // when the scheduler wakes unless poked
	poke    chan struct{}
	work    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

const (
	// maxBatch bounds one renewal pipeline: large enough that 1000 leases
	// acquired together cost one round trip, small enough that the
	// pipeline's replies stay a few tens of kilobytes and one slow batch
	// delays no more than that many renewals.
	maxBatch = 1000
	// nodeBatches bounds the renewal pipelines on the wire to one node:
	// enough that a round of many leases is not sent one pipeline after
	// another, few enough not to crowd out other clients of that node.
	nodeBatches = 4
)

func newHeartbeat(l *Locker) *heartbeat {
	hb := &heartbeat{
		l:       l,
		clock:   l.clock,
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

// add schedules h. The scheduler is woken only when h is due before the
// time it sleeps until: a stream of acquisitions with one TTL is due ever
// later, and waking a goroutine for each would cost more than the request.
func (hb *heartbeat) add(h *hold) {
	hb.mu.Lock()
	heap.Push(&hb.queue, h)
	early := h.due().Before(hb.wakeAt)
	hb.mu.Unlock()
	if early {
		signal(hb.poke)
	}
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

func (hb *heartbeat) renewals(h *hold) int {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return h.renewals
}

func (hb *heartbeat) schedule() {
	defer hb.wg.Done()
	timer := hb.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		hb.mu.Lock()
		now := hb.clock.Now()
		lost, batch := hb.queue.take(now)
		hb.pending = append(hb.pending, batch...)
		wake := now.Add(hb.queue.next(now))
		hb.wakeAt = wake
		hb.mu.Unlock()

		if len(batch) > 0 {
			signal(hb.work)
		}
		if len(lost) > 0 {
			hb.endAll(lost, overdue)
		}
		// Armed for the instant the next hold is due, not for a duration
		// measured before endAll: canceling many holds takes a while, and
		// the next stop time must not be kept that much late.
		timer.Reset(max(wake.Sub(hb.clock.Now()), 0))
		select {
		case <-timer.C():
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
				h.reportLost(causes[i])
			}
		})
	}
}

// report runs f, which logs or notifies observers, on the Locker's runner,
// so that a slow log handler or observer holds up no renewal and no stop
// deadline. After Close has stopped the runner, f runs here.
func (hb *heartbeat) report(f func()) {
	if !hb.l.runner.start(f) {
		f()
	}
}

// overdue is the cause of a hold whose stop time came before a renewal
// confirmed it.
func overdue(h *hold) error {
	return fmt.Errorf("%w: %q: no renewal confirmed in time; the lease could expire at %s",
		ErrLeaseLost, h.key, h.leaseEnd.Format(time.RFC3339Nano))
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

// take removes from the queue the holds whose stop time has come (lost),
// and marks in flight those whose renewal window has opened (due).
func (q *holdQueue) take(now time.Time) (lost, due []*hold) {
	for len(*q) > 0 {
		h := (*q)[0]
		if !now.Before(h.stopAt()) {
			heap.Pop(q)
			lost = append(lost, h)
			continue
		}
		if !h.renewable(now) {
			break
		}
		h.inFlight = true
		heap.Fix(q, 0)
		due = append(due, h)
	}
	return lost, due
}

// next is how long the scheduler may sleep after take at now.
func (q holdQueue) next(now time.Time) time.Duration {
	if len(q) == 0 {
		return time.Hour
	}
	return q[0].due().Sub(now)
}
