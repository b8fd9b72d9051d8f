package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Report is what a run of the suite writes to report.json and report.md.
type Report struct {
	Date    time.Time `json:"date"`
	Machine string    `json:"machine"` // uname -a
	CPUs    int       `json:"nproc"`
	Seed    uint64    `json:"seed"`
	Profile string    `json:"profile"`
	Command string    `json:"command"`
	// Args are the test binary's own arguments, as it was run.
	Args []string `json:"args"`
	// WriteFenceOnly reports a run whose workers fenced only their
	// writes (-chaos.write-fence-only), expected to show violations.
	WriteFenceOnly bool          `json:"write_fence_only,omitempty"`
	Duration       time.Duration `json:"duration_ns"`
	// Window is Group.Window of every group: how long after a fault's end
	// events are still counted under it.
	Window   time.Duration `json:"window_ns"`
	Results  []*Result     `json:"results"`
	Failures []string      `json:"failures,omitempty"`
}

// WriteReport writes rep to dir as report.json and report.md, creating
// dir if needed.
func WriteReport(dir string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(Markdown(rep)), 0o644)
}

// Markdown renders rep as a Markdown section: how it was run, then one
// table row per scenario and fault kind.
func Markdown(rep *Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Fault injection (`internal/chaos`, profile %s)\n\n", rep.Profile)
	fmt.Fprintf(&b, "- Date: %s\n", rep.Date.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "- Machine: `%s`, %d CPUs (nproc)\n", rep.Machine, rep.CPUs)
	fmt.Fprintf(&b, "- Seed: %d\n", rep.Seed)
	fmt.Fprintf(&b, "- Command: `%s`\n", rep.Command)
	fmt.Fprintf(&b, "- Test binary arguments: `%s`\n", strings.Join(rep.Args, " "))
	fmt.Fprintf(&b, "- Duration: %v\n", rep.Duration.Round(time.Second))
	verdict := "pass"
	if len(rep.Failures) > 0 {
		verdict = fmt.Sprintf("**FAIL** (%d failures, listed below)", len(rep.Failures))
	}
	fmt.Fprintf(&b, "- Verdict: %s\n\n", verdict)
	fenced := "(fenced read, then `fence.Redis.Set`)"
	if rep.WriteFenceOnly {
		fenced = "(**unfenced read**, `-chaos.write-fence-only`, then `fence.Redis.Set`)"
	}
	b.WriteString("Every worker is a separate process fencing a slow read-modify-write of a shared counter " +
		fenced + " with its lease's token. Each group's history (every fenced read and write, with its call and " +
		"return times; an outcome the worker never learnt is taken as possibly applied) is checked for " +
		"linearizability by porcupine against two sequential specifications: a *register* whose accepted " +
		"operations carry non-decreasing fencing tokens (a lower token is refused, a read returns the last " +
		"accepted write), and a *lease* service under which every accepted write read the value of the accepted " +
		"write before it (no lost update). Porcupine's verdict decides whether a run violates them. The " +
		"*violations* column is the earlier hand-written checker's count (accepted writes that do not chain, " +
		"or a lost update), kept beside it; where the two disagree, both are stated below. *Told in time*: " +
		"the job's context was canceled before another owner acquired. Rows marked *fencing only* are faults " +
		"where the lock cannot tell a holder in time and only fencing protects the data; a late announcement " +
		"there is expected and does not fail the run (it does everywhere else). *Recovery*: from the fault's end " +
		"to the next write accepted under a lease taken after the fault began. An event is counted under the " +
		"latest fault that began before it, if that fault ended less than " + rep.Window.String() + " before it (so what " +
		"follows one fault closely may be counted under the next); *(no fault)* counts the rest.\n\n")
	b.WriteString("Porcupine's verdicts:\n\n")
	for _, r := range rep.Results {
		name := r.Scenario
		if r.Group != "" {
			name += " (" + r.Group + ")"
		}
		fmt.Fprintf(&b, "- %s: %s\n", name, verdictLine(r.Verdicts))
		if r.Disagreement != "" {
			fmt.Fprintf(&b, "  - the checkers disagree: %s\n", r.Disagreement)
		}
	}
	b.WriteString("\n")
	b.WriteString("| scenario | fault | fencing only | faults | ops | writes accepted | stale rejected | violations (hand-written checker) | leases lost | told in time | holder killed | recovery p50 | recovery p99 | recovery max |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rep.Results {
		for _, k := range r.Kinds {
			only := "no"
			if k.FencingOnly {
				only = "yes: " + k.Why
			}
			told := "-"
			if k.LeasesLost > 0 {
				told = fmt.Sprintf("%d/%d (%.0f%%)", k.ToldInTime, k.LeasesLost, 100*float64(k.ToldInTime)/float64(k.LeasesLost))
			}
			p50, p99, mx := "-", "-", "-"
			if len(k.Recoveries) > 0 {
				p50, p99, mx = ms(k.P50()), ms(k.P99()), ms(k.Max())
			}
			if k.NotRecovered > 0 {
				mx += fmt.Sprintf(" (%d never)", k.NotRecovered)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %d | %d | %s | %d | %s | %s | %s |\n",
				k.Scenario, k.Kind, only, k.Faults, k.Operations, k.Accepted, k.Rejected, k.Violations,
				k.LeasesLost, told, k.HolderKilled, p50, p99, mx)
		}
	}
	b.WriteString(promiseSection(rep))
	if len(rep.Failures) > 0 {
		b.WriteString("\nFailures:\n\n")
		for _, f := range rep.Failures {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	return b.String()
}

// verdictLine states a group's porcupine verdicts in one line:
// "porcupine: linearizable, N operations (register and lease models, T)"
// when every model accepts, else each model's verdict.
func verdictLine(vs []Verdict) string {
	if len(vs) == 0 {
		return "porcupine: not checked"
	}
	var models []string
	var took time.Duration
	for _, v := range vs {
		if v.Result != Linearizable {
			parts := make([]string, len(vs))
			for i, v := range vs {
				parts[i] = v.String()
			}
			return "**" + strings.Join(parts, "; ") + "**"
		}
		models = append(models, v.Model)
		took += v.Took
	}
	return fmt.Sprintf("porcupine: linearizable, %d operations (%s models, %v)",
		vs[0].Operations, strings.Join(models, " and "), took.Round(time.Microsecond))
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// promiseSection states, for each fault kind the run injected, what the
// docs promise under it and then what the run measured.
func promiseSection(rep *Report) string {
	var b strings.Builder
	b.WriteString("\n### Each fault kind: the promise, then the measure\n\n")
	for _, r := range rep.Results {
		verdict := "not checked"
		if len(r.Verdicts) > 0 {
			verdict = Linearizable
			for _, v := range r.Verdicts {
				if v.Result != Linearizable {
					verdict = v.Result
				}
			}
		}
		for _, k := range r.Kinds {
			if k.Faults == 0 {
				continue
			}
			only := ""
			if k.FencingOnly {
				only = "; fencing only"
			}
			promise := k.Promise
			if promise == "" {
				promise = "(none stated)"
			}
			fmt.Fprintf(&b, "- **%s** (%s%s). Promised: %s. Measured: %d faults; ", k.Kind, k.Scenario, only, promise, k.Faults)
			if k.LeasesLost > 0 {
				fmt.Fprintf(&b, "%d leases lost, %d told in time; ", k.LeasesLost, k.ToldInTime)
			} else {
				b.WriteString("no lease lost; ")
			}
			if k.HolderKilled > 0 {
				fmt.Fprintf(&b, "%d holders killed; ", k.HolderKilled)
			}
			fmt.Fprintf(&b, "%d writes accepted, %d stale writes or reads refused by fencing, %d violations by the hand-written checker; the scenario's history %s under porcupine",
				k.Accepted, k.Rejected, k.Violations, verdict)
			if len(k.Recoveries) > 0 {
				fmt.Fprintf(&b, "; recovery p50 %s, p99 %s, max %s", ms(k.P50()), ms(k.P99()), ms(k.Max()))
			}
			if k.NotRecovered > 0 {
				fmt.Fprintf(&b, "; %d faults with no recovery", k.NotRecovered)
			}
			// Kept: porcupine accepts the history, and where the lock
			// promises to tell in time, it told every lost lease so.
			if verdict == Linearizable && (k.FencingOnly || k.ToldInTime == k.LeasesLost) {
				b.WriteString(". Kept.\n")
			} else {
				b.WriteString(". **Not kept.**\n")
			}
		}
	}
	return b.String()
}
