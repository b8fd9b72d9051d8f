package chaos_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/chaos"
	"github.com/jobguard/jobguard/internal/redistest"
)

var (
	seedFlag     = flag.Uint64("chaos.seed", 15, "seed of the fault schedule")
	profileFlag  = flag.String("chaos.profile", "slice", "slice (a fixed-seed slice of every scenario, under a minute), full (several faults of each kind) or long (every scenario at once for -chaos.duration)")
	durationFlag = flag.Duration("chaos.duration", time.Hour, "how long the long profile injects faults")
	outFlag      = flag.String("chaos.out", "", "directory to write report.json, report.md and the histories to (relative to the package directory)")
	// writeFenceOnlyFlag shows why the workers fence their reads: with
	// only the write fenced, a stale holder's write can land between a
	// newer holder's read and write, and the run is expected to fail.
	writeFenceOnlyFlag = flag.Bool("chaos.write-fence-only", false, "fence only the write of each read-modify-write (a demonstration: expect violations)")
)

// Why a fault kind is one where only fencing protects the data.
const (
	whyPause     = "a stopped process runs no code, so nothing can tell it in time"
	whyNoAOF     = "a restart without persistence forgets the lease"
	whyNoAck     = "a failover without replica ack can forget the lease"
	whyEmptyNode = "a master restarted empty can grant the key again"
)

// promises states, by fault kind, what docs/guarantees.md and
// docs/topologies.md promise under it; the report states it before what the
// run measured. A group's own promises (group.promises) take precedence.
var promises = map[string]string{
	kindPause: "nothing can tell a stopped process in time: when it resumes, its context is canceled " +
		"(at once, or by its next renewal) and fencing refuses its writes",
	kindBlackhole: "the holder's context is canceled a grace period before its lease could expire in Redis, " +
		"so it is told before another owner can acquire",
	kindSlow: "as for a black-holed link: told before another owner can acquire",
	kindKill: "a killed holder frees its key within the TTL, and the next owner's token is higher",
	kindRestart: "a restart without persistence forgets every hold: a renewal finds the key gone and tells the holder, " +
		"but another owner may get in first; fencing refuses the old holder, and tokens stay above the old ones " +
		"by the server's clock",
	kindRestartAO: "with appendfsync always, holds survive the restart: a holder is told in time or keeps its lease",
	kindCluster: "a Cluster failover has no replica ack and can forget the latest acquisitions: another owner may get in " +
		"before the holder is told; fencing refuses the old holder",
	kindMinority: "a quorum of 3 survives the loss of one master: holders keep their leases or are told in time",
	kindEmptyNode: "a master restarted empty may grant the key again once a majority agrees without the holder's " +
		"master: only fencing protects the data",
	kindClockGrace: "a step forward smaller than the stop grace is absorbed: the holder is told in time",
	kindClockHalf: "a step forward beyond the stop grace can end the lease in Redis before the holder is told, " +
		"unless the next renewal lands first: only fencing is promised; the permanent fencing counter keeps tokens increasing",
	kindClockAhead: "a step forward past the TTL ends the lease in Redis at once: another owner may get in before the " +
		"holder's next renewal tells it; fencing refuses the old holder, and tokens keep increasing",
	kindClockBack: "a step back lengthens leases in Redis and shortens nothing: holders keep their leases or are told in time, " +
		"and tokens keep increasing (the counter is permanent unless FenceTTL is set)",
	kindClockFar: "as for a small step back: told in time, tokens increasing",
	kindEvict: "Redis must keep guard's keys (noeviction); an evicted lock is free at once: the holder is told at its next " +
		"renewal, perhaps after another owner got in; fencing refuses the old holder, and tokens do not go back",
	kindForceRelease: "a force-release frees the key at once and wakes the waiters; the holder is told at its next renewal " +
		"(within TTL/3), after another owner may have got in: only fencing protects the data",
}

