package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/chaos"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// writeRun writes a make chaos directory holding rep, a soak section and
// one fuzz log.
func writeRun(t *testing.T, rep *chaos.Report, fuzzLog string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"report.json":                           string(b),
		"report.md":                             "## Fault injection\n\n| table |\n",
		"soak.md":                               "## Soak\n\nPASS\n",
		"fuzz-FuzzKey@guard.log":                fuzzLog,
		"fuzz-FuzzIdempotencyKey@httpguard.log": "fuzz: elapsed: 3s, execs: 10 (3/sec), new interesting: 0 (total: 1)\nPASS\nok  \tx\t3s\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// kinds is one group's result with porcupine's verdict v for both models.
func kinds(v string, ks ...*chaos.KindStats) []*chaos.Result {
	return []*chaos.Result{{Scenario: "s", Kinds: ks, Verdicts: []chaos.Verdict{
		{Model: "register", Result: v, Operations: 40, Took: time.Millisecond},
		{Model: "lease", Result: v, Operations: 40, Took: time.Millisecond},
	}}}
}

// The headline and the bullets add up the report's rows: faults and kinds
// only where faults were injected, lost leases split by whether the lock can
// tell in time.
func TestHeadlineAddsUpTheReport(t *testing.T) {
	rep := &chaos.Report{Seed: 7, CPUs: 2, Machine: "Linux vm 6.1 x", Results: kinds(chaos.Linearizable,
		&chaos.KindStats{Scenario: "s", Kind: "pause", FencingOnly: true, Faults: 3, Accepted: 5, Rejected: 2, LeasesLost: 3, ToldInTime: 0},
		&chaos.KindStats{Scenario: "s", Kind: "cut", Faults: 2, Accepted: 4, LeasesLost: 2, ToldInTime: 2},
		&chaos.KindStats{Scenario: "s", Kind: "(no fault)", Accepted: 9},
	)}
	dir := writeRun(t, rep, "fuzz: elapsed: 20s, execs: 58525 (0/sec), new interesting: 2 (total: 103)\nPASS\nok  \tguard\t21s\n")
	doc, err := build(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"**0 violations (porcupine) in 5 faults of 2 kinds;",
		"passed.**",
		"porcupine found 1 of 1 histories linearizable under both models (40 operations, checked in 2ms); 18 accepted writes, 2 stale",
		"The hand-written checker kept beside it counted 0 violations",
		"2 of 2 leases lost under faults where the lock can tell the holder in time had their job's context canceled before another worker acquired the lock (100%)",
		"0 of 3 leases lost under those faults were told in time: pause (s).",
		"no violation under these faults either",
		"| `FuzzKey` | `guard` | 20s | 58525 | pass |",
		"| `FuzzIdempotencyKey` | `httpguard` | 3s | 10 | pass |",
		"## Soak",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("document lacks %q:\n%s", want, doc)
		}
	}
}

// A failed run, a violation or a failed fuzz target shows in the document;
// a demonstration run or a missing part is refused.
func TestFailuresShow(t *testing.T) {
	rep := &chaos.Report{Failures: []string{"worker 2 died"}, Results: kinds(chaos.NotLinearizable,
		&chaos.KindStats{Scenario: "s", Kind: "pause", FencingOnly: true, Faults: 1, Violations: 1},
	)}
	dir := writeRun(t, rep, "fuzz: elapsed: 1s, execs: 5 (5/sec), new interesting: 0 (total: 1)\n--- FAIL: FuzzKey (1.00s)\nFAIL\n")
	doc, err := build(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"**1 violations (porcupine) in 1 faults of 1 kinds;", "FAILED (1 failures)", "porcupine found 0 of 1 histories linearizable",
		"**The hand-written checker counted 1 violations under these faults**", "| **FAIL** |"} {
		if !strings.Contains(doc, want) {
			t.Errorf("document lacks %q:\n%s", want, doc)
		}
	}

	rep = &chaos.Report{WriteFenceOnly: true}
	if _, err := build(writeRun(t, rep, "fuzz: elapsed: 1s, execs: 5 (5/sec)\nPASS\n"), ""); err == nil {
		t.Error("a -chaos.write-fence-only run was accepted")
	}
	dir = writeRun(t, &chaos.Report{}, "no progress line\n")
	if _, err := build(dir, ""); err == nil {
		t.Error("a fuzz log without a progress line was accepted")
	}
	dir = writeRun(t, &chaos.Report{}, "fuzz: elapsed: 1s, execs: 5 (5/sec)\nPASS\n")
	if err := os.Remove(filepath.Join(dir, "soak.md")); err != nil {
		t.Fatal(err)
	}
	if _, err := build(dir, ""); err == nil {
		t.Error("a run without the soak's section was accepted")
	}
}

// A long run names make chaos-long and its duration; the track record
// follows the run with its headings one level down, code fences untouched.
func TestLongRunAndTrackRecord(t *testing.T) {
	rep := &chaos.Report{Profile: "long", Duration: 61*time.Minute + 20*time.Second, Results: kinds(chaos.Linearizable,
		&chaos.KindStats{Scenario: "s", Kind: "cut", Faults: 2, Accepted: 4, LeasesLost: 2, ToldInTime: 2})}
	dir := writeRun(t, rep, "fuzz: elapsed: 1s, execs: 5 (5/sec)\nPASS\n")
	record := filepath.Join(dir, "track-record.md")
	if err := os.WriteFile(record, []byte("# Track record\n\n## Rows\n\n```sh\n# a comment\n```\n| a | b |\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc, err := build(dir, record)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"One run of `make chaos-long` (every scenario at once for 1h1m0s)", "\n## Track record\n\n### Rows\n\n```sh\n# a comment\n```\n| a | b |\n"} {
		if !strings.Contains(doc, want) {
			t.Errorf("document lacks %q:\n%s", want, doc)
		}
	}
	if got := rebase("[a](testing.md#x), [b](../bench/RESULTS.md), [c](https://x.org/a), [d](#anchor)", "docs"); got != "[a](docs/testing.md#x), [b](bench/RESULTS.md), [c](https://x.org/a), [d](#anchor)" {
		t.Errorf("rebase: %s", got)
	}
	if _, err := build(dir, filepath.Join(dir, "missing.md")); err == nil {
		t.Error("a missing track record was accepted")
	}
}
