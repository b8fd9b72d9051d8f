package scenario_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/bench/internal/charts"
	"github.com/jobguard/jobguard/bench/internal/report"
	"github.com/jobguard/jobguard/bench/internal/results"
	"github.com/jobguard/jobguard/bench/internal/scenario"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAllTiny runs every scenario for every library at a tiny size (50
// operations, windows of 2s) on real redis-servers, so that the harness
// keeps working. Its numbers mean nothing; it checks only that each case
// ran, that the locks excluded each other and that nothing was lost.
func TestAllTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts about 30 redis-servers; skipped with -short")
	}
	r := &scenario.Runner{Sizes: scenario.TinySizes(), ServerCPU: -1, Logf: t.Logf}
	run, err := scenario.All(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, run)
	checkOutputs(t, run)
}

// checkOutputs writes run as JSON, reads it back and renders the report
// and both charts from it, as make bench does.
func checkOutputs(t *testing.T, run results.Run) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "results.json")
	if err := results.Write(path, run); err != nil {
		t.Fatal(err)
	}
	back, err := results.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	// The pinned part has the same shape without hand-off and renewal.
	pinned := back
	pinned.Handoff, pinned.Renewal = nil, nil
	back.Pinned = &pinned
	md := report.Markdown(back, "make bench")
	for _, want := range []string{"## 1. PING floor", "## 5.", "## 6. Pinned", "### 6.3 Throughput", "| guard |", "| redsync |",
		"| redislock |", "| raw |", "| sequential, allocs/op |", "| sequential, client thread sleeps/op |", "| redislock-await |", "| pinned: sequential guard |", report.HandoffPNG} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if err := charts.Throughput(back, filepath.Join(dir, report.ThroughputPNG)); err != nil {
		t.Error(err)
	}
	if err := charts.Handoff(back, filepath.Join(dir, report.HandoffPNG)); err != nil {
		t.Error(err)
	}
}

func checkRun(t *testing.T, run results.Run) {
	t.Helper()
	if run.Ping.RTT.N == 0 {
		t.Error("ping: no samples")
	}
	for _, s := range run.Sequential {
		if s.Op.N == 0 || s.Floor.N == 0 || s.RatioP50 <= 0 || s.Errors != 0 {
			t.Errorf("sequential %s: %+v", s.Lib, s)
		}
		if s.CostOps == 0 || s.Cost.ClientCPUUs <= 0 || s.Cost.Allocs <= 0 || s.Cost.AllocBytes <= 0 || s.Cost.RoundTrips < 2 {
			t.Errorf("sequential %s: %d cost ops, cost %+v", s.Lib, s.CostOps, s.Cost)
		}
	}
	for _, tp := range append([]results.Throughput{run.Ceiling}, run.Throughput...) {
		if len(tp.Rounds) != run.Sizes.TPRounds || tp.Cost.ServerCalls == 0 || tp.RatioToCeiling <= 0 || tp.Cost.Allocs <= 0 {
			t.Errorf("throughput %s: %d rounds, server calls/op %.1f, ratio %.2f, allocs/op %.1f",
				tp.Lib, len(tp.Rounds), tp.Cost.ServerCalls, tp.RatioToCeiling, tp.Cost.Allocs)
		}
		for i, r := range tp.Rounds {
			if r.Ops == 0 || r.Errors != 0 {
				t.Errorf("throughput %s round %d: ops %d, errors %d (%s)", tp.Lib, i+1, r.Ops, r.Errors, r.FirstError)
			}
		}
	}
	if want := 4 * len(run.Sizes.HandoffWaiters) * len(run.Sizes.HandoffHolds); len(run.Handoff) != want {
		t.Errorf("handoff: %d cases, want %d", len(run.Handoff), want)
	}
	for _, h := range run.Handoff {
		if h.Acquisitions == 0 || h.Violations != 0 || h.Errors != 0 || h.Latency.N == 0 {
			t.Errorf("handoff %s w=%d hold=%vms: acquisitions %d, violations %d, errors %d (%s), hand-offs %d",
				h.Lib, h.Waiters, h.HoldMs, h.Acquisitions, h.Violations, h.Errors, h.FirstError, h.Latency.N)
		}
	}
	for _, rn := range run.Renewal {
		if rn.Locks != run.Sizes.RenewLocks || rn.Lost != 0 {
			t.Errorf("renewal %s: locks %d, lost %d", rn.Lib, rn.Locks, rn.Lost)
		}
		// In a 2s window at a 1s period every renewing library renews each lock at least once.
		if rn.Renews && rn.ServerCalls < int64(rn.Locks) {
			t.Errorf("renewal %s: %d server calls for %d locks in %.1fs", rn.Lib, rn.ServerCalls, rn.Locks, rn.Seconds)
		}
	}
}
