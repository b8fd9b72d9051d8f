package chaos

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// NoFault is the kind under which Check counts what happened outside every
// fault's window.
const NoFault = "(no fault)"

// Fault is one fault the schedule injected: its kind, what it hit, and
// when it began and ended (Unix ns). A fault that is one action (a
// SIGKILL) ends when it began; a failover ends when the master is killed,
// so that its recovery time includes the failover.
type Fault struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
}

// Group is what Check reads: the histories of one group of workers that
// shared a lock key and a counter, the faults injected while they ran,
// and what the test knows besides.
type Group struct {
	Scenario string
	// Name tells the group from the scenario's others, if it has any.
	Name      string
	Histories [][]Event
	Faults    []Fault
	// Killed names the workers the schedule SIGKILLed: their histories may
	// end anywhere.
	Killed map[string]bool
	// Final is the counter's value after every worker stopped.
	Final int64
	// FencingOnly names the fault kinds where only fencing protects the
	// data, with the reason: a lease lost there may be announced after
	// another owner acquired.
	FencingOnly map[string]string
	// Promises states, by fault kind, what the docs promise under it, for
	// the report to state before what the run measured.
	Promises map[string]string
	// Window is how long after a fault's end what happens is still
	// counted under it.
	Window time.Duration
	// UnfencedReads reports that the workers read the counter without
	// fencing (-chaos.write-fence-only): their reads raise no fence.
	UnfencedReads bool
	// VisualizeDir, if set, is where Check writes porcupine's
	// visualization of a history a model rejects.
	VisualizeDir string
	// CheckTimeout bounds each porcupine check (0: the package's
	// CheckTimeout).
	CheckTimeout time.Duration
}

// KindStats is Check's count for one fault kind of one scenario.
type KindStats struct {
	Scenario    string `json:"scenario"`
	Kind        string `json:"kind"`
	FencingOnly bool   `json:"fencing_only"`
	Why         string `json:"why,omitempty"`
	Promise     string `json:"promise,omitempty"`
	Faults      int    `json:"faults"`
	// Operations counts leases taken; Writes the writes attempted,
	// Accepted those the resource took, Rejected the reads and writes
	// it refused as stale.
	Operations int `json:"operations"`
	Writes     int `json:"writes"`
	Accepted   int `json:"accepted"`
	Rejected   int `json:"stale_rejected"`
	// Violations are the hand-written checker's, attributed to the kind
	// of the moment they happened; porcupine's verdict is the group's
	// (Result.Verdicts) and is the one that fails the suite.
	Violations int `json:"violations"`
	// LeasesLost counts leases whose context ended with ErrLeaseLost or
	// that another owner acquired while their job still ran; ToldInTime
	// those whose job was told (context canceled) before another owner
	// acquired, ToldLate the others, of which LateUnexcused were hit by
	// a fault the lock should have told them through (not only by faults
	// where only fencing helps). HolderKilled counts leases of SIGKILLed
	// workers, which cannot be told.
	LeasesLost    int `json:"leases_lost"`
	ToldInTime    int `json:"told_in_time"`
	ToldLate      int `json:"told_late"`
	LateUnexcused int `json:"told_late_unexcused"`
	HolderKilled  int `json:"holder_killed"`
	// Recoveries are the times from each fault's end to the next accepted
	// write of a lease taken after the fault began; NotRecovered counts
	// faults with none.
	Recoveries   []time.Duration `json:"recoveries_ns"`
	NotRecovered int             `json:"not_recovered"`
}

// P50 is the median recovery (0 when there are none).
func (k *KindStats) P50() time.Duration { return k.quantile(0.50) }

// P99 is the 99th percentile recovery, by the nearest rank (0 when there
// are none).
func (k *KindStats) P99() time.Duration { return k.quantile(0.99) }

// quantile is the recovery at rank ceil(q*n) (nearest rank), so that the
// median of an even count is the lower middle one.
func (k *KindStats) quantile(q float64) time.Duration {
	if len(k.Recoveries) == 0 {
		return 0
	}
	r := slices.Clone(k.Recoveries)
	slices.Sort(r)
	rank := int(math.Ceil(q * float64(len(r))))
	return r[max(rank, 1)-1]
}

