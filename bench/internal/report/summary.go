package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jobguard/jobguard/bench/internal/locks"
	"github.com/jobguard/jobguard/bench/internal/measure"
	"github.com/jobguard/jobguard/bench/internal/results"
)

// Anchor is the library every summary ratio is taken to.
const Anchor = "redislock"

// summary writes the per-operation figures of each part of run, each with
// its ratio to the Anchor's in the same part.
func summary(b *strings.Builder, run results.Run) {
	fmt.Fprintf(b, "## Per acquire + release, × %s in the same run\n\n"+
		"Each cell: the library's figure, then its ratio to %s's. Sequential: the cost window of section 2 (p50 from "+
		"its timed window). %d goroutines: the median round of section 3, and the ratio is the median over rounds of the "+
		"library's figure / %s's in the round of the same turn, so it need not equal the ratio of the two figures shown. "+
		"Client CPU and allocations are the whole client process's.\n\n",
		Anchor, Anchor, run.Ceiling.Goroutines, Anchor)
	summaryTable(b, run, "As users run it")
	if p := run.Pinned; p != nil {
		summaryTable(b, *p, "Pinned (section 6)")
	}
}

// summaryRow is one measure of the summary: its name, its unit's decimals
// and how to read it from a sequential case or a throughput round.
type summaryRow struct {
	name     string
	decimals int
	seq      func(results.Sequential) float64
	tp       func(results.ThroughputRound) float64
}

func summaryRows() []summaryRow {
	cost := func(f func(results.Cost) float64) (func(results.Sequential) float64, func(results.ThroughputRound) float64) {
		return func(s results.Sequential) float64 { return f(s.Cost) }, func(r results.ThroughputRound) float64 { return f(r.Cost) }
	}
	clientSeq, clientTP := cost(func(c results.Cost) float64 { return c.ClientCPUUs })
	sleepsSeq, sleepsTP := cost(func(c results.Cost) float64 { return c.ThreadSleeps })
	allocsSeq, allocsTP := cost(func(c results.Cost) float64 { return c.Allocs })
	bytesSeq, bytesTP := cost(func(c results.Cost) float64 { return c.AllocBytes })
	serverSeq, serverTP := cost(func(c results.Cost) float64 { return c.ServerCPUUs })
	return []summaryRow{
		{"p50 µs", 1, func(s results.Sequential) float64 { return s.Op.P50us }, nil},
		{"ops/s", 0, nil, func(r results.ThroughputRound) float64 { return r.OpsPerSec }},
		{"client CPU µs/op", 1, clientSeq, clientTP},
		{"client thread sleeps/op", 2, sleepsSeq, sleepsTP},
		{"allocs/op", 1, allocsSeq, allocsTP},
		{"bytes/op", 0, bytesSeq, bytesTP},
		{"server CPU µs/op", 1, serverSeq, serverTP},
	}
}

// summaryTable writes one part's table, named after its run.
func summaryTable(b *strings.Builder, run results.Run, title string) {
	m := run.Machine
	fmt.Fprintf(b, "**%s**: %s, guard at %s, GOMAXPROCS %d of %d CPUs, %s, loopback, a cancelable context per operation.\n\n",
		title, m.Date, m.Guard, m.GOMAXPROCS, m.CPUs, pinnedOrNot(m))
	libs := locks.Names()
	t := newTable(append([]string{"measure"}, libs...)...)
	seqAnchor, seqOK := findLib(run.Sequential, Anchor, func(s results.Sequential) string { return s.Lib })
	tpAnchor, tpOK := findLib(run.Throughput, Anchor, func(tp results.Throughput) string { return tp.Lib })
	for _, row := range summaryRows() {
		if row.seq != nil && seqOK {
			cells := []string{"sequential, " + row.name}
			for _, lib := range libs {
				s, ok := findLib(run.Sequential, lib, func(s results.Sequential) string { return s.Lib })
				if !ok {
					cells = append(cells, "—")
					continue
				}
				v := row.seq(s)
				cells = append(cells, fmt.Sprintf("%s (%s)", num(v, row.decimals), ratio(measure.Ratio(v, row.seq(seqAnchor)))))
			}
			t.add(cells...)
		}
	}
	for _, row := range summaryRows() {
		if row.tp != nil && tpOK {
			cells := []string{fmt.Sprintf("%d goroutines, %s", run.Ceiling.Goroutines, row.name)}
			for _, lib := range libs {
				tp, ok := findLib(run.Throughput, lib, func(tp results.Throughput) string { return tp.Lib })
				if !ok || len(tp.Rounds) == 0 {
					cells = append(cells, "—")
					continue
				}
				v := row.tp(tp.Rounds[tp.Median])
				cells = append(cells, fmt.Sprintf("%s (%s)", num(v, row.decimals), ratio(perTurn(tp, tpAnchor, row.tp))))
			}
			t.add(cells...)
		}
	}
	t.write(b)
}

// pinnedOrNot names where a part's client and servers ran.
func pinnedOrNot(m results.Machine) string {
	if m.ClientCPU < 0 && m.ServerCPU < 0 {
		return "not pinned"
	}
	where := func(cpu int) string {
		if cpu < 0 {
			return "any CPU"
		}
		return fmt.Sprintf("CPU %d", cpu)
	}
	return fmt.Sprintf("pinned (client on %s, each redis-server on %s)", where(m.ClientCPU), where(m.ServerCPU))
}

// findLib returns the entry of xs for name.
func findLib[T any](xs []T, name string, lib func(T) string) (T, bool) {
	i := slices.IndexFunc(xs, func(x T) bool { return lib(x) == name })
	if i < 0 {
		var zero T
		return zero, false
	}
	return xs[i], true
}

// perTurn returns the median over rounds of value(lib's round) /
// value(anchor's round of the same turn), 0 when there is none. Rounds
// whose anchor value is 0 are left out.
func perTurn(lib, anchor results.Throughput, value func(results.ThroughputRound) float64) float64 {
	var ratios []float64
	for i := range min(len(lib.Rounds), len(anchor.Rounds)) {
		if a := value(anchor.Rounds[i]); a != 0 {
			ratios = append(ratios, value(lib.Rounds[i])/a)
		}
	}
	if len(ratios) == 0 {
		return 0
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2]
}
