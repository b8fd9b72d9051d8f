package chaos

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// CheckTimeout bounds each porcupine check; a check that has not decided by
// then is reported as undecided, which fails the suite.
const CheckTimeout = time.Minute

// Porcupine verdicts, as Verdict.Result reports them.
const (
	Linearizable    = "linearizable"
	NotLinearizable = "not linearizable"
	Undecided       = "undecided (timed out)"
)

// Verdict is porcupine's answer for one model over one group's history.
type Verdict struct {
	Model      string        `json:"model"`
	Result     string        `json:"result"`
	Operations int           `json:"operations"`
	Took       time.Duration `json:"took_ns"`
	// Visualization is the HTML file porcupine wrote for a history it
	// rejected, if any.
	Visualization string `json:"visualization,omitempty"`
}

// String is the verdict as the report states it.
func (v Verdict) String() string {
	s := fmt.Sprintf("porcupine (%s model): %s, %d operations, %v", v.Model, v.Result, v.Operations, v.Took.Round(time.Microsecond))
	if v.Visualization != "" {
		s += ", visualization " + v.Visualization
	}
	return s
}

// opKind is what a fenced operation did to the resource.
type opKind int

const (
	opRead  opKind = iota // fence.Redis.Get: raise the fence to the token, return the value
	opWrite               // fence.Redis.Set: raise the fence, store Value
	opPeek                // an unfenced read: the counter after every worker stopped, or a read under -chaos.write-fence-only
)

// fencedInput is an operation's input: its kind, the token it was fenced
// with, and for a write the value it read and the value it writes.
type fencedInput struct {
	kind        opKind
	worker      string
	token       int64
	read, value int64
}

// Outcomes of a fenced operation.
const (
	outOK      = "ok"      // accepted
	outStale   = "stale"   // refused by fencing
	outUnknown = "unknown" // the worker never learnt (an error, or it was killed)
)

// fencedOutput is an operation's output: its outcome and, for an accepted
// read, the value it returned.
type fencedOutput struct {
	outcome string
	value   int64
}

// fencedState is the resource: the highest token accepted (the fence) and
// the counter.
type fencedState struct {
	fence, value int64
}

// fencedModel is the sequential specification of the fenced counter. Both
// models agree on the fence: an operation with a token at or above the
// fence is accepted and raises the fence to its token, one below it is
// refused and changes nothing, an accepted read returns the last accepted
// write's value, and an operation whose outcome is unknown was either
// accepted or not. The register model stops there: it is what fencing
// alone promises. The lease model adds what the lock promises a user doing
// a read-modify-write under it (rmw): an accepted write's Read is the value
// of the write before it, so no update is lost.
func fencedModel(rmw bool) porcupine.Model {
	m := porcupine.NondeterministicModel{
		Init: func() []any { return []any{fencedState{}} },
		Step: func(state, input, output any) []any {
			s, in, out := state.(fencedState), input.(fencedInput), output.(fencedOutput)
			if in.kind == opPeek {
				if out.outcome != outOK { // an unfenced read changes nothing
					return []any{s}
				}
				if out.value != s.value {
					return nil
				}
				return []any{s}
			}
			accepted := fencedState{fence: in.token, value: s.value}
			if in.kind == opWrite {
				accepted.value = in.value
			}
			legal := in.token >= s.fence && (in.kind != opWrite || !rmw || in.read == s.value)
			switch out.outcome {
			case outOK:
				if !legal || (in.kind == opRead && out.value != s.value) {
					return nil
				}
				return []any{accepted}
			case outStale:
				if in.token >= s.fence {
					return nil
				}
				return []any{s}
			}
			if !legal { // unknown: it can only have been refused
				return []any{s}
			}
			return []any{s, accepted}
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(fencedInput), output.(fencedOutput)
			switch in.kind {
			case opPeek:
				if in.worker == "" {
					return fmt.Sprintf("final read -> %d", out.value)
				}
				return fmt.Sprintf("%s unfenced read -> %d", in.worker, out.value)
			case opRead:
				if out.outcome == outOK {
					return fmt.Sprintf("%s read(token %d) -> %d", in.worker, in.token, out.value)
				}
				return fmt.Sprintf("%s read(token %d) -> %s", in.worker, in.token, out.outcome)
			}
			return fmt.Sprintf("%s write(token %d, read %d, value %d) -> %s", in.worker, in.token, in.read, in.value, out.outcome)
		},
		DescribeState: func(state any) string {
			s := state.(fencedState)
			return fmt.Sprintf("fence %d, counter %d", s.fence, s.value)
		},
	}
	return m.ToModel()
}

