package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jobguard/jobguard/guard"
)

func TestPrintable(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", "report-7 gamma 3", "report-7 gamma 3"},
		{"unicode", "café/日本", "café/日本"},
		{"backslash", `a\b`, `a\b`},
		{"escape", "x\x1b[2Jy", `x\x1b[2Jy`},
		{"C0", "\x00\a\b\t\n\r", `\x00\a\b\t\n\r`},
		{"DEL", "a\x7fb", `a\x7fb`},
		{"C1", "a\u0085b\u009b", `a\u0085b\u009b`},
		{"format", "a\u202eb\u200b", `a\u202eb\u200b`},
		{"invalid UTF-8", "a\xffb\xc3", `a\xffb\xc3`},
		{"replacement character", "a\uFFFDb", "a\uFFFDb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := printable(tc.in); got != tc.want {
				t.Errorf("printable(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// hostileLock is a lock whose every string read from Redis carries what a
// terminal would obey.
func hostileLock() guard.LockState {
	return guard.LockState{
		Key: "evil\x1b[2J\x7f\u009b\xff",
		Holders: []guard.Holder{{
			Owner: "own\x1b]0;pwned\a", Identity: "id\x1b[31m\u202e", Write: true, Writes: 1,
			Token: 7, Left: time.Second,
		}},
		Waiters: []guard.Waiter{{Locker: "lk\x1b[H", Owner: "wo\r\x1b[K", Identity: "wi\x00", Left: time.Second}},
		Fence:   7,
	}
}

// rawControl returns the first rune of out that is not printable (or a
// byte that is not UTF-8), other than a newline or those in allowed.
func rawControl(out, allowed string) (rune, bool) {
	out = strings.ReplaceAll(out, allowed, "")
	for _, r := range out {
		if r == utf8.RuneError || (r != '\n' && !strconv.IsPrint(r)) {
			return r, true
		}
	}
	return 0, false
}

// Text output escapes what is not printable in keys, identities, owners
// and Locker ids; watch's redraw keeps only its own clear-screen sequence.
func TestTextEscapes(t *testing.T) {
	c := &cli{opts: options{prefix: "guard:", interval: time.Second}}
	hostile := hostileLock()
	for _, tc := range []struct {
		name    string
		write   func(*bytes.Buffer) error
		allowed string
	}{
		{"ls", func(b *bytes.Buffer) error { return writeList(b, []guard.LockState{hostile}) }, ""},
		{"show", func(b *bytes.Buffer) error { return writeLock(b, "guard:", hostile) }, ""},
		{"watch", func(b *bytes.Buffer) error { c.stdout = b; return c.draw(hostile, false) }, ""},
		{"watch redraw", func(b *bytes.Buffer) error { c.stdout = b; return c.draw(hostile, true) }, "\x1b[H\x1b[2J"},
		{"watch free", func(b *bytes.Buffer) error { c.stdout = b; return c.draw(guard.LockState{Key: hostile.Key}, false) }, ""},
		{"release ended", func(b *bytes.Buffer) error { return writeEnded(b, hostile) }, ""},
		{"release now", func(b *bytes.Buffer) error { return writeNow(b, "guard:", hostile) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.write(&b); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if r, found := rawControl(out, tc.allowed); found {
				t.Errorf("output holds %q raw:\n%q", r, out)
			}
			if !strings.Contains(out, `evil\x1b[2J\x7f\u009b\xff`) {
				t.Errorf("output lacks the escaped key:\n%s", out)
			}
			if tc.name == "show" || tc.name == "release now" {
				for _, want := range []string{`id\x1b[31m\u202e`, `own\x1b]0;pwned\a`, `lk\x1b[H`, `wo\r\x1b[K`, `wi\x00`} {
					if !strings.Contains(out, want) {
						t.Errorf("show lacks %s:\n%s", want, out)
					}
				}
			}
		})
	}
}

// --json escapes ESC as \u001b, as encoding/json does, and also DEL, C1
// controls and format characters, which encoding/json writes raw; the
// values read back unchanged.
func TestJSONEscapes(t *testing.T) {
	st := hostileLock()
	st.Key = "evil\x1b[2J\x7f\u009b\u202e\U000E0001" // valid UTF-8: it must read back the same
	var b bytes.Buffer
	if err := writeJSON(&b, toJSON(st)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if r, found := rawControl(out, ""); found {
		t.Errorf("--json holds %q raw: %s", r, out)
	}
	for _, want := range []string{`evil\u001b[2J\u007f\u009b\u202e\udb40\udc01`, `own\u001b]0;pwned\u0007`} {
		if !strings.Contains(out, want) {
			t.Errorf("--json lacks %s: %s", want, out)
		}
	}
	var got lockJSON
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Key != st.Key || got.Holders[0].Owner != st.Holders[0].Owner || got.Waiters[0].Owner != st.Waiters[0].Owner {
		t.Errorf("read back %+v", got)
	}
}
