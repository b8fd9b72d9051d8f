package quorumstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jobguard/jobguard/guard/internal/redisstore"
	"github.com/jobguard/jobguard/guard/internal/store"
)

// On a quorum a lock lives on every master, and what an operator sees must
// be what the quorum agrees on: a hold counts when a majority has it, and
// lasts as long as a majority still will.

// inspect reads the lock on every master and merges what a majority says.
func (s *Store) Inspect(ctx context.Context, k store.Keys) (store.LockState, error) {
	return s.readStates(ctx, "inspect", func(ctx context.Context, n *redisstore.Store) (store.LockState, error) {
		return n.Inspect(ctx, k)
	})
}

// forceRelease ends every hold on every master it reaches, and succeeds when
// a majority did: then no hold is left on a majority, so none can be
// renewed. It answers the holds a majority had.
func (s *Store) ForceRelease(ctx context.Context, k store.Keys) (store.LockState, error) {
	return s.readStates(ctx, "force release", func(ctx context.Context, n *redisstore.Store) (store.LockState, error) {
		return n.ForceRelease(ctx, k)
	})
}

// readStates runs call on every master, waits for all of them (or the
// deadline) and merges the states of those that answered, which must be a
// majority.
func (s *Store) readStates(ctx context.Context, what string, call func(context.Context, *redisstore.Store) (store.LockState, error)) (store.LockState, error) {
	start, deadline := s.clock.Now(), s.deadline(ctx)
	replies := each(s, ctx, deadline, func(ctx context.Context, _ int, n *redisstore.Store) (store.LockState, error) {
		return call(ctx, n)
	})
	var states []store.LockState
	var errs []error
	wrongType := 0
	answered := collect(s, ctx, deadline, replies, func(r nodeReply[store.LockState]) bool {
		switch {
		case errors.Is(r.err, store.ErrWrongType):
			wrongType++
			errs = append(errs, r.err)
		case r.err != nil:
			errs = append(errs, r.err)
		default:
			states = append(states, r.v)
		}
		return false // every master's view counts
	})
	switch {
	case wrongType >= s.quorum:
		return store.LockState{}, errs[0]
	case len(states) < s.quorum:
		errs = missing(errs, answered, len(s.nodes), deadline.Sub(start))
		return store.LockState{}, noQuorum(fmt.Sprintf("%s: %d of %d masters answered", what, len(states), len(s.nodes)), s.quorum, len(s.nodes), errs)
	}
	return mergeStates(states, s.quorum), nil
}

// mergeStates combines the masters' views of one lock. A holder is one that
// at least quorum masters list; its time left is how long a majority still
// has it (the quorum-th longest), and its counts are the highest any of
// them lists. Its token is the highest one not above the counter: the
// masters mint tokens of their own, the holder was handed the highest of
// its majority's and wrote it back to the counters, and a master that
// granted late, with a higher token never handed out, had its counter
// brought down to it. A waiter is listed when any master has it registered,
// with its longest registration. The counter is the highest: a majority's
// counters include the newest token.
func mergeStates(states []store.LockState, quorum int) store.LockState {
	var out store.LockState
	holders := make(map[string][]store.Holder)
	var order []string
	waiters := make(map[string]store.Waiter)
	var waitOrder []string
	for _, st := range states {
		out.Fence = max(out.Fence, st.Fence)
		out.Permits = max(out.Permits, st.Permits)
		for _, h := range st.Holders {
			if holders[h.Owner] == nil {
				order = append(order, h.Owner)
			}
			holders[h.Owner] = append(holders[h.Owner], h)
		}
		for _, w := range st.Waiters {
			old, seen := waiters[w.Owner]
			if !seen {
				waitOrder = append(waitOrder, w.Owner)
			}
			if !seen || w.Left > old.Left {
				waiters[w.Owner] = w
			}
		}
	}
	for _, owner := range order {
		views := holders[owner]
		if len(views) < quorum {
			continue
		}
		slices.SortFunc(views, func(a, b store.Holder) int { return int(b.Left - a.Left) })
		h := views[quorum-1]
		h.Token = 0
		for _, v := range views {
			if v.Token <= out.Fence {
				h.Token = max(h.Token, v.Token)
			}
			h.Writes, h.Reads = max(h.Writes, v.Writes), max(h.Reads, v.Reads)
		}
		out.Holders = append(out.Holders, h)
	}
	slices.SortStableFunc(out.Holders, func(a, b store.Holder) int { return cmpInt(a.Token, b.Token) })
	if len(out.Holders) == 0 {
		out.Permits = 0 // no majority holds a permit
	}
	for _, owner := range waitOrder {
		out.Waiters = append(out.Waiters, waiters[owner])
	}
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// scanLocks walks the masters one after the other; a lock held on a
// majority is listed by each master that has it (the Locker's Scan drops
// the repeats). The cursor's node is "<master index>/<the master's own
// cursor node>".
func (s *Store) ScanLocks(ctx context.Context, prefix, match string, c store.ScanCursor) ([]string, store.ScanCursor, bool, error) {
	i, inner := 0, store.ScanCursor{Pos: c.Pos}
	if c.Node != "" {
		idx, rest, _ := strings.Cut(c.Node, "/")
		n, err := strconv.Atoi(idx)
		if err != nil || n < 0 || n >= len(s.nodes) {
			return nil, c, false, fmt.Errorf("guard: bad scan cursor %q", c.Node)
		}
		i, inner.Node = n, rest
	}
	names, next, more, err := s.nodes[i].ScanLocks(ctx, prefix, match, inner)
	if err != nil {
		return nil, c, false, err
	}
	switch {
	case more:
		return names, store.ScanCursor{Node: strconv.Itoa(i) + "/" + next.Node, Pos: next.Pos}, true, nil
	case i+1 < len(s.nodes):
		return names, store.ScanCursor{Node: strconv.Itoa(i+1) + "/"}, true, nil
	}
	return names, store.ScanCursor{}, false, nil
}
