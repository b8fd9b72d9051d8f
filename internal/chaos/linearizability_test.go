package chaos_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/chaos"
)

func TestLinearizability(t *testing.T) {
	ev := func(kind string, tok, read, value int64) chaos.Event {
		return chaos.Event{Kind: kind, Lease: 1, Token: tok, Read: p64(read), Value: p64(value)}
	}
	acquired := func(tok int64) chaos.Event { return chaos.Event{Kind: chaos.EvAcquired, Lease: 1, Token: tok} }
	// A holder with token 100 that reads 0, is overtaken by token 101's
	// whole read-modify-write, then writes with outcome (at 30, 31).
	overtaken := func(outcome string) []chaos.Event {
		h := newHist("a", 0).add(10, acquired(100)).add(11, ev(chaos.EvRead, 100, 0, 0)).
			add(30, ev(chaos.EvWrite, 100, 0, 1))
		if outcome != "" {
			h.add(31, ev(outcome, 100, 0, 1))
		}
		return h.evs
	}
	lateRead := func(sent bool) []chaos.Event {
		h := newHist("a", 0).add(10, acquired(100))
		if sent {
			h.add(30, chaos.Event{Kind: chaos.EvReadSent, Lease: 1, Token: 100})
		}
		return h.add(31, ev(chaos.EvRead, 100, 0, 0)).add(32, chaos.Event{Kind: chaos.EvAbandon, Lease: 1, Token: 100, Read: p64(0)}).evs
	}
	tests := []struct {
		name      string
		histories [][]chaos.Event
		final     int64
		unfenced  bool // Group.UnfencedReads
		// register and lease: whether each model accepts the history.
		register, lease bool
	}{
		{name: "clean hand-offs", final: 3, register: true, lease: true, histories: [][]chaos.Event{
			newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteOK).rmw(40, 2, 102, 2, chaos.EvWriteOK).end(60),
			newHist("b", 0).rmw(20, 1, 101, 1, chaos.EvWriteOK).end(60),
		}},
		{name: "stale write refused", final: 1, register: true, lease: true, histories: [][]chaos.Event{
			overtaken(chaos.EvWriteStale),
			newHist("b", 0).rmw(20, 1, 101, 0, chaos.EvWriteOK).end(60),
		}},
		{name: "stale-token write accepted", final: 1, register: false, lease: false, histories: [][]chaos.Event{
			overtaken(chaos.EvWriteOK),
			newHist("b", 0).rmw(20, 1, 101, 0, chaos.EvWriteOK).end(60),
		}},
		{name: "fenced reads interleaved, both writes accepted", final: 1, register: false, lease: false, histories: [][]chaos.Event{
			newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteOK).end(60),
			newHist("b", 0).rmw(12, 1, 101, 0, chaos.EvWriteOK).end(60),
		}},
		// Reads never answered (as if unfenced): the register cannot see
		// that both writes read 0; the lease model can.
		{name: "lost update", final: 1, register: true, lease: false, histories: [][]chaos.Event{
			newHist("a", 0).add(10, acquired(100)).add(15, ev(chaos.EvWrite, 100, 0, 1)).add(16, ev(chaos.EvWriteOK, 100, 0, 1)).evs,
			newHist("b", 0).add(20, acquired(101)).add(25, ev(chaos.EvWrite, 101, 0, 1)).add(26, ev(chaos.EvWriteOK, 101, 0, 1)).evs,
		}},
		{name: "lost update with unfenced reads", final: 1, unfenced: true, register: true, lease: false, histories: [][]chaos.Event{
			newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteOK).end(60),
			newHist("b", 0).rmw(12, 1, 101, 0, chaos.EvWriteOK).end(60),
		}},
		{name: "read of a value never written", final: 6, register: false, lease: false, histories: [][]chaos.Event{
			newHist("a", 0).rmw(10, 1, 100, 5, chaos.EvWriteOK).end(60),
		}},
		{name: "final value never written", final: 7, register: false, lease: false, histories: [][]chaos.Event{
			newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteOK).end(60),
		}},
		{name: "unknown write taken as applied", final: 2, register: true, lease: true, histories: [][]chaos.Event{
			overtaken(chaos.EvWriteError), // token 100 writes 1 at 30: applied
			newHist("b", 0).rmw(40, 1, 101, 1, chaos.EvWriteOK).end(60),
		}},
		{name: "unknown write taken as not applied", final: 1, register: true, lease: true, histories: [][]chaos.Event{
			newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteError).end(60),
			newHist("b", 0).rmw(40, 1, 101, 0, chaos.EvWriteOK).end(60),
		}},
		{name: "killed writer taken as applied", final: 2, register: true, lease: true, histories: [][]chaos.Event{
			overtaken(""), // killed after its write was sent
			newHist("b", 0).rmw(40, 1, 101, 1, chaos.EvWriteOK).end(60),
		}},
		{name: "killed writer taken as not applied", final: 1, register: true, lease: true, histories: [][]chaos.Event{
			overtaken(""),
			newHist("b", 0).rmw(40, 1, 101, 0, chaos.EvWriteOK).end(60),
		}},
		// Token 100's holder stopped between its acquisition and its
		// read; the read, sent at 30 after token 101's read raised the
		// fence, was accepted (a broken read fence). Its read_sent event
		// places it; without one, it could pass as a read at 10.
		{name: "read accepted after a newer token's read", final: 1, register: false, lease: false, histories: [][]chaos.Event{
			lateRead(true),
			newHist("b", 0).rmw(20, 1, 101, 0, chaos.EvWriteOK).end(60),
		}},
		{name: "read accepted after a newer token's read, send time not recorded", final: 1, register: true, lease: true, histories: [][]chaos.Event{
			lateRead(false),
			newHist("b", 0).rmw(20, 1, 101, 0, chaos.EvWriteOK).end(60),
		}},
		// Token 100's write never answered; token 101's read-modify-write
		// was accepted after it: 100's value can no longer be applied.
		{name: "unknown write cannot land after a higher token", final: 7, register: false, lease: false, histories: [][]chaos.Event{
			newHist("a", 0).add(10, acquired(100)).add(11, ev(chaos.EvRead, 100, 0, 0)).add(12, ev(chaos.EvWrite, 100, 0, 7)).
				add(13, ev(chaos.EvWriteError, 100, 0, 7)).evs,
			newHist("b", 0).rmw(40, 1, 101, 0, chaos.EvWriteOK).end(60),
		}},
		{name: "unknown write cannot explain a value it did not write", final: 1, register: false, lease: false, histories: [][]chaos.Event{
			newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteError).end(60),
			newHist("b", 0).rmw(40, 1, 101, 4, chaos.EvWriteOK).end(60),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, err := chaos.Linearizability(chaos.Group{Scenario: "s", Histories: tt.histories, Final: tt.final, UnfencedReads: tt.unfenced})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{"register": tt.register, "lease": tt.lease}
			if len(vs) != 2 {
				t.Fatalf("verdicts %v: want 2", vs)
			}
			for _, v := range vs {
				if got := v.Result == chaos.Linearizable; got != want[v.Model] || (!got && v.Result != chaos.NotLinearizable) {
					t.Errorf("%s", v)
				}
			}
		})
	}
}