// Max is the longest recovery.
func (k *KindStats) Max() time.Duration {
	if len(k.Recoveries) == 0 {
		return 0
	}
	return slices.Max(k.Recoveries)
}

// Result is Check's answer for one Group.
type Result struct {
	Scenario string       `json:"scenario"`
	Group    string       `json:"group,omitempty"`
	Workers  int          `json:"workers"`
	Final    int64        `json:"final"`
	Kinds    []*KindStats `json:"kinds"`
	// Verdicts are porcupine's, one per model (Linearizability); they
	// decide whether the group's history is a violation.
	Verdicts []Verdict `json:"porcupine"`
	// Disagreement, when set, says how porcupine and the hand-written
	// checker disagree; porcupine's verdict is the one that counts.
	Disagreement string `json:"disagreement,omitempty"`
	// Violations, Late and Errors describe each violation, each lease
	// loss told late, and each history that could not be checked.
	Violations []string `json:"violation_details,omitempty"`
	Late       []string `json:"late_details,omitempty"`
	Errors     []string `json:"errors,omitempty"`
}

// Failures lists why the group fails the suite: a history that could not
// be checked or a worker that died unexpectedly, a history porcupine finds
// not linearizable under a model or cannot decide (every group fences;
// the hand-written checker's violations are reported, not failed on), a
// lease loss told late under a kind where the lock must
// tell in time, a fault never recovered from, or no accepted write at all.
func (r *Result) Failures() []string {
	out := slices.Clone(r.Errors)
	for _, v := range r.Verdicts {
		if v.Result != Linearizable {
			out = append(out, r.Scenario+": "+v.String())
		}
	}
	accepted := 0
	for _, k := range r.Kinds {
		accepted += k.Accepted
		if k.LateUnexcused > 0 {
			out = append(out, fmt.Sprintf("%s/%s: %d of %d lost leases told after another owner acquired",
				r.Scenario, k.Kind, k.LateUnexcused, k.LeasesLost))
		}
		if k.NotRecovered > 0 {
			out = append(out, fmt.Sprintf("%s/%s: no accepted write after %d of %d faults",
				r.Scenario, k.Kind, k.NotRecovered, k.Faults))
		}
	}
	if accepted == 0 {
		out = append(out, r.Scenario+": no write was accepted")
	}
	return out
}

// lease is one lease as its worker's history tells it.
type lease struct {
	worker   string
	n        int
	token    int64
	acquired int64 // wall time of the acquired event
	released int64 // of the release event; 0 if none
	done     int64 // of ctx_done; 0 if none
	lost     bool  // ctx_done's cause was ErrLeaseLost
	killed   bool  // its worker was killed before it ended
}

// end is when the job stopped believing it held the lease.
func (l *lease) end() int64 {
	switch {
	case l.released == 0:
		return l.done
	case l.done == 0:
		return l.released
	}
	return min(l.released, l.done)
}

