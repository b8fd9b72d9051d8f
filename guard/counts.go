package guard

import (
	"context"
	"errors"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/jobguard/jobguard/guard/observe"
)

// A hold's leases are counted in the process, under the hold's mutex: only
// this process can re-enter its own hold, so nobody else needs the count.
// Redis keeps each hold as one lease of its mode (serverCounts): a write
// hold as one write lease, a read hold as one read lease. So a re-entry and
// the release of a lease that is not the last change nothing there and
// cost no round trip. Two changes do, since other owners see them: the end
// of the last write lease while read leases remain (a downgrade: the hold
// becomes a read hold, and other owners' readers may join), and the end of
// the last lease (the final release, which frees the key after MinHold).
// set_counts.lua sets counts, never adds to them, so a retry is harmless.
//
// Such a change waits, no longer than its caller's context allows, for a
// count update that carries it: one update at a time per hold, sent by a
// goroutine of the Locker's runner (syncCounts), which carries the counts
// as they are when it sends. So changes made while one is on the wire
// share the next request, updates reach Redis in the order they were made,
// and no caller ever waits on a mutex held across a request: a release
// stuck on a dead link holds up nobody else's call.

// serverCounts returns the counts Redis keeps for a hold with writes and
// reads leases: one lease of its strongest mode, none once the last lease
// has ended.
func serverCounts(writes, reads int) (int, int) {
	switch {
	case writes > 0:
		return 1, 0
	case reads > 0:
		return 0, 1
	}
	return 0, 0
}

// countSync is one count update; callers wait on done for its answer.
type countSync struct {
	// obsCtx is the context of the caller that asked for the update, for
	// its round trips' observer events (a tracing span's, say).
	obsCtx context.Context
	done   chan struct{}
	res    store.Outcome
	err    error
}

// syncLocked returns the count update that will carry the hold's counts as
// they are now, starting the sender if it is idle; h.mu is held. ctx is the
// caller's, whose values the update's observer events get if it starts
// one. After Close has stopped the runner, the update fails at once with
// ErrClosed.
func (h *hold) syncLocked(ctx context.Context) *countSync {
	if h.next != nil {
		return h.next
	}
	var s *countSync
	if h.synced {
		s = new(countSync)
	} else {
		// Most holds send one update, their final release: its record
		// is a field of the hold.
		s, h.synced = &h.firstSync, true
	}
	s.obsCtx, s.done = ctx, make(chan struct{})
	h.next = s
	if h.syncing {
		return s
	}
	h.syncing = true
	if !h.l.runner.startJob((*countSender)(h)) {
		h.syncing, h.next = false, nil
		s.err = ErrClosed
		close(s.done)
	}
	return s
}

// countSender is a hold as the runner's job that sends its count updates:
// a method value (h.syncCounts) would cost an allocation per update.
type countSender hold

func (s *countSender) run() { (*hold)(s).syncCounts() }

// syncCounts sends count updates until none is pending.
func (h *hold) syncCounts() {
	for {
		h.mu.Lock()
		s := h.next
		if s == nil {
			h.syncing = false
			h.mu.Unlock()
			return
		}
		h.next = nil
		writes, reads := serverCounts(h.writes, h.reads)
		h.mu.Unlock()

		s.res, s.err = h.sendCounts(s.obsCtx, writes, reads)
		if writes == 0 && reads == 0 {
			h.settleFinal(s.res, s.err)
		}
		close(s.done)
	}
}

// sendCounts sets the hold's counts in Redis, retrying transport errors
// for up to the request timeout. Every update ends leases (re-entries send
// none), so observers see its round trips as releases.
func (h *hold) sendCounts(obsCtx context.Context, writes, reads int) (store.Outcome, error) {
	l := h.l
	ctx := new(deadlineCtx) // the retries' bound; WithTimeout's costs more
	ctx.start(&l.deadlines, context.Background(), h.timing.timeout)
	defer ctx.stop()
	// The marker of a final release outlives every retry: they stop at the
	// request timeout.
	a := store.CountArgs{Owner: h.owner, Writes: writes, Reads: reads, Marker: 2 * max(h.timing.timeout, time.Second)}
	backoff := releaseBackoff
	for {
		start := l.clock.Now()
		// A try that is given up on at the deadline (see try) may still
		// land, and the next update (they set counts, not add) or the
		// hold's expiry corrects it.
		res, err := try(ctx, l, func(ctx context.Context) (store.Outcome, error) {
			return l.store.SetCounts(ctx, h.keys, a)
		})
		l.obs.Event(obsCtx, observe.RoundTrip, observe.Info{Op: "release", Key: h.key, Name: h.name, Duration: l.clock.Now().Sub(start), Err: err})
		if err == nil {
			return res, nil
		}
		if errors.Is(err, ErrWrongType) || ctx.Err() != nil {
			return 0, err
		}
		t := l.clock.NewTimer(backoff)
		select {
		case <-t.C():
			backoff = min(2*backoff, releaseMaxBackoff)
		case <-ctx.Done():
			t.Stop()
			return 0, err
		}
	}
}

// settleFinal ends the hold after its final update was answered: released
// when Redis applied it, or when it could not tell (the key then expires
// within its TTL); lost when the hold was gone before it. A hold that had
// ended before (lost, or given up by Close) is left as it ended.
func (h *hold) settleFinal(res store.Outcome, err error) {
	l := h.l
	if err == nil && res != store.Applied {
		h.lose(lostCause(h.key, res))
		return
	}
	if !h.end(ErrReleased) {
		return
	}
	l.obs.Event(h.obsCtx, observe.Held, observe.Info{Key: h.key, Name: h.name, Token: h.token, Delta: -1, Result: "released", Duration: l.clock.Now().Sub(h.start)})
	if err != nil {
		l.log.Warn("guard: release failed; the key expires within its TTL", "key", h.key, "err", err)
	} else if l.debugEnabled() {
		l.log.Debug("guard: released", "key", h.key, "token", h.token)
	}
}

// dropLeaseLocked takes one lease of the given mode off the hold's counts
// and returns the update that will carry the change to Redis, nil when
// none is needed: Redis's view of the hold does not change (see
// serverCounts), or the hold has ended and this is not its last lease (the
// last one still frees the key, if it is still ours). When the last lease
// goes, the hold stops being renewed and can no longer be re-entered. h.mu
// is held; ctx is the caller's, for observers; ended says whether the
// caller found the hold ended, read once, since the hold can end at any
// moment (end does not take h.mu).
func (h *hold) dropLeaseLocked(ctx context.Context, write, ended bool) *countSync {
	w, r := serverCounts(h.writes, h.reads)
	h.writes, h.reads = counts(h.writes, h.reads, write, -1)
	final := h.writes == 0 && h.reads == 0
	if final {
		h.final = true
		h.l.hb.remove(h) // no renewal is sent after the final update
	} else if nw, nr := serverCounts(h.writes, h.reads); ended || nw == w && nr == r {
		return nil
	}
	return h.syncLocked(ctx)
}

// await waits for s's answer until ctx is done. A ctx that nothing can
// end (a Release detached from a context already done) waits up to the
// hold's request timeout: the update's own bound, which a request that
// go-redis does not interrupt could otherwise overrun.
func (s *countSync) await(ctx context.Context, h *hold) error {
	if ctx.Done() == nil {
		d := new(deadlineCtx)
		d.start(&h.l.deadlines, detached(ctx), h.timing.timeout+releaseMaxBackoff)
		defer d.stop()
		ctx = d
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