// A history porcupine cannot decide within the check's timeout is
// undecided, and Check fails on it: 24 writes whose outcome nobody learnt,
// all at once, and a final value none of them wrote leave porcupine every
// subset in every order to rule out.
func TestUndecidedHistoryFails(t *testing.T) {
	var hs [][]chaos.Event
	for i := range 24 {
		tok := int64(100 + i)
		h := newHist(string(rune('a'+i)), 0).add(10, chaos.Event{Kind: chaos.EvAcquired, Lease: 1, Token: tok}).
			add(11, chaos.Event{Kind: chaos.EvReadError, Lease: 1, Token: tok})
		hs = append(hs, h.add(12, chaos.Event{Kind: chaos.EvWrite, Lease: 1, Token: tok, Read: p64(0), Value: p64(tok)}).evs)
	}
	r := chaos.Check(chaos.Group{Scenario: "s", Histories: hs, Final: 999, CheckTimeout: 50 * time.Millisecond})
	if len(r.Verdicts) != 2 {
		t.Fatalf("verdicts %v", r.Verdicts)
	}
	for _, v := range r.Verdicts {
		if v.Result != chaos.Undecided {
			t.Errorf("%s: want undecided", v)
		}
	}
	if f := strings.Join(r.Failures(), "\n"); !strings.Contains(f, "undecided") {
		t.Errorf("failures %q: want the undecided verdicts", r.Failures())
	}
}

func TestCheckFailsOnPorcupineAndWritesItsVisualization(t *testing.T) {
	dir := t.TempDir()
	a := newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteOK).end(60)
	b := newHist("b", 0).rmw(12, 1, 101, 0, chaos.EvWriteOK).end(60)
	r := chaos.Check(chaos.Group{Scenario: "sentinel, no ack", Histories: [][]chaos.Event{a, b}, Final: 1, VisualizeDir: dir})
	if len(r.Verdicts) != 2 {
		t.Fatalf("verdicts %v", r.Verdicts)
	}
	for _, v := range r.Verdicts {
		if v.Result != chaos.NotLinearizable || v.Visualization == "" {
			t.Fatalf("%s: want rejected with a visualization", v)
		}
		b, err := os.ReadFile(v.Visualization)
		if err != nil || !strings.Contains(string(b), "<html") {
			t.Fatalf("visualization %s: %v, %d bytes", v.Visualization, err, len(b))
		}
		if !strings.HasPrefix(v.Visualization, dir) || !strings.HasSuffix(v.Visualization, "porcupine-sentinel--no-ack-"+v.Model+".html") {
			t.Errorf("visualization at %s", v.Visualization)
		}
	}
	if f := strings.Join(r.Failures(), "\n"); !strings.Contains(f, "porcupine (lease model): not linearizable") {
		t.Errorf("failures %q", r.Failures())
	}
}

func TestCheckReportsDisagreement(t *testing.T) {
	// Two leases with the same token, one after the other: fencing lets an
	// equal token pass and no update is lost, so porcupine accepts the
	// history; the hand-written checker calls it a violation. Both are
	// reported, and porcupine's verdict decides.
	a := newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteOK).end(60)
	b := newHist("b", 0).rmw(20, 1, 100, 1, chaos.EvWriteOK).end(60)
	r := chaos.Check(chaos.Group{Scenario: "s", Histories: [][]chaos.Event{a, b}, Final: 2})
	if len(r.Violations) != 1 || !strings.Contains(r.Violations[0], "two accepted writes with token 100") {
		t.Fatalf("violations %q", r.Violations)
	}
	if !strings.Contains(r.Disagreement, "porcupine found the history linearizable") || len(r.Failures()) != 0 {
		t.Fatalf("disagreement %q, failures %q", r.Disagreement, r.Failures())
	}
	for _, v := range r.Verdicts {
		if v.Result != chaos.Linearizable || v.Operations != 5 {
			t.Errorf("%s: want linearizable, 5 operations (2 reads, 2 writes, the final read)", v)
		}
	}
}
