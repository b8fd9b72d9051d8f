package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf16"
	"unicode/utf8"

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

// writeJSON writes v as one line of JSON, with every rune that is not
// printable escaped: encoding/json escapes C0 controls (ESC is \u001b) but
// writes DEL, C1 controls (U+009B is a CSI to some terminals) and format
// characters (U+202E) raw.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(escapeJSON(b), '\n'))
	return err
}

// escapeJSON escapes as \uXXXX every rune of b, compact JSON from
// json.Marshal, that is not printable. Such a rune can only be inside a
// string, as Marshal writes nothing but ASCII outside them, and Marshal
// has already replaced invalid UTF-8 with U+FFFD.
func escapeJSON(b []byte) []byte {
	if !bytes.ContainsFunc(b, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case strconv.IsPrint(r):
			out = append(out, b[:size]...)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		b = b[size:]
	}
	return out
}

// printable returns s with every rune that is not printable (a C0 or C1
// control such as ESC, DEL, a format character such as U+202E) and every
// byte that is not UTF-8 escaped as Go writes them in a quoted string
// (\x1b, \u202e, \xff), so that nothing read from Redis reaches a terminal
// raw. Printable runes, a backslash among them, are left as they are.
func printable(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r == utf8.RuneError || !strconv.IsPrint(r) }) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case strconv.IsPrint(r):
			b.WriteString(s[:size])
		default:
			q := strconv.QuoteRune(r) // '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[size:]
	}
	return b.String()
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", printable(st.Key), s.mode, s.holders, duration(s.left), token(s.token), len(st.Waiters))
	}
	return tw.Flush()
}

// writeLock writes show's view of one lock.
func writeLock(w io.Writer, prefix string, st guard.LockState) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "lock\t%s\n", printable(st.Key))
	fmt.Fprintf(tw, "redis key\t%s\n", printable(prefix+"{"+st.Key+"}"))
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
		if err := writeHolders(w, st.Holders); err != nil {
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
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", identity(wt.Identity), mode(wt.Write), duration(wt.Left), printable(wt.Locker), printable(wt.Owner))
	}
	return tw.Flush()
}

// writeHolders writes the table of holders that show writes under
// "holders:", indented.
func writeHolders(w io.Writer, holders []guard.Holder) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  IDENTITY\tMODE\tWRITES\tREADS\tLEFT\tTOKEN\tMINHOLD\tOWNER")
	for _, h := range holders {
		m := mode(h.Write)
		if h.Lingering() {
			m += " (released, kept for MinHold)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", identity(h.Identity), m, h.Writes, h.Reads, duration(h.Left), h.Token, duration(h.MinHold), printable(h.Owner))
	}
	return tw.Flush()
}

// writeEnded writes the first part of release's view: the holds that a
// force-release ended (as ForceRelease returned them, LEFT being what each
// had left), in show's table of holders under a heading that says they
// ended.
func writeEnded(w io.Writer, ended guard.LockState) error {
	holds := "holds"
	if len(ended.Holders) == 1 {
		holds = "hold"
	}
	fmt.Fprintf(w, "ended %d %s of %s; each holder learns it at its next renewal:\n", len(ended.Holders), holds, strconv.Quote(ended.Key))
	return writeHolders(w, ended.Holders)
}

// writeNow writes the second part of release's view: the lock as a read
// after the release found it, under "now:", as show writes it, or
// "now: free" when nobody holds or waits for it.
func writeNow(w io.Writer, prefix string, now guard.LockState) error {
	if !held(now) {
		_, err := fmt.Fprintf(w, "now: free (fencing counter %s)\n", token(now.Fence))
		return err
	}
	fmt.Fprintln(w, "now:")
	return writeLock(w, prefix, now)
}

// identity is a holder's or waiter's identity as text output shows it.
func identity(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return printable(s)
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
