package chaos_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/chaos"
)

// hist builds a worker's history from compact steps; times are ms.
type hist struct {
	w   string
	evs []chaos.Event
}

func newHist(w string, at int64) *hist {
	h := &hist{w: w}
	return h.add(at, chaos.Event{Kind: chaos.EvStart})
}

func (h *hist) add(at int64, e chaos.Event) *hist {
	e.Worker, e.Seq, e.Wall, e.Mono = h.w, len(h.evs)+1, at*int64(time.Millisecond), at*int64(time.Millisecond)
	h.evs = append(h.evs, e)
	return h
}

func p64(v int64) *int64 { return &v }

// rmw adds a whole lease: acquired at at, read, write with outcome, release.
func (h *hist) rmw(at int64, lease int, tok, read int64, outcome string) *hist {
	h.add(at, chaos.Event{Kind: chaos.EvAcquired, Lease: lease, Token: tok})
	h.add(at+1, chaos.Event{Kind: chaos.EvRead, Lease: lease, Token: tok, Read: p64(read)})
	h.add(at+5, chaos.Event{Kind: chaos.EvWrite, Lease: lease, Token: tok, Read: p64(read), Value: p64(read + 1)})
	if outcome != "" {
		h.add(at+6, chaos.Event{Kind: outcome, Lease: lease, Token: tok, Read: p64(read), Value: p64(read + 1)})
	}
	h.add(at+7, chaos.Event{Kind: chaos.EvRelease, Lease: lease, Token: tok})
	h.add(at+8, chaos.Event{Kind: chaos.EvCtxDone, Lease: lease, Token: tok, Cause: "released"})
	return h.add(at+8, chaos.Event{Kind: chaos.EvReleased, Lease: lease, Token: tok})
}

func (h *hist) end(at int64) []chaos.Event {
	h.add(at, chaos.Event{Kind: chaos.EvEnd})
	return h.evs
}

func ms(v int64) int64 { return v * int64(time.Millisecond) }

func TestCheckCleanHandOff(t *testing.T) {
	a := newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteOK).rmw(40, 2, 102, 2, chaos.EvWriteOK).end(60)
	b := newHist("b", 0).rmw(20, 1, 101, 1, chaos.EvWriteOK).end(60)
	r := chaos.Check(chaos.Group{Scenario: "s", Histories: [][]chaos.Event{a, b}, Final: 3,
		Faults: []chaos.Fault{{Kind: "k", Start: ms(15), End: ms(18)}}, Window: 100 * time.Millisecond})
	if f := r.Failures(); len(f) != 0 {
		t.Fatalf("failures %q, violations %q", f, r.Violations)
	}
	k := kind(t, r, "k")
	if k.Faults != 1 || k.Accepted != 3 || k.Operations != 2 || len(k.Recoveries) != 1 || k.Recoveries[0] != 8*time.Millisecond {
		t.Errorf("row %+v", k)
	}
}

func TestCheckInterleavedWritesAreAViolation(t *testing.T) {
	// Both read 0, both writes accepted: the second lost the first's update.
	a := newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteOK).end(60)
	b := newHist("b", 0).rmw(12, 1, 101, 0, chaos.EvWriteOK).end(60)
	r := chaos.Check(chaos.Group{Scenario: "s", Histories: [][]chaos.Event{a, b}, Final: 1})
	// a's write (token 100) was also sent after b's read (101) was accepted.
	if len(r.Violations) != 2 || !strings.Contains(r.Violations[0], "read 0, but the counter was 1") ||
		!strings.Contains(r.Violations[1], "write with token 100 was accepted, sent after worker b's read with token 101") {
		t.Fatalf("violations %q", r.Violations)
	}
	if len(r.Failures()) == 0 {
		t.Fatal("no failure for a violation")
	}
}

func TestCheckLostUpdate(t *testing.T) {
	a := newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteOK).end(60)
	r := chaos.Check(chaos.Group{Scenario: "s", Histories: [][]chaos.Event{a}, Final: 0})
	if len(r.Violations) != 1 || !strings.Contains(r.Violations[0], "lost update") {
		t.Fatalf("violations %q", r.Violations)
	}
}

