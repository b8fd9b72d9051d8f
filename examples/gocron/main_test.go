package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/examples/internal/exampleenv"
	"github.com/jobguard/jobguard/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
}

// event is one line of the story about a job's tick.
var event = regexp.MustCompile(`\] (instance-\d): (report|rebuild) tick (\S+) (.*)$`)

// TestRun runs the whole story on the embedded Redis and checks its output.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_URL", "") // the embedded server, whatever the environment says
	var out strings.Builder
	if err := run(t.Context(), &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")

	ran := map[string]int{}     // report tick → runs
	claimed := map[string]int{} // report tick → skips as claimed
	running, overlaps, busy, stopped := 0, 0, 0, 0
	shutdown, ledgerStopped, ledgerLost := false, false, false
	for _, l := range lines {
		switch {
		case strings.Contains(l, "fleet: shutting down"):
			shutdown = true
		case strings.Contains(l, "instance-3: ledger told to stop: guard: lease lost"):
			ledgerStopped = true
		case strings.Contains(l, "instance-3: ledger tick") && strings.HasSuffix(l, ": lease lost"):
			ledgerLost = true
		case strings.Contains(l, ": gocronguard: "):
			t.Errorf("error logged: %s", l)
		}
		m := event.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		job, tick, what := m[2], m[3], m[4]
		switch job {
		case "report":
			switch what {
			case "ran":
				ran[tick]++
			case "skipped: tick already claimed":
				claimed[tick]++
			default:
				t.Errorf("unexpected: %s", l)
			}
		case "rebuild":
			switch {
			case strings.HasPrefix(what, "started"):
				if running++; running > 1 {
					overlaps++
				}
			case what == "done":
				running--
			case strings.HasPrefix(what, "told to stop"):
				running--
				if !shutdown || what != "told to stop: context canceled" {
					t.Errorf("unexpected stop: %s", l)
				}
				stopped++
			case what == "skipped: still running":
				busy++
			case what == "skipped: tick already claimed":
			default:
				t.Errorf("unexpected: %s", l)
			}
		}
	}

	if len(ran) < 2 {
		t.Errorf("report ran on %d ticks, want at least 2", len(ran))
	}
	for tick, n := range ran {
		if n != 1 {
			t.Errorf("report tick %s ran %d times, want once", tick, n)
		}
	}
	skips := 0
	for _, n := range claimed {
		skips += n
	}
	if skips < 2 {
		t.Errorf("%d report runs skipped as claimed, want at least 2", skips)
	}
	if overlaps != 0 {
		t.Errorf("%d rebuilds started while another ran", overlaps)
	}
	if busy < 1 {
		t.Error("no rebuild run was skipped as still running")
	}
	if stopped != 1 {
		t.Errorf("%d rebuilds told to stop at shutdown, want 1", stopped)
	}
	if !ledgerStopped || !ledgerLost {
		t.Errorf("ledger: told to stop %v, loss logged %v; want both", ledgerStopped, ledgerLost)
	}
}

// TestRunWithTrace runs the story with spans printed, as -trace does.
func TestRunWithTrace(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	traced, err := exampleenv.RunTraced(t.Context(), run)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	// The run spans carry the attribute gocronguard adds to every lease.
	for _, want := range []string{`"Name":"jobguard.run"`, `"Key":"jobguard.gocron.job"`} {
		if !strings.Contains(traced, want) {
			t.Errorf("trace output lacks %s", want)
		}
	}
}
