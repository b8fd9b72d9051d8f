// Package report renders a benchmark run as Markdown: RESULTS.md.
package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jobguard/jobguard/bench/internal/results"
)

// Files are the charts the report shows, as cmd/charts names them.
const (
	ThroughputPNG = "throughput.png"
	HandoffPNG    = "handoff.png"
)

// Markdown returns the report of run. makeCmd is the command that made it.
func Markdown(run results.Run, makeCmd string) string {
	var b strings.Builder
	header(&b, run, makeCmd)
	summary(&b, run)
	ping(&b, run, "## 1. PING floor")
	sequential(&b, run, "## 2. Uncontended acquire + release, one key, one goroutine")
	throughput(&b, run, fmt.Sprintf("## 3. Throughput, %d goroutines on distinct keys", run.Ceiling.Goroutines), ThroughputPNG)
	handoff(&b, run)
	renewal(&b, run)
	if p := run.Pinned; p != nil {
		pinned(&b, *p)
	}
	quality(&b, run)
	return b.String()
}

func header(b *strings.Builder, run results.Run, makeCmd string) {
	m, s := run.Machine, run.Sizes
	fmt.Fprintf(b, "# Lock benchmark: guard, redsync, redislock, raw SET NX\n\n")
	fmt.Fprintf(b, "Generated from `results.json` by `go run ./cmd/report`; do not edit by hand.\n\n")
	t := newTable("run", "")
	t.left = []int{1}
	t.add("date", m.Date)
	t.add("machine", fmt.Sprintf("%s, %d CPUs, %s", m.CPUModel, m.CPUs, m.Kernel))
	t.add("pinning", m.Pinning)
	t.add("Go", fmt.Sprintf("%s, GOMAXPROCS %d", m.GoVersion, m.GOMAXPROCS))
	t.add("contexts", m.OpContext)
	if p := run.Pinned; p != nil {
		t.add("pinned part", fmt.Sprintf("%s; GOMAXPROCS %d; from %s (section 6)", p.Machine.Pinning, p.Machine.GOMAXPROCS, p.Machine.Date))
	}
	t.add("Redis", m.RedisVersion+", one fresh `redis-server --save '' --appendonly no` per case, on 127.0.0.1")
	t.add("guard", "this repository at "+m.Guard)
	for _, lib := range slices.Sorted(maps.Keys(m.Libraries)) {
		t.add(lib, m.Libraries[lib])
	}
	t.add("command", "`"+makeCmd+"`")
	t.add("bench run", "`"+run.Command+"`, "+fmt.Sprintf("%.0f s", run.ElapsedSec))
	t.write(b)
	fmt.Fprintf(b, "Every client is a go-redis client with a pool of %d connections. Outside scenario 5 every lock has a TTL of %v; "+
		"the polling libraries retry a busy key every %v: redislock with `LinearBackoff(%v)`, redsync with its default 32 tries "+
		"but `WithRetryDelay(%v)` (default: random 50–250 ms), the raw baseline with a %v sleep. guard does not poll: a waiter "+
		"sleeps until a release is published. guard-nocancel is guard called under contexts that cannot be canceled "+
		"(`context.WithoutCancel` of the same ones): guard then sends each acquisition on the caller's goroutine, where under a "+
		"context that can end it hands the request to a goroutine of its own, so that the call returns the moment its context "+
		"is done (go-redis does not interrupt a read); a release's update goes to the hold's sender goroutine in both. "+
		"The difference between the two is what that promise costs guard; "+
		"the other libraries make no such promise (a canceled call of theirs waits for its read). redislock-await is redislock "+
		"made to keep it in a plain way: each try of Obtain and each Release runs on a worker goroutine while the caller "+
		"waits for it or for its context; beside redislock it shows what the promise costs a lock that does nothing else.\n\n", s.PoolSize, s.TTL, s.RetryDelay, s.RetryDelay, s.RetryDelay, s.RetryDelay)
	fmt.Fprintf(b, "Sections 1–5 are measured as users run a service: %s, GOMAXPROCS %d, loopback, %s. ",
		pinnedOrNot(m), m.GOMAXPROCS, m.OpContext)
	if m.ClientCPU < 0 && m.GOMAXPROCS < m.CPUs {
		fmt.Fprintf(b, "**GOMAXPROCS %d is less than the machine's %d CPUs** (set in the environment?): these are not the "+
			"figures users see. ", m.GOMAXPROCS, m.CPUs)
	}
	if run.Pinned != nil {
		fmt.Fprintf(b, "Section 6 measures PING, sequential and throughput again pinned, in the same run.")
	}
	fmt.Fprintf(b, "\n\n")
	pinningNote(b, m)
	fmt.Fprintf(b, "Client CPU is getrusage(RUSAGE_SELF) of the whole client process and allocations are the "+
		"runtime.MemStats Mallocs and TotalAlloc deltas of the whole process, both over the measured window; server CPU "+
		"is the server's INFO used_cpu_sys+used_cpu_user over the same window. All three are divided by the window's "+
		"operations (an acquire with its release, or a SET with its DEL), and all include the context each operation "+
		"is given. ")
	fmt.Fprintf(b, "\"Server calls\" are INFO commandstats calls, which count the commands a script runs with `redis.call` as well as "+
		"the EVALSHA that ran it; \"client commands\" and \"round trips\" are what the client sent, counted by a go-redis hook "+
		"(a pipeline is one round trip). The harness's own INFO and PING are left out of both.\n\n")
}

