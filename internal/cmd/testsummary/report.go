package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report writes the summary of a finished stream: a line per package, the
// skipped tests with their reasons, the n slowest top-level tests, the
// failed builds and tests again by name, and the totals.
func (s *summarizer) report(w io.Writer, n int) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "=== Packages")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PACKAGE\tRESULT\tELAPSED\tPASSED\tFAILED\tSKIPPED")
	for _, name := range sortedKeys(s.pkgs) {
		p := s.pkgs[name]
		result, elapsed := p.status, fmt.Sprintf("%.2fs", p.elapsed)
		if p.note != "" {
			result = fmt.Sprintf("%s (%s)", p.status, p.note)
		}
		if p.status == statusNoTests || p.note != "" {
			elapsed = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", p.name, result, elapsed, p.passed, p.failed, p.skipped)
	}
	tw.Flush()

	if len(s.skippedTests) > 0 {
		fmt.Fprintf(w, "\n=== Skipped tests (%d)\n", len(s.skippedTests))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, t := range sortedResults(s.skippedTests) {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.pkg, t.test, t.reason)
		}
		tw.Flush()
	}

	if slowest := s.slowest(n); len(slowest) > 0 {
		fmt.Fprintf(w, "\n=== Slowest tests (%d)\n", len(slowest))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, t := range slowest {
			fmt.Fprintf(tw, "%8.2fs\t%s\t%s\n", t.elapsed, t.test, t.pkg)
		}
		tw.Flush()
	}

	var builds []*build
	for _, b := range s.order {
		if b.failed {
			builds = append(builds, b)
		}
	}
	if len(builds) > 0 {
		fmt.Fprintf(w, "\n=== Build errors (%d)\n", len(builds))
		for _, b := range builds {
			for _, l := range b.output {
				fmt.Fprintln(w, strings.TrimRight(l, "\n"))
			}
		}
	}

	if len(s.failedTests) > 0 {
		fmt.Fprintf(w, "\n=== Failed tests (%d), their output is above\n", len(s.failedTests))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, t := range sortedResults(s.failedTests) {
			if t.note == "" {
				fmt.Fprintf(tw, "%s\t%s\n", t.pkg, t.test)
			} else {
				fmt.Fprintf(tw, "%s\t%s\t(%s)\n", t.pkg, t.test, t.note)
			}
		}
		tw.Flush()
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, s.totals())
}

// totals is the last line but one: the test counts over every package,
// and the packages by result.
func (s *summarizer) totals() string {
	var passed, failed, skipped int
	byStatus := map[string]int{}
	for _, p := range s.pkgs {
		passed += p.passed
		failed += p.failed
		skipped += p.skipped
		byStatus[p.status]++
	}
	return fmt.Sprintf("Total: %d passed, %d failed, %d skipped; %s: %d ok, %d FAIL, %d no tests",
		passed, failed, skipped, plural(len(s.pkgs), "package"), byStatus[statusOK], byStatus[statusFail], byStatus[statusNoTests])
}

// slowest is the n slowest finished top-level tests, slowest first.
func (s *summarizer) slowest(n int) []testResult {
	tests := slices.Clone(s.topLevel)
	slices.SortStableFunc(tests, func(a, b testResult) int {
		return cmp.Or(cmp.Compare(b.elapsed, a.elapsed), strings.Compare(a.pkg, b.pkg), strings.Compare(a.test, b.test))
	})
	return tests[:min(n, len(tests))]
}

// verdict is the last line: PASS, or FAIL with what failed. status is go
// test's exit status, which can fail a run whose stream shows no failure
// (a bad flag, go test killed); wall is how long the run took.
func (s *summarizer) verdict(status int, wall time.Duration) string {
	took := ""
	if wall > 0 {
		took = fmt.Sprintf(" in %s", wall.Round(time.Second/10))
	}
	if !s.failed() && status == 0 {
		return "PASS" + took
	}
	var what []string
	if n := len(s.failedTests); n > 0 {
		what = append(what, plural(n, "test"))
	}
	failedPkgs := 0
	for _, p := range s.pkgs {
		if p.status == statusFail {
			failedPkgs++
		}
	}
	if failedPkgs > 0 {
		what = append(what, plural(failedPkgs, "package"))
	}
	msg := "FAIL"
	if len(what) > 0 {
		msg += ": " + strings.Join(what, " and ") + " failed"
	}
	if status != 0 {
		msg += fmt.Sprintf("; go test exited with status %d", status)
	}
	return msg + took
}

func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// sortedResults orders tests by package, keeping the stream's order
// within a package.
func sortedResults(tests []testResult) []testResult {
	tests = slices.Clone(tests)
	slices.SortStableFunc(tests, func(a, b testResult) int { return strings.Compare(a.pkg, b.pkg) })
	return tests
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