// Check checks one group; see KindStats and Result.
func Check(g Group) *Result {
	r := &Result{Scenario: g.Scenario, Group: g.Name, Workers: len(g.Histories), Final: g.Final}
	rows := map[string]*KindStats{}
	row := func(kind string) *KindStats {
		k := rows[kind]
		if k == nil {
			why, only := g.FencingOnly[kind]
			k = &KindStats{Scenario: g.Scenario, Kind: kind, FencingOnly: only, Why: why, Promise: g.Promises[kind]}
			rows[kind] = k
		}
		return k
	}
	faults := slices.Clone(g.Faults)
	slices.SortFunc(faults, func(a, b Fault) int { return cmp.Compare(a.Start, b.Start) })
	for _, f := range faults {
		row(f.Kind).Faults++
	}
	// kindAt attributes a moment to the latest fault that began before it
	// and ended less than a window before it.
	kindAt := func(t int64) string {
		kind := NoFault
		for _, f := range faults {
			if f.Start <= t && t <= f.End+int64(g.Window) {
				kind = f.Kind
			}
		}
		return kind
	}

	var leases []*lease
	var accepted, unknown []Event
	for _, h := range g.Histories {
		ls, err := readLeases(h, g.Killed)
		if err != nil {
			r.Errors = append(r.Errors, err.Error())
			continue
		}
		leases = append(leases, ls...)
		// pending is a write attempted and not answered yet: at the end
		// of a killed worker's history, its outcome is unknown.
		var pending *Event
		for _, e := range h {
			switch e.Kind {
			case EvAcquired:
				row(kindAt(e.Wall)).Operations++
			case EvWrite:
				row(kindAt(e.Wall)).Writes++
				pending = &e
			case EvWriteOK:
				row(kindAt(e.Wall)).Accepted++
				accepted = append(accepted, e)
				pending = nil
			case EvWriteStale, EvReadStale:
				row(kindAt(e.Wall)).Rejected++
				pending = nil
			case EvWriteError:
				unknown = append(unknown, e)
				pending = nil
			}
		}
		if pending != nil {
			unknown = append(unknown, *pending)
		}
	}
	var ops []fencedOp
	for _, h := range g.Histories {
		ops = append(ops, fencedOps(h)...)
	}
	for _, v := range append(checkChain(accepted, unknown, g.Final), checkTokenOrder(ops)...) {
		row(kindAt(v.at)).Violations++
		r.Violations = append(r.Violations, v.what)
	}
	checkLeases(g, leases, row, kindAt, r)
	verdicts, err := Linearizability(g)
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
	}
	r.Verdicts = verdicts
	if len(r.Errors) == 0 { // else the hand-written checker skipped a history
		r.Disagreement = disagreement(verdicts, len(r.Violations))
	}

	// A fault is recovered from at the first write accepted after its end
	// under a lease taken after its start: not the write of a holder
	// that was in the middle of its job when the fault began.
	acquiredAt := map[[2]any]int64{}
	for _, l := range leases {
		acquiredAt[[2]any{l.worker, l.n}] = l.acquired
	}
	slices.SortFunc(accepted, func(a, b Event) int { return cmp.Compare(a.Wall, b.Wall) })
	for _, f := range faults {
		k := row(f.Kind)
		i := slices.IndexFunc(accepted, func(e Event) bool {
			return e.Wall > f.End && acquiredAt[[2]any{e.Worker, e.Lease}] > f.Start
		})
		if i < 0 {
			k.NotRecovered++
			continue
		}
		k.Recoveries = append(k.Recoveries, time.Duration(accepted[i].Wall-f.End))
	}

	for _, k := range rows {
		r.Kinds = append(r.Kinds, k)
	}
	slices.SortFunc(r.Kinds, func(a, b *KindStats) int {
		if (a.Kind == NoFault) != (b.Kind == NoFault) {
			if a.Kind == NoFault {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Kind, b.Kind)
	})
	return r
}

// readLeases returns the leases of one worker's history, and an error if
// the history is not whole: it must start with a start event and end with
// an end event unless the worker was killed, and every event of a lease
// must follow its acquisition.
func readLeases(h []Event, killed map[string]bool) ([]*lease, error) {
	if len(h) == 0 {
		return nil, fmt.Errorf("an empty history")
	}
	w := h[0].Worker
	if h[0].Kind != EvStart {
		return nil, fmt.Errorf("worker %s: history starts with %q, not %q", w, h[0].Kind, EvStart)
	}
	if last := h[len(h)-1]; last.Kind != EvEnd && !killed[w] {
		return nil, fmt.Errorf("worker %s died unexpectedly: its history ends with %q at seq %d, and the schedule did not kill it",
			w, last.Kind, last.Seq)
	}
	byN := map[int]*lease{}
	var out []*lease
	for _, e := range h {
		if e.Worker != w {
			return nil, fmt.Errorf("worker %s: event of worker %s at seq %d", w, e.Worker, e.Seq)
		}
		switch e.Kind {
		case EvStart, EvEnd, EvAcquireError:
			continue
		case EvAcquired:
			if byN[e.Lease] != nil {
				return nil, fmt.Errorf("worker %s: lease %d acquired twice (seq %d)", w, e.Lease, e.Seq)
			}
			l := &lease{worker: w, n: e.Lease, token: e.Token, acquired: e.Wall}
			byN[e.Lease] = l
			out = append(out, l)
			continue
		}
		l := byN[e.Lease]
		if l == nil {
			return nil, fmt.Errorf("worker %s: %q of lease %d before its acquisition (seq %d)", w, e.Kind, e.Lease, e.Seq)
		}
		switch e.Kind {
		case EvRelease:
			l.released = e.Wall
		case EvCtxDone:
			l.done, l.lost = e.Wall, e.Lost
		case EvRead, EvWrite, EvWriteOK:
			if e.Read == nil || (e.Kind != EvRead && e.Value == nil) {
				return nil, fmt.Errorf("worker %s: %q without its values (seq %d)", w, e.Kind, e.Seq)
			}
		}
	}
	if killed[w] {
		for _, l := range out {
			if l.end() == 0 {
				l.killed = true
			}
		}
	}
	return out, nil
}