// pinningNote warns, for a run with client and server pinned to different
// CPUs, that every round trip pays two cross-CPU wake-ups.
func pinningNote(b *strings.Builder, m results.Machine) {
	if m.ClientCPU >= 0 && m.ServerCPU >= 0 && m.ClientCPU != m.ServerCPU {
		fmt.Fprintf(b, "With client and server pinned to different CPUs every round trip pays two cross-CPU wake-ups, "+
			"which on a virtual machine can cost more than Redis's own work: compare the PING floor with the same "+
			"PING with both on one CPU (`-client-cpu 1 -server-cpu 1`) before reading absolute latencies. Ratios to a floor "+
			"measured in the same case carry the same cost on both sides.\n\n")
	}
}

func ping(b *strings.Builder, run results.Run, title string) {
	p := run.Ping.RTT
	fmt.Fprintf(b, "%s\n\nSequential PINGs on one connection: the floor of any request.\n\n", title)
	t := newTable("PINGs", "p50 µs", "p90 µs", "p99 µs", "mean µs")
	t.add(count(p.N), num(p.P50us, 1), num(p.P90us, 1), num(p.P99us, 1), num(p.MeanUs, 1))
	t.write(b)
}

func sequential(b *strings.Builder, run results.Run, title string) {
	fmt.Fprintf(b, "%s\n\n"+
		"Each acquire+release is followed by two PINGs on the same client, under the same context, timed apart: the "+
		"floor is sampled next to each operation (op, PING, PING, op, …). Ratio = p50 of the operation / p50 of "+
		"PING+PING.\n\n", title)
	t := newTable("library", "ops", "p50 µs", "p99 µs", "floor p50 µs", "p50 / floor", "p99 / floor p99", "errors")
	for _, s := range run.Sequential {
		t.add(s.Lib, count(s.Op.N), num(s.Op.P50us, 1), num(s.Op.P99us, 1), num(s.Floor.P50us, 1),
			ratio(s.RatioP50), ratio(s.RatioP99), count(s.Errors))
	}
	t.write(b)
	fmt.Fprintf(b, "Then, in the same case, up to %s operations more (at most %v) without the PINGs, metered: what each "+
		"acquire+release costs. Client thread sleeps: how often the client process's threads gave up their CPU (getrusage's "+
		"voluntary context switches): a round trip costs one or two, and a hand-off between goroutines while a CPU is idle "+
		"adds more, as Go's scheduler then wakes an idle thread for the goroutine it made ready.\n\n",
		count(run.Sizes.SeqOps), run.Sizes.SeqWindow)
	ct := newTable("library", "ops", "client CPU µs/op", "client thread sleeps/op", "allocs/op", "bytes/op", "server CPU µs/op",
		"server calls/op", "round trips/op")
	for _, s := range run.Sequential {
		ct.add(s.Lib, count(s.CostOps), num(s.Cost.ClientCPUUs, 1), num(s.Cost.ThreadSleeps, 2), num(s.Cost.Allocs, 1),
			num(s.Cost.AllocBytes, 0),
			num(s.Cost.ServerCPUUs, 1), num(s.Cost.ServerCalls, 1), num(s.Cost.RoundTrips, 2))
	}
	ct.write(b)
}

