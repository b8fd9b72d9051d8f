// Command reliability writes RELIABILITY.md from one run of make chaos or
// make chaos-long: the fault-injection report (report.json of internal/chaos,
// rendered as its report.md is), the soak's section (internal/soak, -soak.out) and the
// logs of the bounded fuzz runs, followed by the hand-kept track record
// (docs/track-record.md). It computes the headline from the report, so that
// the document cannot claim more than the run showed.
//
//	go run ./internal/chaos/cmd/reliability -dir chaos-report -record docs/track-record.md -out RELIABILITY.md
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jobguard/jobguard/internal/chaos"
)

func main() {
	dir := flag.String("dir", "chaos-report", "the directory make chaos wrote: report.json, soak.md, fuzz-*.log")
	out := flag.String("out", "RELIABILITY.md", "where to write the document")
	record := flag.String("record", "docs/track-record.md", "the hand-kept track record to append (empty: none)")
	flag.Parse()
	doc, err := build(*dir, *record)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reliability:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, []byte(doc), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "reliability:", err)
		os.Exit(1)
	}
}

// build writes the document from the run in dir, followed by the track
// record at record (none if empty).
func build(dir, record string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		return "", err
	}
	var rep chaos.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		return "", fmt.Errorf("report.json: %w", err)
	}
	if rep.WriteFenceOnly {
		return "", errors.New("report.json is of a -chaos.write-fence-only run, a demonstration, not the suite")
	}
	soak, err := os.ReadFile(filepath.Join(dir, "soak.md"))
	if err != nil {
		return "", err
	}
	fuzz, err := fuzzSection(dir)
	if err != nil {
		return "", err
	}

	h := headline(&rep)
	run := "`make chaos`"
	if rep.Profile == "long" {
		run = fmt.Sprintf("`make chaos-long` (every scenario at once for %v)", rep.Duration.Round(time.Minute))
	}
	var b strings.Builder
	b.WriteString("# Reliability\n\n")
	b.WriteString("<!-- Written by `make chaos` or `make chaos-long` (internal/chaos/cmd/reliability) from one run and docs/track-record.md; do not edit by hand. -->\n\n")
	fmt.Fprintf(&b, "**%s.**\n\n", h.sentence)
	fmt.Fprintf(&b, "One run of %s on %s (seed %d, %s, %d CPUs): worker processes "+
		"take guarded leases and do fenced read-modify-writes of a shared counter while faults are injected for real "+
		"(SIGSTOP and SIGKILL of holders and servers, black-holed and slowed links through a TCP proxy, Sentinel and "+
		"Cluster failovers, Redlock masters lost and restarted empty, the server's wall clock stepped forward and back, "+
		"lock keys evicted under maxmemory, an operator's force-release mid-job, a Cluster slot resharded under held "+
		"leases and queued waiters, replicas cut off before a failover). Each group's recorded history (every fenced "+
		"read and write, with its call and return times) is checked for linearizability by porcupine against two "+
		"sequential specifications, and porcupine's verdict decides whether the run violates them: a register whose "+
		"accepted operations carry non-decreasing fencing tokens (a lower token is refused, a read returns the last "+
		"accepted write), and a lease service under which every accepted write read the value of the accepted write "+
		"before it (no lost update). A write or read whose outcome the worker never learnt may have been applied or not. "+
		"Run it yourself with `make chaos` (about seven minutes; `SEED=n` for another schedule) or `make chaos-long` "+
		"(`DURATION`, an hour by default); a fixed-seed slice of it runs in `make test`.\n\n",
		run, rep.Date.UTC().Format("2006-01-02"), rep.Seed, firstField(rep.Machine), rep.CPUs)
	b.WriteString("What the run shows:\n\n")
	fmt.Fprintf(&b, "- **Exclusion, with fencing:** porcupine found %d of %d histories linearizable under both models (%d operations, checked in %v); %d accepted writes, %d stale writes or reads refused by fencing. The hand-written checker kept beside it counted %d violations (two holders' read-modify-writes both accepted, or a lost update).\n",
		h.linearizable, h.histories, h.operations, h.checkTime.Round(time.Millisecond), h.accepted, h.rejected, h.handViolations)
	fmt.Fprintf(&b, "- **Told before another owner got in:** %d of %d leases lost under faults where the lock can tell the holder in time had their job's context canceled before another worker acquired the lock (%s).\n",
		h.toldInTime, h.lostTellable, percent(h.toldInTime, h.lostTellable))
	fmt.Fprintf(&b, "- **Where only fencing protects the data:** %d of %d leases lost under those faults were told in time: %s.",
		h.toldFencingOnly, h.lostFencingOnly, strings.Join(h.fencingOnlyKinds, "; "))
	if h.fencingOnlyViolations == 0 {
		b.WriteString(" Fencing kept the counter consistent there: the hand-written checker counted no violation under these faults either.\n\n")
	} else {
		fmt.Fprintf(&b, " **The hand-written checker counted %d violations under these faults** (see the table).\n\n", h.fencingOnlyViolations)
	}
	// Rendered again from report.json rather than read from report.md, so
	// that the document is in this renderer's form whatever wrote the run.
	b.WriteString(section(chaos.Markdown(&rep)))
	b.WriteString("\n")
	b.WriteString(section(string(soak)))
	b.WriteString("\n")
	b.WriteString(fuzz)
	if record != "" {
		md, err := os.ReadFile(record)
		if err != nil {
			return "", err
		}
		b.WriteString("\n")
		b.WriteString(rebase(demote(string(md)), filepath.Dir(record)))
	}
	return b.String(), nil
}