type violation struct {
	at   int64
	what string
}

// checkChain checks that the accepted writes, in the order of their tokens
// (the order fencing lets them land in), form one chain from 0: each read
// the value the one before wrote, and wrote one more; and that the last
// one's value is final. A write whose outcome is unknown is taken as
// applied where the chain needs it.
func checkChain(accepted, unknown []Event, final int64) []violation {
	var out []violation
	ws := slices.Clone(accepted)
	slices.SortStableFunc(ws, func(a, b Event) int { return cmp.Or(cmp.Compare(a.Token, b.Token), cmp.Compare(a.Wall, b.Wall)) })
	used := make([]bool, len(unknown))
	cur, last := int64(0), int64(0) // the counter, and the token that wrote it
	// catchUp applies unknown writes that continue the chain from cur, as
	// far as they go, with tokens from the chain's last up to tok: one
	// below the last would have been refused by fencing, so it cannot
	// explain the chain.
	catchUp := func(tok int64, want int64) {
		for moved := true; moved && cur != want; {
			moved = false
			for i, u := range unknown {
				if !used[i] && u.Token >= last && u.Token <= tok && u.Read != nil && *u.Read == cur {
					used[i], cur, last, moved = true, *u.Value, u.Token, true
					break
				}
			}
		}
	}
	for i, w := range ws {
		if i > 0 && ws[i-1].Token == w.Token {
			out = append(out, violation{w.Wall, fmt.Sprintf("two accepted writes with token %d (workers %s and %s)",
				w.Token, ws[i-1].Worker, w.Worker)})
		}
		if *w.Value != *w.Read+1 {
			out = append(out, violation{w.Wall, fmt.Sprintf("worker %s token %d wrote %d after reading %d",
				w.Worker, w.Token, *w.Value, *w.Read)})
		}
		catchUp(w.Token, *w.Read)
		if *w.Read != cur {
			prev := "no write before it"
			if i > 0 {
				prev = fmt.Sprintf("worker %s token %d wrote %d", ws[i-1].Worker, ws[i-1].Token, *ws[i-1].Value)
			}
			out = append(out, violation{w.Wall, fmt.Sprintf("worker %s token %d read %d, but the counter was %d (%s): interleaved read-modify-writes",
				w.Worker, w.Token, *w.Read, cur, prev)})
		}
		cur, last = *w.Value, w.Token
	}
	catchUp(1<<62, final)
	if final != cur {
		at := int64(0)
		if len(ws) > 0 {
			at = ws[len(ws)-1].Wall
		}
		out = append(out, violation{at, fmt.Sprintf("lost update: the counter ends at %d, the last accepted write made it %d", final, cur)})
	}
	return out
}