// throughput writes the throughput section; chart, when not empty, is the
// chart drawn from these figures.
func throughput(b *strings.Builder, run results.Run, title, chart string) {
	c := run.Ceiling
	fmt.Fprintf(b, "%s\n\n"+
		"Each goroutine acquires and releases a key of its own as fast as it can, for up to %v. The ceiling: as many "+
		"goroutines doing SET then DEL. Each library runs %d rounds, each on a fresh server, alternating with the others "+
		"(SET+DEL, guard, guard-nocancel, redsync, redislock, redislock-await, raw, SET+DEL, …): the figures are the median round's (by ops/s), and "+
		"\"vs SET+DEL\" is the median of each round's ratio to the SET+DEL round of the same turn. CPU and allocations "+
		"are per operation (acquire+release), over the round's window.\n\n",
		title, run.Sizes.TPWindow, run.Sizes.TPRounds)
	if chart != "" {
		fmt.Fprintf(b, "![server CPU, client CPU and throughput per library](%s)\n\n", chart)
	}
	t := newTable("library", "ops/s", "vs SET+DEL", "each round: ops/s (vs SET+DEL)", "client CPU µs/op",
		"client thread sleeps/op", "allocs/op", "bytes/op", "server CPU µs/op", "server calls/op", "client commands/op",
		"round trips/op", "errors")
	for _, tp := range append([]results.Throughput{c}, run.Throughput...) {
		var each []string
		var errs int64
		for _, r := range tp.Rounds {
			each = append(each, fmt.Sprintf("%s (%.2f)", num(r.OpsPerSec, 0), r.Ratio))
			errs += r.Errors
		}
		t.add(tp.Lib, num(tp.OpsPerSec, 0), ratio(tp.RatioToCeiling), strings.Join(each, ", "),
			num(tp.Cost.ClientCPUUs, 1), num(tp.Cost.ThreadSleeps, 2), num(tp.Cost.Allocs, 1), num(tp.Cost.AllocBytes, 0), num(tp.Cost.ServerCPUUs, 1),
			num(tp.Cost.ServerCalls, 1), num(tp.Cost.ClientCommands, 2), num(tp.Cost.RoundTrips, 2), count(errs))
	}
	t.write(b)
	fmt.Fprintf(b, "Server time per command in the median round (commandstats; a script's EVALSHA time includes the "+
		"commands it ran, which are also listed on their own):\n\n")
	ct := newTable("library", "command", "calls/op", "µs/call", "µs/op")
	for _, tp := range append([]results.Throughput{c}, run.Throughput...) {
		for _, cmd := range tp.Cost.Commands {
			ct.add(tp.Lib, "`"+cmd.Name+"`", num(cmd.CallsPerOp, 2), num(cmd.UsecPerCall, 2), num(cmd.UsecPerOp, 2))
		}
	}
	ct.write(b)
}

// pinned writes section 6: the pinned part's PING, sequential and
// throughput, with its own description of the run.
func pinned(b *strings.Builder, p results.Run) {
	m := p.Machine
	fmt.Fprintf(b, "## 6. Pinned: PING, sequential and throughput again\n\n"+
		"The same run's second part, from %s: %s, GOMAXPROCS %d, %s. Command: `%s`, %.0f s.\n\n",
		m.Date, lowerFirst(m.Pinning), m.GOMAXPROCS, m.OpContext, p.Command, p.ElapsedSec)
	pinningNote(b, m)
	ping(b, p, "### 6.1 PING floor, pinned")
	sequential(b, p, "### 6.2 Uncontended acquire + release, pinned")
	throughput(b, p, fmt.Sprintf("### 6.3 Throughput, %d goroutines on distinct keys, pinned", p.Ceiling.Goroutines), "")
}

func handoff(b *strings.Builder, run results.Run) {
	if len(run.Handoff) == 0 {
		fmt.Fprintf(b, "## 4. Contended hand-off, one key\n\nNot run (`%s`).\n\n", run.Command)
		return
	}
	fmt.Fprintf(b, "## 4. Contended hand-off, one key\n\n"+
		"N goroutines take turns on one key, holding it for 0 or 1 ms, for up to %v. Hand-off latency runs from a holder's "+
		"unlock call to the lock return of a *different* goroutine (a goroutine that takes the key back itself is no "+
		"hand-off). Per acquisition: server calls, client commands and round trips over the whole case, failed attempts "+
		"and releases included. Fairness = min / max acquisitions per goroutine. Violations: an atomic counts holders "+
		"that overlapped; it must be 0. Gave up: the lock call returned an error inside the window (redsync after its 32 "+
		"tries), and the goroutine tried again.\n\n![hand-off latency and commands per acquisition](%s)\n\n",
		run.Sizes.HandoffWindow, HandoffPNG)
	t := newTable("library", "waiters", "hold ms", "acquisitions", "hand-offs", "p50 µs", "p99 µs", "server calls/acq",
		"client commands/acq", "round trips/acq", "server CPU µs/acq", "fairness", "violations", "gave up", "errors")
	for _, h := range run.Handoff {
		t.add(h.Lib, count(h.Waiters), num(h.HoldMs, 0), count(h.Acquisitions), count(h.Latency.N),
			num(h.Latency.P50us, 0), num(h.Latency.P99us, 0), num(h.Cost.ServerCalls, 1), num(h.Cost.ClientCommands, 1),
			num(h.Cost.RoundTrips, 1), num(h.Cost.ServerCPUUs, 1),
			fmt.Sprintf("%.2f (%d/%d)", h.Fairness, h.MinPerWaiter, h.MaxPerWaiter),
			count(h.Violations), count(h.GaveUp), count(h.Errors))
	}
	t.write(b)
}