// summary is what the headline and the bullet list state. violations
// counts the histories porcupine rejected under a model (a group's history
// is one); handViolations and fencingOnlyViolations are the hand-written
// checker's counts.
type summary struct {
	sentence                         string
	faults, kinds                    int
	violations, accepted, rejected   int
	histories, linearizable          int
	operations                       int
	checkTime                        time.Duration
	handViolations                   int
	lostTellable, toldInTime         int
	lostFencingOnly, toldFencingOnly int
	fencingOnlyViolations            int
	fencingOnlyKinds                 []string
}

func headline(rep *chaos.Report) summary {
	var s summary
	kinds := map[string]bool{}
	for _, r := range rep.Results {
		s.histories++
		rejected, linearizable := false, len(r.Verdicts) > 0
		for _, v := range r.Verdicts {
			rejected = rejected || v.Result == chaos.NotLinearizable
			linearizable = linearizable && v.Result == chaos.Linearizable
			s.checkTime += v.Took
		}
		if len(r.Verdicts) > 0 {
			s.operations += r.Verdicts[0].Operations
		}
		if rejected {
			s.violations++
		}
		if linearizable {
			s.linearizable++
		}
		for _, k := range r.Kinds {
			s.handViolations += k.Violations
			s.accepted += k.Accepted
			s.rejected += k.Rejected
			if k.Faults == 0 {
				continue
			}
			s.faults += k.Faults
			kinds[k.Scenario+"/"+k.Kind] = true
			if k.FencingOnly {
				s.lostFencingOnly += k.LeasesLost
				s.fencingOnlyViolations += k.Violations
				s.toldFencingOnly += k.ToldInTime
				s.fencingOnlyKinds = append(s.fencingOnlyKinds, fmt.Sprintf("%s (%s)", k.Kind, k.Scenario))
			} else {
				s.lostTellable += k.LeasesLost
				s.toldInTime += k.ToldInTime
			}
		}
	}
	s.kinds = len(kinds)
	slices.Sort(s.fencingOnlyKinds)
	s.fencingOnlyKinds = slices.Compact(s.fencingOnlyKinds)
	verdict := "passed"
	if len(rep.Failures) > 0 {
		verdict = fmt.Sprintf("FAILED (%d failures)", len(rep.Failures))
	}
	s.sentence = fmt.Sprintf("%d violations (porcupine) in %d faults of %d kinds; run of %s %s", s.violations, s.faults, s.kinds,
		rep.Date.UTC().Format(time.DateOnly), verdict)
	return s
}

func percent(n, of int) string {
	if of == 0 {
		return "none lost"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(of))
}

func firstField(uname string) string {
	f := strings.Fields(uname)
	if len(f) >= 3 {
		return f[0] + " " + f[2]
	}
	return uname
}

// demote returns a hand-kept document as a section of RELIABILITY.md: its
// headings one level down, so that its title is a level-2 heading.
func demote(md string) string {
	lines := strings.Split(strings.TrimRight(md, "\n"), "\n")
	fence := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") || strings.HasPrefix(l, "~~~") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(l, "#") {
			lines[i] = "#" + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// relativeLink is a Markdown link to a path, not to a URL or an anchor.
var relativeLink = regexp.MustCompile(`\]\(([^)#/:][^):]*)\)`)

// rebase makes the relative links of a document written in dir work from
// the directory RELIABILITY.md is written in (the repository's root).
func rebase(md, dir string) string {
	if dir == "." || dir == "" {
		return md
	}
	return relativeLink.ReplaceAllStringFunc(md, func(m string) string {
		target := relativeLink.FindStringSubmatch(m)[1]
		return "](" + filepath.ToSlash(filepath.Join(dir, target)) + ")"
	})
}

// section returns a Markdown section (written at level 2, under the
// document's title) ending in one newline.
func section(md string) string {
	return strings.TrimRight(md, "\n") + "\n"
}

// fuzzLine is the last progress line go test -fuzz prints.
var fuzzLine = regexp.MustCompile(`fuzz: elapsed: (\S+), execs: (\d+) `)

// fuzzSection summarizes the fuzz-<Target>.log files make chaos wrote.
func fuzzSection(dir string) (string, error) {
	logs, err := filepath.Glob(filepath.Join(dir, "fuzz-*.log"))
	if err != nil || len(logs) == 0 {
		return "", fmt.Errorf("no fuzz-*.log in %s", dir)
	}
	slices.Sort(logs)
	var b strings.Builder
	b.WriteString("## Fuzzing\n\n")
	b.WriteString("Each target ran for a bounded time in this run (`go test -run '^$' -fuzz '^Target$' -fuzztime …`); their seed corpora, and any input that once failed, run in `make test`.\n\n")
	b.WriteString("| target | package | elapsed | executions | result |\n| --- | --- | --- | ---: | --- |\n")
	for _, path := range logs {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "fuzz-"), ".log")
		target, pkg, _ := strings.Cut(name, "@")
		pkg = strings.ReplaceAll(pkg, "_", "/")
		elapsed, execs, result, err := readFuzzLog(path)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s |\n", target, pkg, elapsed, execs, result)
	}
	return b.String(), nil
}

func readFuzzLog(path string) (elapsed, execs, result string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", "", err
	}
	defer f.Close()
	result = "no verdict"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := fuzzLine.FindStringSubmatch(line); m != nil {
			elapsed, execs = m[1], m[2]
		}
		switch {
		case strings.HasPrefix(line, "--- FAIL"), strings.HasPrefix(line, "FAIL"):
			result = "**FAIL**"
		case result != "**FAIL**" && (strings.HasPrefix(line, "ok ") || line == "PASS"):
			result = "pass"
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", "", err
	}
	if execs == "" {
		return "", "", "", fmt.Errorf("%s: no fuzz progress line", path)
	}
	return elapsed, execs, result, nil
}