func TestCheckStaleWriteIsNoViolation(t *testing.T) {
	a := newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteStale).end(60)
	b := newHist("b", 0).rmw(12, 1, 101, 0, chaos.EvWriteOK).end(60)
	r := chaos.Check(chaos.Group{Scenario: "s", Histories: [][]chaos.Event{a, b}, Final: 1})
	if len(r.Violations) != 0 {
		t.Fatalf("violations %q", r.Violations)
	}
	if k := kind(t, r, chaos.NoFault); k.Rejected != 1 || k.Accepted != 1 {
		t.Errorf("row %+v", k)
	}
}

// lostLease: a holds token 100 from 10ms; its context is canceled (lost)
// at doneAt; b acquires at 50ms.
func lostLease(doneAt int64) [][]chaos.Event {
	a := newHist("a", 0)
	a.add(10, chaos.Event{Kind: chaos.EvAcquired, Lease: 1, Token: 100})
	a.add(11, chaos.Event{Kind: chaos.EvRead, Lease: 1, Token: 100, Read: p64(0)})
	a.add(doneAt, chaos.Event{Kind: chaos.EvCtxDone, Lease: 1, Token: 100, Cause: "guard: lease lost", Lost: true})
	a.add(doneAt, chaos.Event{Kind: chaos.EvAbandon, Lease: 1, Token: 100, Read: p64(0)})
	a.add(doneAt+1, chaos.Event{Kind: chaos.EvRelease, Lease: 1, Token: 100})
	a.add(doneAt+2, chaos.Event{Kind: chaos.EvReleased, Lease: 1, Token: 100, Err: "not held"})
	b := newHist("b", 0).rmw(50, 1, 101, 0, chaos.EvWriteOK)
	return [][]chaos.Event{a.end(100), b.end(100)}
}

func TestCheckLeaseLossToldInTime(t *testing.T) {
	r := chaos.Check(chaos.Group{Scenario: "s", Histories: lostLease(40), Final: 1,
		Faults: []chaos.Fault{{Kind: "cut", Start: ms(20), End: ms(30)}}, Window: time.Second})
	if f := r.Failures(); len(f) != 0 {
		t.Fatalf("failures %q", f)
	}
	if k := kind(t, r, "cut"); k.LeasesLost != 1 || k.ToldInTime != 1 || k.ToldLate != 0 {
		t.Errorf("row %+v", k)
	}
}

func TestCheckLeaseLossToldLate(t *testing.T) {
	g := chaos.Group{Scenario: "s", Histories: lostLease(70), Final: 1,
		Faults: []chaos.Fault{{Kind: "cut", Start: ms(20), End: ms(30)}}, Window: time.Second}
	r := chaos.Check(g)
	if k := kind(t, r, "cut"); k.LeasesLost != 1 || k.ToldLate != 1 {
		t.Errorf("row %+v", k)
	}
	if f := r.Failures(); len(f) != 1 || !strings.Contains(f[0], "told after another owner acquired") {
		t.Fatalf("failures %q", f)
	}
	// The same under a kind where only fencing can help is counted, not failed.
	g.FencingOnly = map[string]string{"cut": "because"}
	r = chaos.Check(g)
	if f := r.Failures(); len(f) != 0 {
		t.Fatalf("fencing-only failures %q", f)
	}
	if k := kind(t, r, "cut"); !k.FencingOnly || k.ToldLate != 1 {
		t.Errorf("row %+v", k)
	}
}

// A write whose outcome is unknown cannot explain the chain when its token
// is below the write before it: fencing would have refused it. Without
// that rule this history (100 wrote 1; 99 read 1 and its write failed; 101
// read 2) passed as a chain 0, 1, 2, 3.
func TestCheckUnknownWriteBelowChainIsAViolation(t *testing.T) {
	a := newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteOK).end(100)
	b := newHist("b", 0).rmw(20, 1, 99, 1, chaos.EvWriteError).end(100)
	c := newHist("c", 0).rmw(30, 1, 101, 2, chaos.EvWriteOK).end(100)
	r := chaos.Check(chaos.Group{Scenario: "s", Histories: [][]chaos.Event{a, b, c}, Final: 3})
	if len(r.Violations) == 0 || !strings.Contains(strings.Join(r.Violations, "\n"), "token 101 read 2, but the counter was 1") {
		t.Fatalf("violations %q", r.Violations)
	}
}

