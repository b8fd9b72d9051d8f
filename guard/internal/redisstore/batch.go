package redisstore

import (
	"context"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// batcher sends the store's one-call requests (an acquisition, a release)
// so that a busy process costs Redis and itself less per request: up to
// maxFlights requests are in flight at once, each alone on a connection,
// as a request without a batcher would be; the ones that come while
// maxFlights are in flight wait, and go together, as one pipeline, in the
// next flight, which the first of them sends when a flight lands. Redis
// then reads, runs and answers them in one turn of its event loop, where
// each alone would cost it a read, a write and a wake-up; the process
// saves as many system calls.
//
// A process that sends one request at a time, or a few, never waits: its
// requests go at once, as they did. Each request is still its own command,
// run atomically on its own; a pipeline changes only how commands travel.
// A waiting request gives up when its context is done, as go-redis would
// in its pool, and is not sent; one in a flight is bounded by the flight's
// context, that of the request whose deadline comes first, so that none
// waits past its own deadline (a pipeline cannot drop one of its
// commands). Cluster stores do not batch: a pipeline there may span
// nodes, and a request's script load follows its own key (see
// runFunction).
type batcher struct {
	client redis.UniversalClient

	mu      sync.Mutex
	flights int       // in flight, up to maxFlights
	queue   []*queued // waiting for the next flight
}

// maxFlights is how many requests go at once before others wait to share a
// flight. Redis runs one command at a time: more parallel connections add
// no throughput, only a read, a write and a wake-up each. Enough of them
// keep a process that sends a few at once from waiting at all: measured
// with guard on 2 cores, 8 goroutines each acquiring and releasing a key
// of their own did as well with 8 flights as without a batcher (with 4,
// they waited, and did 13% less), and 64 goroutines did 1.8 times as much
// with 8 as without one (docs/performance.md, "Many requests at once").
const maxFlights = 8

// queued is a request that waits for a flight.
type queued struct {
	ctx context.Context
	cmd *redis.Cmd
	// wake says true to the request that leads the next flight (it takes
	// every request queued by then, itself first), false to one that
	// another's flight answered.
	wake chan bool
}

// process sends cmd, alone or in a flight with others, and returns once it
// is answered (or failed: its error is the command's).
func (b *batcher) process(ctx context.Context, cmd *redis.Cmd) {
	b.mu.Lock()
	if b.flights < maxFlights {
		b.flights++
		b.mu.Unlock()
		_ = b.client.Process(ctx, cmd)
		b.landed()
		return
	}
	q := &queued{ctx: ctx, cmd: cmd, wake: make(chan bool, 1)}
	b.queue = append(b.queue, q)
	b.mu.Unlock()
	select {
	case lead := <-q.wake:
		if lead {
			b.lead(q)
		}
		return
	case <-ctx.Done():
	}
	b.mu.Lock()
	if i := slices.Index(b.queue, q); i >= 0 {
		// Still waiting: it leaves, unsent.
		b.queue = slices.Delete(b.queue, i, i+1)
		b.mu.Unlock()
		cmd.SetErr(context.Cause(ctx))
		return
	}
	b.mu.Unlock()
	// A flight took it (it is answered when the flight lands, or dropped
	// unsent), or it was made the next flight's leader: lead passes the
	// lead on.
	if <-q.wake {
		b.lead(q)
	}
}

// lead sends first and every request queued by now as one flight, answers
// them, and lands the flight. A request whose context is done by then is
// dropped, unsent; a leader whose context is done passes the lead to the
// next request queued, so that its caller is not held up by the others'
// flight.
func (b *batcher) lead(first *queued) {
	if first.ctx.Err() != nil {
		first.cmd.SetErr(context.Cause(first.ctx))
		b.landed()
		return
	}
	b.mu.Lock()
	batch := make([]*queued, 0, 1+len(b.queue))
	batch = append(append(batch, first), b.queue...)
	clear(b.queue)
	b.queue = b.queue[:0]
	b.mu.Unlock()
	live := batch[:1:1]
	for _, q := range batch[1:] {
		if q.ctx.Err() != nil {
			q.cmd.SetErr(context.Cause(q.ctx))
			continue
		}
		live = append(live, q)
	}
	switch len(live) {
	case 1:
		_ = b.client.Process(live[0].ctx, live[0].cmd)
	default:
		pipe := b.client.Pipeline()
		ctx := earliest(live)
		for _, q := range live {
			_ = pipe.Process(ctx, q.cmd)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
	}
	for _, q := range batch[1:] {
		q.wake <- false
	}
	b.landed()
}

// landed ends a flight: the first queued request, if any, leads the next
// one, which keeps the flight's place.
func (b *batcher) landed() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.flights--
		b.mu.Unlock()
		return
	}
	next := b.queue[0]
	b.queue = slices.Delete(b.queue, 0, 1)
	b.mu.Unlock()
	next.wake <- true
}

// earliest returns the context, among a flight's requests, whose deadline
// comes first (one without a deadline after any): no request may wait for
// its flight past its own deadline, as it would not alone.
func earliest(batch []*queued) context.Context {
	ctx := batch[0].ctx
	first, bounded := ctx.Deadline()
	for _, q := range batch[1:] {
		if d, ok := q.ctx.Deadline(); ok && (!bounded || d.Before(first)) {
			ctx, first, bounded = q.ctx, d, true
		}
	}
	return ctx
}