func renewal(b *strings.Builder, run results.Run) {
	s := run.Sizes
	if len(run.Renewal) == 0 {
		fmt.Fprintf(b, "## 5. Held locks renewed\n\nNot run (`%s`).\n\n", run.Command)
		return
	}
	fmt.Fprintf(b, "## 5. %s held locks renewed for %v\n\n"+
		"guard renews on its heartbeat (`WithTTL(%v)`, so every %v); redsync and redislock have one goroutine per lock "+
		"calling `Extend` / `Refresh` every %v, as their users do; the raw baseline takes its locks with a TTL longer than "+
		"the window and never renews. Measured over the window only, after every lock is held. Goroutines: while "+
		"holding, less those left once all are released and the library closed. Heap and stacks: in use after a GC, "+
		"over a baseline taken with the client's connections open.\n\n",
		count(s.RenewLocks), s.RenewWindow, s.RenewTTL, s.RenewTTL/3, s.RenewEvery)
	t := newTable("library", "TTL", "goroutines", "server calls", "client commands", "round trips", "client CPU s",
		"server CPU s", "heap MiB", "stacks MiB", "locks lost")
	for _, r := range run.Renewal {
		lost := count(r.Lost)
		if !r.Renews {
			lost = "n/a (no renewal, no owner check)"
		}
		t.add(r.Lib, (time.Duration(r.TTLms) * time.Millisecond).String(), count(r.Goroutines), count(r.ServerCalls),
			count(r.ClientCmds), count(r.RoundTrips), num(r.ClientCPUSec, 3), num(r.ServerCPUSec, 3),
			num(r.HeapInuseMiB, 1), num(r.StackInuseMiB, 1), lost)
	}
	t.write(b)
}

func quality(b *strings.Builder, run results.Run) {
	fmt.Fprintf(b, "## Measurement quality\n\n"+
		"Each case is checked for outside load: the p50 of %d PINGs before and after it must not differ by more than %.0f×, "+
		"and other processes (the machine's user+system CPU time less this process's and the case's redis-server's) and "+
		"the hypervisor's steal must stay under %.2f cores (own cores: this process and the case's redis-server, for scale). A disturbed case is run again in a later pass, after every "+
		"other case, at most %d attempts in all and while the time budget lasts; the numbers above are from its last "+
		"attempt, and a case still disturbed then is marked below.\n\n",
		run.Sizes.FloorPings, run.Sizes.FloorDriftLimit, run.Sizes.OthersCoresLimit, run.Sizes.MaxAttempts)
	t := newTable("case", "attempts", "floor before µs", "floor after µs", "own cores", "others cores", "steal cores",
		"disturbed", "why (each disturbed attempt)")
	t.left = []int{7, 8}
	all := cases(run)
	if p := run.Pinned; p != nil {
		for _, c := range cases(*p) {
			all = append(all, namedQuality{"pinned: " + c.name, c.q})
		}
	}
	for _, c := range all {
		if len(c.q.Attempts) == 0 {
			continue
		}
		last := c.q.Attempts[len(c.q.Attempts)-1]
		var why []string
		for i, a := range c.q.Attempts {
			if len(a.Reasons) > 0 {
				why = append(why, fmt.Sprintf("%d: %s", i+1, strings.Join(a.Reasons, "; ")))
			}
		}
		disturbed := "no"
		if c.q.Disturbed {
			disturbed = "**yes**"
		}
		t.add(c.name, count(len(c.q.Attempts)), num(last.FloorBeforeUs, 1), num(last.FloorAfterUs, 1),
			num(last.OwnCores, 2), num(last.OthersCores, 2), num(last.StealCores, 2), disturbed, strings.Join(why, "<br>"))
	}
	t.write(b)
}

type namedQuality struct {
	name string
	q    results.Quality
}

// cases lists every case of run with its quality record.
func cases(run results.Run) []namedQuality {
	out := []namedQuality{{"ping", run.Ping.Quality}}
	for _, s := range run.Sequential {
		out = append(out, namedQuality{"sequential " + s.Lib, s.Quality})
	}
	for _, tp := range append([]results.Throughput{run.Ceiling}, run.Throughput...) {
		for i, r := range tp.Rounds {
			out = append(out, namedQuality{fmt.Sprintf("throughput %s, round %d", tp.Lib, i+1), r.Quality})
		}
	}
	for _, h := range run.Handoff {
		out = append(out, namedQuality{fmt.Sprintf("hand-off %s, %d waiters, hold %.0f ms", h.Lib, h.Waiters, h.HoldMs), h.Quality})
	}
	for _, r := range run.Renewal {
		out = append(out, namedQuality{"renewal " + r.Lib, r.Quality})
	}
	return out
}

// lowerFirst returns s with its first letter in lower case.
func lowerFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToLower(r)) + s[n:]
}