// checkLeases finds the lost leases and whether each job was told in
// time: before any other worker's acquisition that followed its own.
func checkLeases(g Group, leases []*lease, row func(string) *KindStats, kindAt func(int64) string, r *Result) {
	workers := map[string]bool{}
	for _, l := range leases {
		workers[l.worker] = true
	}
	byAcq := slices.Clone(leases)
	slices.SortFunc(byAcq, func(a, b *lease) int { return cmp.Compare(a.acquired, b.acquired) })
	for _, l := range leases {
		// next: the first acquisition by another worker after l's. A lease
		// with a lower token was taken before l's, whenever its worker
		// recorded it: a worker stopped (SIGSTOP) between the answer and
		// its record writes the acquisition late.
		var next *lease
		for _, m := range byAcq {
			if m.acquired > l.acquired && m.worker != l.worker && m.token > l.token {
				next = m
				break
			}
		}
		end := l.end()
		superseded := next != nil && (end == 0 || next.acquired < end)
		switch {
		case l.killed:
			if superseded {
				row(kindAt(next.acquired)).HolderKilled++
			}
			continue
		case !l.lost && !superseded:
			continue
		}
		at := end
		if superseded {
			at = next.acquired
		}
		k := row(kindAt(at))
		k.LeasesLost++
		if !superseded {
			k.ToldInTime++
			continue
		}
		k.ToldLate++
		told := "was never told (its job went on) before"
		if l.lost {
			told = fmt.Sprintf("was told %v after", time.Duration(l.done-next.acquired))
		}
		msg := fmt.Sprintf("%s: worker %s lease %d (token %d) %s worker %s acquired (token %d)",
			k.Kind, l.worker, l.n, l.token, told, next.worker, next.token)
		if !onlyFencingFaults(g, workers, l.worker, l.acquired, at) {
			k.LateUnexcused++
			r.Late = append(r.Late, msg)
		}
	}
}

// fencedOp is a read or write the resource accepted: its token, the
// earliest it can have reached the resource (sent), and when its answer
// was recorded (done).
type fencedOp struct {
	worker     string
	kind       string
	token      int64
	sent, done int64
}

// fencedOps returns the accepted reads and writes of one worker's history.
// A write was sent when its attempt was recorded; a read, no earlier than
// the event before it in the job's own sequence. The end of the lease's
// context is recorded by a goroutine of its own, while the read may be in
// flight (a worker SIGSTOPped with its read sent records both after it
// resumes), so it says nothing of when the read was sent.
func fencedOps(h []Event) []fencedOp {
	var out []fencedOp
	var attempt, last int64
	for _, e := range h {
		switch e.Kind {
		case EvCtxDone:
			continue
		case EvRead:
			if last != 0 {
				out = append(out, fencedOp{e.Worker, "read", e.Token, last, e.Wall})
			}
		case EvWrite:
			attempt = e.Wall
		case EvWriteOK:
			out = append(out, fencedOp{e.Worker, "write", e.Token, attempt, e.Wall})
		}
		last = e.Wall
	}
	return out
}

// checkTokenOrder finds fenced operations accepted with a token lower than
// one the resource had accepted before they were sent: fencing must refuse
// those, whether or not the counter shows it.
func checkTokenOrder(ops []fencedOp) []violation {
	var out []violation
	for _, b := range ops {
		for _, a := range ops {
			if a.token > b.token && b.sent > a.done {
				out = append(out, violation{b.done, fmt.Sprintf("worker %s's %s with token %d was accepted, sent after worker %s's %s with token %d had been",
					b.worker, b.kind, b.token, a.worker, a.kind, a.token)})
				break
			}
		}
	}
	return out
}

// onlyFencingFaults reports whether faults that could touch worker's
// lease were under way between its acquisition and another owner's, and
// all of them are of kinds only fencing can help with: only then is a late
// announcement excused, whatever kind the moment is attributed to (a cut
// followed by a pause is still the cut's failure to tell). A fault aimed
// at another worker (its process or its link) cannot touch it; one aimed
// at a server can.
func onlyFencingFaults(g Group, workers map[string]bool, worker string, from, to int64) bool {
	hit := false
	for _, f := range g.Faults {
		if f.Start > to || f.End < from || (workers[f.Target] && f.Target != worker) {
			continue
		}
		if _, only := g.FencingOnly[f.Kind]; !only {
			return false
		}
		hit = true
	}
	return hit
}

// disagreement says how porcupine's verdicts and the hand-written
// checker's count of violations disagree, or returns "".
func disagreement(verdicts []Verdict, violations int) string {
	rejected := false
	for _, v := range verdicts {
		if v.Result == NotLinearizable {
			rejected = true
		}
	}
	switch {
	case rejected && violations == 0:
		return "porcupine rejects the history; the hand-written checker found no violation"
	case !rejected && violations > 0:
		return fmt.Sprintf("the hand-written checker found %d violations; porcupine found the history linearizable", violations)
	}
	return ""
}