// scenario is one topology with its faults.
type scenario struct {
	name string
	run  func(t *testing.T, p profile, seed uint64) []*chaos.Result
}

var scenarios = []scenario{
	{"standalone", runStandalone},
	{"standalone-aof", runStandaloneAOF},
	{"standalone-clock", runStandaloneClock},
	{"standalone-evict", runEvict},
	{"standalone-operator", runOperator},
	{"sentinel", runSentinel},
	{"cluster", runCluster},
	{"redlock", runQuorum},
	{"cluster-reshard", runClusterReshard},
	{"sentinel-replication", runSentinelReplication},
}

// TestChaos runs every scenario under the profile chosen with
// -chaos.profile and fails on any violation, any lease loss told late
// where the lock must tell in time, any history that cannot be checked
// and any worker that died unexpectedly.
func TestChaos(t *testing.T) {
	p, ok := profiles[*profileFlag]
	if !ok {
		t.Fatalf("-chaos.profile=%q: want slice, full or long", *profileFlag)
	}
	if p.name == "long" {
		if *durationFlag <= 0 {
			t.Fatalf("-chaos.duration=%v: want a positive duration", *durationFlag)
		}
		p.duration, p.start = *durationFlag, time.Now()
	}
	seed := *seedFlag
	fmt.Fprintf(os.Stderr, "chaos: profile %s, seed %d (rerun with -chaos.seed=%d)\n", p.name, seed, seed)
	start := time.Now()
	var mu sync.Mutex
	var results []*chaos.Result
	t.Run("scenarios", func(t *testing.T) {
		// A parallel profile runs every scenario at once from goroutines
		// of its own (t.Run allows it), not through t.Parallel, which runs
		// only -parallel (the CPU count) at a time: the slice would take
		// the sum of its scenarios' times over two, and a long run's
		// scenarios would take turns.
		var wg sync.WaitGroup
		for _, sc := range scenarios {
			run := func() {
				t.Run(sc.name, func(t *testing.T) {
					rs := sc.run(t, p, seed)
					mu.Lock()
					defer mu.Unlock()
					results = append(results, rs...)
				})
			}
			if !p.parallel {
				run()
				continue
			}
			wg.Go(run)
		}
		wg.Wait()
	})
	slices.SortFunc(results, func(a, b *chaos.Result) int { return strings.Compare(a.Scenario, b.Scenario) })
	rep := &chaos.Report{
		Date: start, Machine: uname(), CPUs: runtime.NumCPU(), Seed: seed, Profile: p.name,
		Command: command(p, seed), Args: os.Args[1:], WriteFenceOnly: *writeFenceOnlyFlag,
		Duration: time.Since(start), Window: window, Results: results,
	}
	for _, r := range results {
		rep.Failures = append(rep.Failures, r.Failures()...)
	}
	if t.Failed() && len(rep.Failures) == 0 {
		rep.Failures = append(rep.Failures, "a scenario failed before its check (see the test log)")
	}
	if *outFlag != "" {
		if err := chaos.WriteReport(*outFlag, rep); err != nil {
			t.Errorf("write the report: %v", err)
		}
	}
	t.Logf("\n%s", chaos.Markdown(rep))
}

func uname() string {
	out, err := exec.Command("uname", "-a").Output()
	if err != nil {
		return runtime.GOOS + "/" + runtime.GOARCH
	}
	return strings.TrimSpace(string(out))
}

func command(p profile, seed uint64) string {
	timeout := "15m"
	if p.duration > 0 {
		timeout = chaosLongTimeout
	}
	c := fmt.Sprintf("go test -race -count=1 -timeout %s -run '^TestChaos$' ./internal/chaos/ -args -chaos.profile=%s -chaos.seed=%d", timeout, p.name, seed)
	if p.duration > 0 {
		c += " -chaos.duration=" + p.duration.String()
	}
	if *outFlag != "" {
		c += " -chaos.out=" + *outFlag
	}
	if *writeFenceOnlyFlag {
		c += " -chaos.write-fence-only"
	}
	return c
}

