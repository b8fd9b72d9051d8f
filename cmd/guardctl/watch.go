package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jobguard/jobguard/guard"
)

// watch reads key every --interval until ctx is done (an interrupt) and
// prints it: on a terminal it redraws the screen at every read, otherwise
// (a pipe, a file, or --json) it prints a snapshot when the lock changed. A
// failed first read ends the watch; later failures are reported once and
// the watch goes on.
func (c *cli) watch(ctx context.Context, key string) int {
	redraw := !c.opts.json && isTerminal(c.stdout)
	ticker := time.NewTicker(c.opts.interval)
	defer ticker.Stop()
	var last string
	for reads := 0; ; reads++ {
		st, err := c.locker.Inspect(ctx, key)
		switch {
		case ctx.Err() != nil:
			return exitFound
		case err != nil && reads == 0:
			return c.failed(fmt.Sprintf("lock %q", key), err)
		case err != nil:
			if last != "failing" {
				c.fail("could not read lock %q: %v; still trying every %v", key, err, c.opts.interval)
				last = "failing"
			}
		default:
			if now := fingerprint(st); redraw || now != last {
				last = now
				if err := c.draw(st, redraw); err != nil {
					c.fail("write: %v", err)
					return exitUsage
				}
			}
		}
		select {
		case <-ctx.Done():
			return exitFound
		case <-ticker.C:
		}
	}
}

// draw prints one snapshot of st.
func (c *cli) draw(st guard.LockState, redraw bool) error {
	if c.opts.json {
		return writeJSON(c.stdout, toJSON(st))
	}
	w := c.stdout
	if redraw {
		fmt.Fprint(w, "\x1b[H\x1b[2J") // home, clear screen
		fmt.Fprintf(w, "guardctl watch %s: every %v, Ctrl-C to stop\n\n", printable(st.Key), c.opts.interval)
	} else {
		fmt.Fprintf(w, "--- %s\n", time.Now().Format("15:04:05.000"))
	}
	if !held(st) {
		_, err := fmt.Fprintf(w, "lock %s is free (fencing counter %s)\n", printable(st.Key), token(st.Fence))
		return err
	}
	return writeLock(w, c.opts.prefix, st)
}

// fingerprint is what a change of st changes: everything but the times
// left, which change at every read.
func fingerprint(st guard.LockState) string {
	j := toJSON(st)
	for i := range j.Holders {
		j.Holders[i].LeftMS, j.Holders[i].MinHoldMS = 0, 0
	}
	for i := range j.Waiters {
		j.Waiters[i].LeftMS = 0
	}
	b, _ := json.Marshal(j) // plain strings and numbers: cannot fail
	return string(b)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