// A fenced read accepted with a token below one the resource had already
// accepted is a fencing failure even when no write follows it.
func TestCheckLowerTokenReadAfterHigherWrite(t *testing.T) {
	a := newHist("a", 0).rmw(10, 1, 101, 0, chaos.EvWriteOK).end(100)
	b := newHist("b", 0)
	b.add(30, chaos.Event{Kind: chaos.EvAcquired, Lease: 1, Token: 100})
	b.add(31, chaos.Event{Kind: chaos.EvRead, Lease: 1, Token: 100, Read: p64(1)})
	b.add(32, chaos.Event{Kind: chaos.EvAbandon, Lease: 1, Token: 100, Read: p64(1)})
	b.add(33, chaos.Event{Kind: chaos.EvRelease, Lease: 1, Token: 100})
	b.add(34, chaos.Event{Kind: chaos.EvCtxDone, Lease: 1, Token: 100, Cause: "released"})
	b.add(34, chaos.Event{Kind: chaos.EvReleased, Lease: 1, Token: 100})
	r := chaos.Check(chaos.Group{Scenario: "s", Histories: [][]chaos.Event{a, b.end(100)}, Final: 1})
	if len(r.Violations) != 1 || !strings.Contains(r.Violations[0], "read with token 100 was accepted, sent after worker a's") {
		t.Fatalf("violations %q", r.Violations)
	}
}

// A late announcement is excused only when every fault that hit the lease
// is one only fencing can help with: a link cut followed by a pause is
// still the cut's failure to tell.
func TestCheckLateExcusedOnlyUnderFencingOnlyFaults(t *testing.T) {
	g := chaos.Group{Scenario: "s", Histories: lostLease(70), Final: 1, Window: time.Second,
		Faults:      []chaos.Fault{{Kind: "cut", Start: ms(15), End: ms(20)}, {Kind: "pause", Start: ms(30), End: ms(40)}},
		FencingOnly: map[string]string{"pause": "a stopped process runs no code"}}
	r := chaos.Check(g)
	if len(r.Late) != 1 || len(r.Failures()) != 1 {
		t.Fatalf("late %q, failures %q: want the late announcement failed", r.Late, r.Failures())
	}
	// A cut of another worker's link cannot have kept a from being told.
	g.Faults[0].Target, g.Faults[1].Target = "b", "a"
	if r := chaos.Check(g); len(r.Late) != 0 || len(r.Failures()) != 0 {
		t.Fatalf("late %q, failures %q: want it excused (the cut hit b)", r.Late, r.Failures())
	}
	g.Faults[0].Target = "a"
	if r := chaos.Check(g); len(r.Late) != 1 {
		t.Fatalf("late %q: want the cut of a's own link failed", r.Late)
	}
	g.Faults = g.Faults[1:] // the pause alone
	if r := chaos.Check(g); len(r.Late) != 0 || len(r.Failures()) != 0 {
		t.Fatalf("late %q, failures %q: want it excused", r.Late, r.Failures())
	}
}

func TestCheckUnannouncedOverlapIsLate(t *testing.T) {
	// a released normally, but b acquired while a's job still ran.
	a := newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteStale).end(100)
	b := newHist("b", 0).rmw(12, 1, 101, 0, chaos.EvWriteOK).end(100)
	r := chaos.Check(chaos.Group{Scenario: "s", Histories: [][]chaos.Event{a, b}, Final: 1})
	if k := kind(t, r, chaos.NoFault); k.LeasesLost != 1 || k.ToldLate != 1 {
		t.Errorf("row %+v", k)
	}
	if len(r.Late) != 1 || !strings.Contains(r.Late[0], "never told") {
		t.Errorf("late %q", r.Late)
	}
}