// chaosLongTimeout is the go test -timeout make chaos-long passes: a
// backstop, as the run stops itself after -chaos.duration.
const chaosLongTimeout = "3h"

// plan is the scenario's schedule: each kind p.each times.
func plan(p profile, seed uint64, name string, kinds ...string) []chaos.Step {
	gapMin, gapMax := 700*time.Millisecond, 1500*time.Millisecond
	if p.duration > 0 {
		// An hour of faults 1s apart would leave the workers too little
		// time between them to record their tens of thousands of
		// operations; a few seconds still gives thousands of faults.
		gapMin, gapMax = 2*time.Second, 5*time.Second
	}
	return chaos.Plan(seed, name, kinds, p.each, gapMin, gapMax, 3*ttl/2, 5*ttl/2)
}

// Standalone faults.
const (
	kindPause     = "holder SIGSTOP > TTL"
	kindBlackhole = "holder link black-holed"
	kindSlow      = "holder link slowed"
	kindKill      = "holder SIGKILL"
	kindRestart   = "redis SIGKILL+restart, no AOF"
	kindRestartAO = "redis SIGKILL+restart, AOF always"
)

// runStandalone: one server, each worker through its own proxy; the
// holder is stopped, cut off, slowed and killed, and the server killed
// and restarted without persistence.
func runStandalone(t *testing.T, p profile, seed uint64) []*chaos.Result {
	server := redistest.Start(t)
	r := newRun(t, p, "standalone", chaos.Standalone)
	r.lockAddr = server.Addr()
	g := &group{name: "g", fencingOnly: map[string]string{kindPause: whyPause, kindRestart: whyNoAOF}}
	r.groups = []*group{g}
	r.startWorkers(g, p.workers)
	insp := inspector(t, server.Client(t, fastOptions))
	for _, s := range plan(p, seed, r.name, kindPause, kindBlackhole, kindSlow, kindKill, kindRestart) {
		if r.over() {
			break
		}
		time.Sleep(s.Gap)
		switch s.Kind {
		case kindPause:
			w := r.holder(g, insp)
			r.inject(s.Kind, s.Duration, func() string { w.child.Stop(t); return w.id }, func() { w.child.Cont(t) })
		case kindBlackhole:
			w := r.holder(g, insp)
			r.inject(s.Kind, s.Duration, func() string { w.proxy.Blackhole(true); return w.id }, func() { w.proxy.Blackhole(false) })
		case kindSlow:
			w := r.holder(g, insp)
			r.inject(s.Kind, s.Duration, func() string { w.proxy.SetLatency(ttl / 5); return w.id }, func() { w.proxy.SetLatency(0) })
		case kindKill:
			w := r.holder(g, insp)
			r.inject(s.Kind, 0, func() string { r.kill(g, w); return w.id }, nil)
		case kindRestart:
			r.inject(s.Kind, s.Duration/5, func() string { server.Kill(t); return server.Addr() }, func() { server.Restart(t) })
		}
	}
	return r.finish()
}

// runStandaloneAOF: one server with appendfsync always, killed and
// restarted: the holds survive, so every lost lease is told in time.
func runStandaloneAOF(t *testing.T, p profile, seed uint64) []*chaos.Result {
	server := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	r := newRun(t, p, "standalone-aof", chaos.Standalone)
	r.lockAddr = server.Addr()
	g := &group{name: "g"}
	r.groups = []*group{g}
	r.startWorkers(g, p.workers)
	for _, s := range plan(p, seed, r.name, kindRestartAO) {
		if r.over() {
			break
		}
		time.Sleep(s.Gap)
		r.inject(s.Kind, s.Duration/5, func() string { server.Kill(t); return server.Addr() }, func() { server.Restart(t) })
	}
	return r.finish()
}
