package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jobguard/jobguard/guard"
)

// list is ls: every lock whose key matches pattern, sorted by key.
func (c *cli) list(ctx context.Context, pattern string) int {
	var locks []guard.LockState
	err := c.locker.Scan(ctx, pattern, func(st guard.LockState) error {
		locks = append(locks, st)
		return nil
	})
	if err != nil {
		return c.failed(fmt.Sprintf("the locks matching %q", pattern), err)
	}
	slices.SortFunc(locks, func(a, b guard.LockState) int { return strings.Compare(a.Key, b.Key) })
	if c.opts.json {
		out := make([]lockJSON, 0, len(locks))
		for _, st := range locks {
			out = append(out, toJSON(st))
		}
		err = writeJSON(c.stdout, out)
	} else if len(locks) > 0 {
		err = writeList(c.stdout, locks)
	}
	if err != nil {
		c.fail("write: %v", err)
		return exitUsage
	}
	if len(locks) == 0 {
		c.fail("no lock matches %s under prefix %q; check the pattern and --prefix", shownArg(pattern), c.opts.prefix)
		return exitNotFound
	}
	return exitFound
}

// show prints one lock; a free key is not found.
func (c *cli) show(ctx context.Context, key string) int {
	st, err := c.locker.Inspect(ctx, key)
	if err != nil {
		return c.failed(fmt.Sprintf("lock %q", key), err)
	}
	if c.opts.json {
		err = writeJSON(c.stdout, toJSON(st))
	} else if held(st) {
		err = writeLock(c.stdout, c.opts.prefix, st)
	}
	if err != nil {
		c.fail("write: %v", err)
		return exitUsage
	}
	if !held(st) {
		c.fail("lock %q is free: nobody holds or waits for it under prefix %q (fencing counter %s); check the key and --prefix", key, c.opts.prefix, token(st.Fence))
		return exitNotFound
	}
	return exitFound
}

// release force-releases one lock and prints the holds it ended, then the
// lock as it is after the release (see printReleased); --json prints only
// the lock it ended.
func (c *cli) release(ctx context.Context, key string) int {
	st, err := c.locker.ForceRelease(ctx, key)
	if err != nil {
		return c.failed(fmt.Sprintf("lock %q", key), err)
	}
	if c.opts.json {
		err = writeJSON(c.stdout, toJSON(st))
	} else if len(st.Holders) > 0 {
		err = c.printReleased(ctx, st)
	}
	if err != nil {
		c.fail("write: %v", err)
		return exitUsage
	}
	if len(st.Holders) == 0 {
		c.fail("lock %q was not held under prefix %q: nothing released; check the key and --prefix", key, c.opts.prefix)
		return exitNotFound
	}
	return exitFound
}

// printReleased prints the holds that a force-release ended, then reads
// the lock again as show does and prints it as it is now: a waiter may
// have taken it already. A failed read is reported and leaves the second
// part out: the release is done all the same. The error is a failed write.
func (c *cli) printReleased(ctx context.Context, ended guard.LockState) error {
	if err := writeEnded(c.stdout, ended); err != nil {
		return err
	}
	now, err := c.locker.Inspect(ctx, ended.Key)
	if err != nil {
		c.fail("released lock %q, but could not read it again: %s; see it with 'guardctl show %s'", ended.Key, scrub(err.Error(), c.opts.url), ended.Key)
		return nil
	}
	return writeNow(c.stdout, c.opts.prefix, now)
}

func held(st guard.LockState) bool { return len(st.Holders) > 0 || len(st.Waiters) > 0 }