// A worker stopped between its acquisition's answer and its record (a
// SIGSTOP) records the acquisition late. Its lower token says it came
// first: the lease taken after it, with a higher token, was not told late
// about it.
func TestCheckAcquisitionRecordedLateIsOrderedByToken(t *testing.T) {
	// b took the key (token 100) at 10 ms but recorded it at 60 ms; its
	// lease was over before a took the key (token 101) at 20 ms, whose job
	// ran until 72 ms.
	a := newHist("a", 0).add(20, chaos.Event{Kind: chaos.EvAcquired, Lease: 1, Token: 101}).
		add(21, chaos.Event{Kind: chaos.EvRead, Lease: 1, Token: 101, Read: p64(0)}).
		add(70, chaos.Event{Kind: chaos.EvWrite, Lease: 1, Token: 101, Read: p64(0), Value: p64(1)}).
		add(71, chaos.Event{Kind: chaos.EvWriteOK, Lease: 1, Token: 101, Read: p64(0), Value: p64(1)}).
		add(72, chaos.Event{Kind: chaos.EvRelease, Lease: 1, Token: 101}).
		add(73, chaos.Event{Kind: chaos.EvCtxDone, Lease: 1, Token: 101, Cause: "released"}).
		add(73, chaos.Event{Kind: chaos.EvReleased, Lease: 1, Token: 101}).end(100)
	b := newHist("b", 0).add(60, chaos.Event{Kind: chaos.EvAcquired, Lease: 1, Token: 100}).
		add(61, chaos.Event{Kind: chaos.EvCtxDone, Lease: 1, Token: 100, Cause: "lease lost", Lost: true}).
		add(62, chaos.Event{Kind: chaos.EvAbandon, Lease: 1, Token: 100}).
		add(63, chaos.Event{Kind: chaos.EvRelease, Lease: 1, Token: 100}).
		add(64, chaos.Event{Kind: chaos.EvReleased, Lease: 1, Token: 100, Err: "not held"}).end(100)
	r := chaos.Check(chaos.Group{Scenario: "s", Histories: [][]chaos.Event{a, b}, Final: 1})
	if len(r.Late) != 0 || len(r.Failures()) != 0 {
		t.Fatalf("late %q, failures %q: want none, b's lower token came first", r.Late, r.Failures())
	}
}

// A lease's end is recorded by a goroutine of its own, also while the
// job's read is in flight: a worker stopped with its read sent records the
// end and then the read when it resumes. The read was sent before the end
// was recorded, so a higher token seen meanwhile is no violation.
func TestCheckReadInFlightWhenTheLeaseEnded(t *testing.T) {
	// b (token 100) acquired at 10 ms and sent its read; stopped, it
	// recorded the end of its lease at 60 ms and the read at 61 ms. a
	// (token 101) had read at 30 ms.
	b := newHist("b", 0).add(10, chaos.Event{Kind: chaos.EvAcquired, Lease: 1, Token: 100}).
		add(60, chaos.Event{Kind: chaos.EvCtxDone, Lease: 1, Token: 100, Cause: "lease lost", Lost: true}).
		add(61, chaos.Event{Kind: chaos.EvRead, Lease: 1, Token: 100, Read: p64(0)}).
		add(62, chaos.Event{Kind: chaos.EvWrite, Lease: 1, Token: 100, Read: p64(0), Value: p64(1)}).
		add(63, chaos.Event{Kind: chaos.EvWriteStale, Lease: 1, Token: 100, Read: p64(0), Value: p64(1)}).
		add(64, chaos.Event{Kind: chaos.EvRelease, Lease: 1, Token: 100}).
		add(65, chaos.Event{Kind: chaos.EvReleased, Lease: 1, Token: 100, Err: "not held"}).end(100)
	a := newHist("a", 0).rmw(25, 1, 101, 0, chaos.EvWriteOK).end(100)
	r := chaos.Check(chaos.Group{Scenario: "s", Histories: [][]chaos.Event{a, b}, Final: 1})
	for _, f := range r.Failures() {
		if strings.Contains(f, "violation") {
			t.Fatalf("failures %q: want no violation, b's read was sent at 10 ms", r.Failures())
		}
	}
	if k := kind(t, r, chaos.NoFault); k.Violations != 0 {
		t.Fatalf("row %+v: want no violation", k)
	}
}

