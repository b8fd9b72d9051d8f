package quorumstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
)

// The quorum's release notifications. A release runs on every master and
// each publishes it, so a waiter subscribes on all of them through one
// feed (the store has one feed slot) and wakes on whichever message comes
// first; a master that is down costs nothing while another one delivers.
// Later copies of the same release wake a waiter that already tried again
// at most once more; the fallback timer still covers a crashed holder.

func (s *Store) FeedSlot(string) int { return store.NoSlot }

// refresh does nothing: the masters of a quorum are standalone.
func (s *Store) Refresh(context.Context) {}

func (s *Store) OpenFeed(ctx context.Context, channel string) (store.Feed, bool) {
	f := &quorumFeed{feeds: make([]store.Feed, len(s.nodes)), confirmedBy: make(map[string][]bool)}
	for i, n := range s.nodes {
		// A standalone client's feed connects on its first SUBSCRIBE.
		f.feeds[i], _ = n.OpenFeed(ctx, channel)
	}
	return f, false
}

// quorumFeed fans the subscription connections of all masters into one.
type quorumFeed struct {
	feeds []store.Feed
	wg    sync.WaitGroup // subscriptions and unsubscriptions still being made

	mu sync.Mutex
	// confirmedBy records which masters confirmed a channel since it was
	// subscribed: the first confirmation is the channel's, and a master
	// that confirms again has reconnected and may have missed a release.
	confirmedBy map[string][]bool
}

// subscribe subscribes channel on every master and returns once one of them
// has it, or all failed: one subscription is enough to hear a release, and a
// master that is slow to answer must not hold up the wait.
func (f *quorumFeed) Subscribe(ctx context.Context, channel string) error {
	f.mu.Lock()
	f.confirmedBy[channel] = make([]bool, len(f.feeds))
	f.mu.Unlock()
	errs := make(chan error, len(f.feeds))
	for _, sub := range f.feeds {
		f.wg.Go(func() {
			ctx, cancel := outliving(ctx)
			defer cancel()
			errs <- sub.Subscribe(ctx, channel)
		})
	}
	var failed []error
	for range f.feeds {
		select {
		case err := <-errs:
			if err == nil {
				return nil
			}
			failed = append(failed, err)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return errors.Join(failed...)
}

// unsubscribe drops channel on every master; one stuck behind a slow
// subscription finishes on its own (close waits for it).
func (f *quorumFeed) Unsubscribe(ctx context.Context, channel string) error {
	f.mu.Lock()
	delete(f.confirmedBy, channel)
	f.mu.Unlock()
	errs := make(chan error, len(f.feeds))
	for _, sub := range f.feeds {
		f.wg.Go(func() {
			ctx, cancel := outliving(ctx)
			defer cancel()
			errs <- sub.Unsubscribe(ctx, channel)
		})
	}
	var failed []error
	for range f.feeds {
		select {
		case err := <-errs:
			failed = append(failed, err)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return errors.Join(failed...)
}

// orphanTimeout bounds a master's part of a request whose caller set no
// deadline.
const orphanTimeout = 3 * time.Second

// outliving returns a context for a master's part of a request that may
// finish after its caller has returned: ctx's values and deadline, not its
// cancellation. The deadline keeps a master that cannot be reached from
// holding up close.
func outliving(ctx context.Context) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(base, d)
	}
	return context.WithTimeout(base, orphanTimeout)
}

// Read reads every master's connection until Close, passing on each
// notice and the confirmations that matter (see confirmedBy).
func (f *quorumFeed) Read(ev store.FeedEvents) {
	var wg sync.WaitGroup
	for i, sub := range f.feeds {
		wg.Go(func() {
			sub.Read(store.FeedEvents{
				Confirmed: func(channel string) {
					if f.confirm(i, channel) {
						ev.Confirmed(channel)
					}
				},
				Dropped: ev.Dropped,
				Notice:  ev.Notice,
			})
		})
	}
	wg.Wait()
}

// confirm records master i's confirmation of channel and reports whether
// to pass it on: the channel's first, or a master's second (a reconnect).
func (f *quorumFeed) confirm(i int, channel string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	by := f.confirmedBy[channel]
	if by == nil {
		return true // not subscribed now: the notifier ignores it
	}
	first := !slices.Contains(by, true)
	again := by[i]
	by[i] = true
	return first || again
}

func (f *quorumFeed) Close() error {
	errs := make([]error, len(f.feeds))
	for i, sub := range f.feeds {
		errs[i] = sub.Close()
	}
	f.wg.Wait()
	return errors.Join(errs...)
}
