package chaos_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/chaos"
)

// The report states each injected kind's promise before what the run
// measured under it, and leaves out kinds without faults.
func TestMarkdownStatesPromiseThenMeasure(t *testing.T) {
	rep := &chaos.Report{Window: 3 * time.Second, Results: []*chaos.Result{{
		Scenario: "standalone",
		Verdicts: []chaos.Verdict{{Model: "register", Result: chaos.Linearizable}, {Model: "lease", Result: chaos.Linearizable}},
		Kinds: []*chaos.KindStats{
			{Scenario: "standalone", Kind: "holder SIGSTOP > TTL", FencingOnly: true, Why: "stopped", Promise: "fencing refuses its writes",
				Faults: 2, Accepted: 7, Rejected: 3, LeasesLost: 2, Recoveries: []time.Duration{300 * time.Millisecond, 900 * time.Millisecond}},
			{Scenario: "standalone", Kind: "holder SIGKILL", Faults: 1, Accepted: 2, HolderKilled: 1, NotRecovered: 1},
			{Scenario: "standalone", Kind: "holder link black-holed", Faults: 1, LeasesLost: 2, ToldInTime: 1},
			{Scenario: "standalone", Kind: chaos.NoFault, Accepted: 4},
		},
	}}}
	md := chaos.Markdown(rep)
	for _, want := range []string{
		"### Each fault kind: the promise, then the measure",
		"- **holder SIGSTOP > TTL** (standalone; fencing only). Promised: fencing refuses its writes. Measured: 2 faults; 2 leases lost, 0 told in time; 7 writes accepted, 3 stale writes or reads refused by fencing, 0 violations by the hand-written checker; the scenario's history linearizable under porcupine; recovery p50 300 ms, p99 900 ms, max 900 ms. Kept.",
		"- **holder SIGKILL** (standalone). Promised: (none stated). Measured: 1 faults; no lease lost; 1 holders killed; 2 writes accepted, 0 stale writes or reads refused by fencing, 0 violations by the hand-written checker; the scenario's history linearizable under porcupine; 1 faults with no recovery. Kept.",
		"- **holder link black-holed** (standalone). Promised: (none stated). Measured: 1 faults; 2 leases lost, 1 told in time; 0 writes accepted, 0 stale writes or reads refused by fencing, 0 violations by the hand-written checker; the scenario's history linearizable under porcupine. **Not kept.**",
		"| recovery p50 | recovery p99 | recovery max |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "**"+chaos.NoFault+"**") {
		t.Errorf("report states a promise for %q:\n%s", chaos.NoFault, md)
	}
}