func TestCheckKilledWorker(t *testing.T) {
	// a is killed after sending its write, which landed: b read 1.
	a := newHist("a", 0)
	a.add(10, chaos.Event{Kind: chaos.EvAcquired, Lease: 1, Token: 100})
	a.add(11, chaos.Event{Kind: chaos.EvRead, Lease: 1, Token: 100, Read: p64(0)})
	a.add(15, chaos.Event{Kind: chaos.EvWrite, Lease: 1, Token: 100, Read: p64(0), Value: p64(1)})
	b := newHist("b", 0).rmw(1500, 1, 101, 1, chaos.EvWriteOK).end(1600)
	g := chaos.Group{Scenario: "s", Histories: [][]chaos.Event{a.evs, b}, Final: 2, Killed: map[string]bool{"a": true}}
	r := chaos.Check(g)
	if f := r.Failures(); len(f) != 0 {
		t.Fatalf("failures %q", f)
	}
	if k := kind(t, r, chaos.NoFault); k.HolderKilled != 1 || k.LeasesLost != 0 {
		t.Errorf("row %+v", k)
	}
	// Not killed by the schedule: it died unexpectedly.
	g.Killed = nil
	r = chaos.Check(g)
	if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "died unexpectedly") {
		t.Fatalf("errors %q", r.Errors)
	}
}

func TestCheckNoRecovery(t *testing.T) {
	a := newHist("a", 0).rmw(10, 1, 100, 0, chaos.EvWriteOK).end(60)
	r := chaos.Check(chaos.Group{Scenario: "s", Histories: [][]chaos.Event{a}, Final: 1,
		Faults: []chaos.Fault{{Kind: "k", Start: ms(20), End: ms(30)}}})
	if f := r.Failures(); len(f) != 1 || !strings.Contains(f[0], "no accepted write after") {
		t.Fatalf("failures %q", f)
	}
}

func TestParseHistory(t *testing.T) {
	good := `{"w":"a","seq":1,"mono":1,"wall":1,"ev":"start"}
{"w":"a","seq":2,"mono":2,"wall":2,"ev":"end"}
`
	if evs, err := chaos.ParseHistory([]byte(good)); err != nil || len(evs) != 2 {
		t.Fatalf("ParseHistory(good) = %v, %v", evs, err)
	}
	for name, bad := range map[string]string{
		"truncated": good + `{"w":"a","seq":3,"mo`,
		"gap":       strings.Replace(good, `"seq":2`, `"seq":3`, 1),
		"other":     strings.Replace(good, `"w":"a","seq":2`, `"w":"b","seq":2`, 1),
		"unknown":   strings.Replace(good, `"ev":"end"`, `"ev":"end","x":1`, 1),
		"no kind":   strings.Replace(good, `"ev":"end"`, `"ev":""`, 1),
		"empty":     "",
		"not json":  "start\n",
	} {
		if _, err := chaos.ParseHistory([]byte(bad)); err == nil {
			t.Errorf("ParseHistory(%s) = nil error", name)
		}
	}
}

func TestPlanIsSeeded(t *testing.T) {
	a := chaos.Plan(7, "s", []string{"x", "y"}, 3, time.Second, 2*time.Second, time.Second, 3*time.Second)
	b := chaos.Plan(7, "s", []string{"x", "y"}, 3, time.Second, 2*time.Second, time.Second, 3*time.Second)
	c := chaos.Plan(8, "s", []string{"x", "y"}, 3, time.Second, 2*time.Second, time.Second, 3*time.Second)
	if len(a) != 6 {
		t.Fatalf("%d steps, want 6", len(a))
	}
	same := func(p, q []chaos.Step) bool {
		for i := range p {
			if p[i] != q[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Error("same seed, different plans")
	}
	if same(a, c) {
		t.Error("different seeds, same plan")
	}
	for _, s := range a {
		if s.Gap < time.Second || s.Gap >= 2*time.Second || s.Duration < time.Second || s.Duration >= 3*time.Second {
			t.Errorf("step %+v out of range", s)
		}
	}
}

func kind(t *testing.T, r *chaos.Result, k string) *chaos.KindStats {
	t.Helper()
	for _, s := range r.Kinds {
		if s.Kind == k {
			return s
		}
	}
	t.Fatalf("no row %q in %+v", k, r.Kinds)
	return nil
}