// fencedHistory turns a group's histories into porcupine operations, one
// client per worker, times from the events' Wall clock. A read is called
// at its read_sent event, just before its request (at its lease's
// acquisition in a history without one; not at the event before the read,
// which may be the lease's context ending, recorded while the read was
// under way), and returns at its outcome; a write is called at its write
// event. An operation whose outcome
// the worker never learnt (a read or write error, or a worker killed before
// the outcome) returns at the end of the history: porcupine may take it as
// applied anywhere after its call, or not at all. The last operation is the
// final read of the counter, after every other.
func fencedHistory(g Group) []porcupine.Operation {
	var ops []porcupine.Operation
	end := int64(math.MinInt64)
	type pending struct {
		op  porcupine.Operation
		set bool
	}
	for client, h := range g.Histories {
		var read, write pending
		flush := func(p *pending) {
			if p.set {
				p.op.Output = fencedOutput{outcome: outUnknown}
				p.op.Return = math.MaxInt64 // fixed below, at the end of the history
				ops = append(ops, p.op)
			}
			p.set = false
		}
		for _, e := range h {
			end = max(end, e.Wall)
			switch e.Kind {
			case EvAcquired:
				flush(&read)
				flush(&write)
				kind := opRead
				if g.UnfencedReads {
					kind = opPeek
				}
				read = pending{porcupine.Operation{ClientId: client, Call: e.Wall,
					Input: fencedInput{kind: kind, worker: e.Worker, token: e.Token}}, true}
			case EvReadSent:
				if read.set {
					read.op.Call = e.Wall
				}
			case EvAbandon:
				if e.Read == nil { // abandoned before the read was sent
					read.set = false
				}
			case EvRead, EvReadStale:
				out := fencedOutput{outcome: outStale}
				if e.Kind == EvRead && e.Read != nil {
					out = fencedOutput{outcome: outOK, value: *e.Read}
				}
				read.op.Output, read.op.Return = out, e.Wall
				if read.set {
					ops = append(ops, read.op)
				}
				read.set = false
			case EvReadError:
				flush(&read)
			case EvWrite:
				flush(&read)
				if e.Read == nil || e.Value == nil {
					continue
				}
				write = pending{porcupine.Operation{ClientId: client, Call: e.Wall,
					Input: fencedInput{kind: opWrite, worker: e.Worker, token: e.Token, read: *e.Read, value: *e.Value}}, true}
			case EvWriteOK, EvWriteStale:
				out := fencedOutput{outcome: outOK}
				if e.Kind == EvWriteStale {
					out.outcome = outStale
				}
				write.op.Output, write.op.Return = out, e.Wall
				if write.set {
					ops = append(ops, write.op)
				}
				write.set = false
			case EvWriteError:
				flush(&write)
			}
		}
		flush(&read)
		flush(&write)
	}
	boundUnknown(ops)
	for i := range ops {
		if ops[i].Return == math.MaxInt64 {
			ops[i].Return = end + 1
		}
		// A wall clock stepped back between call and return: widen the
		// interval to a point rather than hand porcupine an empty one.
		ops[i].Return = max(ops[i].Return, ops[i].Call)
	}
	return append(ops, porcupine.Operation{ClientId: len(g.Histories), Call: end + 2, Return: end + 3,
		Input: fencedInput{kind: opPeek}, Output: fencedOutput{outcome: outOK, value: g.Final}})
}

// boundUnknown ends each fenced operation whose outcome is unknown at the
// return of the first operation accepted with a higher token: from then on
// the fence is above its token in every linearization, so the model can
// only take it as refused, and ending it there allows exactly the
// linearizations that leaving it open would. An operation open to the end
// of the history overlaps every later one, and an hour's history with a
// few hundred of them would not be decided in time; bounded, each overlaps
// only the operations of its own fault.
func boundUnknown(ops []porcupine.Operation) {
	var accepted []porcupine.Operation
	for _, op := range ops {
		in, out := op.Input.(fencedInput), op.Output.(fencedOutput)
		if in.kind != opPeek && out.outcome == outOK {
			accepted = append(accepted, op)
		}
	}
	for i := range ops {
		in := ops[i].Input.(fencedInput)
		if in.kind == opPeek || ops[i].Output.(fencedOutput).outcome != outUnknown {
			continue
		}
		for _, a := range accepted {
			if a.Input.(fencedInput).token > in.token && a.Return < ops[i].Return {
				ops[i].Return = max(a.Return, ops[i].Call)
			}
		}
	}
}

// Linearizability checks the group's history against the register and the
// lease models with porcupine. When a model rejects it and g.VisualizeDir is
// set, porcupine's visualization of the history is written there.
func Linearizability(g Group) ([]Verdict, error) {
	ops := fencedHistory(g)
	timeout := g.CheckTimeout
	if timeout <= 0 {
		timeout = CheckTimeout
	}
	var out []Verdict
	var errs []string
	for _, m := range []struct {
		name string
		rmw  bool
	}{{"register", false}, {"lease", true}} {
		model := fencedModel(m.rmw)
		start := time.Now()
		res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
		v := Verdict{Model: m.name, Operations: len(ops), Took: time.Since(start)}
		switch res {
		case porcupine.Ok:
			v.Result = Linearizable
		case porcupine.Illegal:
			v.Result = NotLinearizable
		default:
			v.Result = Undecided
		}
		if res == porcupine.Illegal && g.VisualizeDir != "" {
			path := filepath.Join(g.VisualizeDir, visualizationName(g, m.name))
			if err := os.MkdirAll(g.VisualizeDir, 0o755); err != nil {
				errs = append(errs, err.Error())
			} else if err := porcupine.VisualizePath(model, info, path); err != nil {
				errs = append(errs, fmt.Sprintf("porcupine visualization: %v", err))
			} else {
				v.Visualization = path
			}
		}
		out = append(out, v)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// visualizationName is the file name of a rejected history's
// visualization: porcupine-<scenario>[-<group>]-<model>.html, reduced to
// letters, digits and dashes.
func visualizationName(g Group, model string) string {
	scenario := g.Scenario
	if g.Name != "" {
		scenario += "-" + g.Name
	}
	s := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			return r
		}
		return '-'
	}, scenario)
	return "porcupine-" + s + "-" + model + ".html"
}
