package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jobguard/jobguard/guard"
)

// lockJSON is a lock in --json output; the package doc lists its fields,
// whose names are stable.
type lockJSON struct {
	Key     string       `json:"key"`
	Fence   int64        `json:"fence"`
	Permits int          `json:"permits,omitempty"` // only for a key held as permits
	Holders []holderJSON `json:"holders"`
	Waiters []waiterJSON `json:"waiters"`
}

type holderJSON struct {
	Identity  string `json:"identity"`
	Owner     string `json:"owner"`
	Mode      string `json:"mode"`
	Writes    int    `json:"writes"`
	Reads     int    `json:"reads"`
	LeftMS    int64  `json:"left_ms"`
	Token     int64  `json:"token"`
	MinHoldMS int64  `json:"min_hold_ms"`
	Lingering bool   `json:"lingering"`
}

type waiterJSON struct {
	Identity string `json:"identity"`
	Owner    string `json:"owner"`
	Locker   string `json:"locker"`
	Mode     string `json:"mode"`
	LeftMS   int64  `json:"left_ms"`
}

func toJSON(st guard.LockState) lockJSON {
	j := lockJSON{Key: st.Key, Fence: st.Fence, Permits: st.Permits, Holders: []holderJSON{}, Waiters: []waiterJSON{}}
	for _, h := range st.Holders {
		left := h.Left.Milliseconds()
		if h.Left < 0 {
			left = -1
		}
		j.Holders = append(j.Holders, holderJSON{
			Identity: h.Identity, Owner: h.Owner, Mode: mode(h.Write), Writes: h.Writes, Reads: h.Reads,
			LeftMS: left, Token: h.Token, MinHoldMS: h.MinHold.Milliseconds(), Lingering: h.Lingering(),
		})
	}
	for _, w := range st.Waiters {
		j.Waiters = append(j.Waiters, waiterJSON{Identity: w.Identity, Owner: w.Owner, Locker: w.Locker, Mode: mode(w.Write), LeftMS: w.Left.Milliseconds()})
	}
	return j
}

func mode(write bool) string {
	if write {
		return "write"
	}
	return "read"
}

// writeJSON writes v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// summary is a lock on one line of ls.
type summary struct {
	mode    string
	holders string
	left    time.Duration
	token   int64
}

func summarize(st guard.LockState) summary {
	s := summary{mode: "minhold"}
	for _, h := range st.Holders {
		if !h.Lingering() {
			s.mode = mode(h.Write)
		}
		if h.Left < 0 || (s.left >= 0 && h.Left > s.left) {
			s.left = h.Left
		}
		s.token = max(s.token, h.Token)
	}
	switch n := len(st.Holders); n {
	case 0:
		s.mode, s.holders = "-", "-"
	case 1:
		s.holders = identity(st.Holders[0].Identity)
	default:
		s.holders = fmt.Sprintf("%s +%d", identity(st.Holders[0].Identity), n-1)
	}
	return s
}

// writeList writes ls's table.
func writeList(w io.Writer, locks []guard.LockState) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tMODE\tHOLDERS\tLEFT\tTOKEN\tWAITERS")
	for _, st := range locks {
		s := summarize(st)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", st.Key, s.mode, s.holders, duration(s.left), token(s.token), len(st.Waiters))
	}
	return tw.Flush()
}

// writeLock writes show's view of one lock.
func writeLock(w io.Writer, prefix string, st guard.LockState) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "lock\t%s\n", st.Key)
	fmt.Fprintf(tw, "redis key\t%s{%s}\n", prefix, st.Key)
	fmt.Fprintf(tw, "fencing counter\t%s\n", token(st.Fence))
	if st.Permits > 0 {
		fmt.Fprintf(tw, "permits\t%d (up to %d write holders at once)\n", st.Permits, st.Permits)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Holders) == 0 {
		fmt.Fprintln(w, "holders: none (free)")
	} else {
		fmt.Fprintf(w, "holders: %d\n", len(st.Holders))
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  IDENTITY\tMODE\tWRITES\tREADS\tLEFT\tTOKEN\tMINHOLD\tOWNER")
		for _, h := range st.Holders {
			m := mode(h.Write)
			if h.Lingering() {
				m += " (released, kept for MinHold)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", identity(h.Identity), m, h.Writes, h.Reads, duration(h.Left), h.Token, duration(h.MinHold), h.Owner)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(st.Waiters) == 0 {
		_, err := fmt.Fprintln(w, "waiters: none")
		return err
	}
	fmt.Fprintf(w, "waiters: %d\n", len(st.Waiters))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  IDENTITY\tMODE\tLEFT\tLOCKER\tOWNER")
	for _, wt := range st.Waiters {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", identity(wt.Identity), mode(wt.Write), duration(wt.Left), wt.Locker, wt.Owner)
	}
	return tw.Flush()
}

func identity(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

func token(t int64) string {
	if t == 0 {
		return "-"
	}
	return strconv.FormatInt(t, 10)
}

// duration formats a time left: tenths of a second from a second up,
// milliseconds below, "-" for none and "never" for no expiry.
func duration(d time.Duration) string {
	switch {
	case d < 0:
		return "never"
	case d == 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
