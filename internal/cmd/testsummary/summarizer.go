package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// event is one line of go test -json (cmd/test2json). Build events
// (Action build-output and build-fail) carry ImportPath instead of Package.
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64 // seconds
	Output      string
	ImportPath  string
	FailedBuild string // on a package's fail: the ImportPath whose build failed
}

// Package results as the summary names them.
const (
	statusOK      = "ok"
	statusFail    = "FAIL"
	statusNoTests = "no tests"
)

// pkgResult is what the summarizer knows of one package.
type pkgResult struct {
	name    string
	status  string // "" until the package's own pass, fail or skip event
	note    string // why it failed without a test failing: "build failed", "setup failed", "no result"
	elapsed float64

	passed, failed, skipped int

	output  []string            // the package's own output, outside any test
	running map[string]*testRun // tests started and not finished, by name
	order   []*testRun          // the same tests, in the order they started
}

// testRun is a test that has started and not finished, with its output so far.
type testRun struct {
	name   string
	output []string
}

// testResult names one finished test.
type testResult struct {
	pkg, test string
	elapsed   float64
	note      string // for failed tests that never reported: "did not finish"
	reason    string // for skipped tests: the skip message
}

// summarizer folds a go test -json stream into per-package results. As
// packages and tests finish it writes progress to out: a result line per
// package, the full output of every failing test, the package-level
// output of every failing package and the errors of every failed build.
// Output of tests that pass is dropped when they pass.
type summarizer struct {
	out io.Writer

	pkgs   map[string]*pkgResult
	builds map[string]*build // by ImportPath
	order  []*build          // builds in the order they reported

	failedTests  []testResult
	skippedTests []testResult
	topLevel     []testResult // finished top-level tests, for the slowest
	sawFailure   bool
}

// build is the output of compiling one package (or setting it up).
type build struct {
	importPath string
	output     []string
	failed     bool
	printed    bool
}

func newSummarizer(out io.Writer) *summarizer {
	return &summarizer{
		out:    out,
		pkgs:   make(map[string]*pkgResult),
		builds: make(map[string]*build),
	}
}

// consume reads the stream until EOF. Lines that are not JSON events (go
// test prints none on stdout, but a wrapper might) are copied to out as
// they are.
func (s *summarizer) consume(r io.Reader) error {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			s.line(line)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (s *summarizer) line(line []byte) {
	text := strings.TrimRight(string(line), "\r\n")
	var e event
	if !strings.HasPrefix(text, "{") || json.Unmarshal([]byte(text), &e) != nil || e.Action == "" {
		fmt.Fprintln(s.out, text)
		return
	}
	s.handle(e)
}

func (s *summarizer) handle(e event) {
	switch e.Action {
	case "build-output":
		b := s.build(e.ImportPath)
		b.output = append(b.output, e.Output)
		return
	case "build-fail":
		b := s.build(e.ImportPath)
		b.failed = true
		s.sawFailure = true
		s.printBuild(b)
		return
	}
	if e.Package == "" {
		return
	}
	p := s.pkg(e.Package)
	if e.Test == "" {
		s.packageEvent(p, e)
	} else {
		s.testEvent(p, e)
	}
}

func (s *summarizer) build(importPath string) *build {
	b, ok := s.builds[importPath]
	if !ok {
		b = &build{importPath: importPath}
		s.builds[importPath] = b
		s.order = append(s.order, b)
	}
	return b
}

func (s *summarizer) pkg(name string) *pkgResult {
	p, ok := s.pkgs[name]
	if !ok {
		p = &pkgResult{name: name, running: make(map[string]*testRun)}
		s.pkgs[name] = p
	}
	return p
}

func (s *summarizer) packageEvent(p *pkgResult, e event) {
	switch e.Action {
	case "output":
		p.output = append(p.output, e.Output)
	case "pass":
		s.finishPackage(p, statusOK, e)
	case "skip":
		s.finishPackage(p, statusNoTests, e)
	case "fail":
		s.finishPackage(p, statusFail, e)
	}
}

func (s *summarizer) testEvent(p *pkgResult, e event) {
	if e.Action == "run" {
		t := &testRun{name: e.Test}
		p.running[e.Test] = t
		p.order = append(p.order, t)
		return
	}
	t := p.running[e.Test]
	switch e.Action {
	case "output":
		if t == nil {
			// Output of a test that has finished, or never started: the
			// package's, so that it shows if the package fails.
			p.output = append(p.output, e.Output)
			return
		}
		t.output = append(t.output, e.Output)
		return
	case "pause", "cont":
		return
	}
	// The test has finished: pass, fail, skip or bench.
	if t == nil {
		t = &testRun{name: e.Test}
	}
	s.forget(p, t)
	res := testResult{pkg: p.name, test: e.Test, elapsed: e.Elapsed}
	switch e.Action {
	case "pass":
		p.passed++
		p.output = append(p.output, trailing(t.output)...)
	case "skip":
		p.skipped++
		p.output = append(p.output, trailing(t.output)...)
		res.reason = skipReason(t.output)
		s.skippedTests = append(s.skippedTests, res)
	case "fail":
		p.failed++
		s.sawFailure = true
		s.failedTests = append(s.failedTests, res)
		fmt.Fprintf(s.out, "=== FAIL: %s %s (%.2fs)\n", p.name, e.Test, e.Elapsed)
		s.print(t.output)
	default: // bench
		return
	}
	if !strings.Contains(e.Test, "/") {
		s.topLevel = append(s.topLevel, res)
	}
}

// forget removes a finished test from the running ones.
func (s *summarizer) forget(p *pkgResult, t *testRun) {
	delete(p.running, t.name)
	for i, r := range p.order {
		if r == t {
			p.order = append(p.order[:i], p.order[i+1:]...)
			return
		}
	}
}

// finishPackage records a package's result and writes its progress: the
// output of tests that never finished (a panic or a timeout ended the
// binary), the package's own output if it failed, and its result line.
func (s *summarizer) finishPackage(p *pkgResult, status string, e event) {
	p.status, p.elapsed = status, e.Elapsed
	if status == statusFail {
		s.sawFailure = true
		for _, t := range p.order {
			p.failed++
			s.failedTests = append(s.failedTests, testResult{pkg: p.name, test: t.name, note: "did not finish"})
			fmt.Fprintf(s.out, "=== FAIL: %s %s (did not finish)\n", p.name, t.name)
			s.print(t.output)
		}
		if e.FailedBuild != "" {
			p.note = buildNote(p)
			if b := s.builds[e.FailedBuild]; b != nil {
				s.printBuild(b)
			}
		}
		if out := packageOutput(p); len(out) > 0 {
			fmt.Fprintf(s.out, "=== FAIL: %s (package output)\n", p.name)
			s.print(out)
		}
	}
	clear(p.running)
	p.order, p.output = nil, nil
	fmt.Fprintln(s.out, p.resultLine())
}

// finish ends the stream: a package that started and never reported a
// result (go test was killed) failed.
func (s *summarizer) finish() {
	for _, name := range sortedKeys(s.pkgs) {
		p := s.pkgs[name]
		if p.status == "" {
			p.note = "no result"
			s.finishPackage(p, statusFail, event{})
		}
	}
}

func (s *summarizer) printBuild(b *build) {
	if b.printed {
		return
	}
	b.printed = true
	s.print(b.output)
}

func (s *summarizer) print(lines []string) {
	for _, l := range lines {
		io.WriteString(s.out, l)
		if !strings.HasSuffix(l, "\n") {
			io.WriteString(s.out, "\n")
		}
	}
}

// failed reports whether the stream showed any failure: a test, a package
// or a build.
func (s *summarizer) failed() bool { return s.sawFailure }

// resultLine is the progress line of a finished package, go test's own
// with the counts added.
func (p *pkgResult) resultLine() string {
	switch {
	case p.status == statusNoTests:
		return fmt.Sprintf("?   \t%s\t[no test files]", p.name)
	case p.note != "" && p.passed+p.failed+p.skipped == 0:
		return fmt.Sprintf("FAIL\t%s [%s]", p.name, p.note)
	case p.note != "":
		return fmt.Sprintf("FAIL\t%s [%s]\t%s", p.name, p.note, p.counts())
	}
	return fmt.Sprintf("%-4s\t%s\t%.3fs\t%s", p.status, p.name, p.elapsed, p.counts())
}

func (p *pkgResult) counts() string {
	parts := []string{fmt.Sprintf("%d passed", p.passed)}
	if p.failed > 0 {
		parts = append(parts, fmt.Sprintf("%d failed", p.failed))
	}
	if p.skipped > 0 {
		parts = append(parts, fmt.Sprintf("%d skipped", p.skipped))
	}
	return strings.Join(parts, ", ")
}

// buildNote is "build failed" or "setup failed", as go test's own FAIL
// line for the package says.
func buildNote(p *pkgResult) string {
	prefix := "FAIL\t" + p.name + " ["
	for _, l := range p.output {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			if note, _, ok := strings.Cut(rest, "]"); ok {
				return note
			}
		}
	}
	return "build failed"
}

// packageOutput is a failing package's own output without go test's
// PASS, FAIL and result lines, which the summarizer's result line
// replaces: what is left is a panic outside a test, TestMain's messages
// (goleak's), or output misattributed to a test that had passed.
func packageOutput(p *pkgResult) []string {
	var out []string
	for _, l := range p.output {
		line := strings.TrimRight(l, "\n")
		switch {
		case line == "PASS", line == "FAIL",
			strings.HasPrefix(line, "FAIL\t"+p.name),
			strings.HasPrefix(line, "ok  \t"+p.name),
			strings.HasPrefix(line, "?   \t"+p.name):
			continue
		}
		out = append(out, l)
	}
	return out
}

// trailing is the output a test printed after its own --- PASS or ---
// SKIP line. test2json attributes a panic in a parallel sibling, or a log
// after the test returned, to the last test that reported, so it belongs
// to the package.
func trailing(lines []string) []string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimLeft(lines[i], " ")
		if strings.HasPrefix(l, "--- PASS: ") || strings.HasPrefix(l, "--- SKIP: ") {
			return lines[i+1:]
		}
	}
	return nil
}

// logHeader matches the first line of a t.Log, t.Skip or t.Error
// message: "    file_test.go:12: text".
var logHeader = regexp.MustCompile(`^\s+\S+\.go:\d+: `)

// skipReason is the message of a skipped test: the last message it
// logged before its --- SKIP line, which is the one t.Skip and t.Skipf
// print, with any continuation lines joined into one line.
func skipReason(lines []string) string {
	var msg []string
	open := false // whether an indented line continues msg
	for _, l := range lines {
		line := strings.TrimRight(l, "\n")
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "--- SKIP: "):
			if len(msg) == 0 {
				return "(no message)"
			}
			return strings.Join(msg, " ")
		case strings.HasPrefix(trimmed, "=== "), trimmed == "":
			continue
		case logHeader.MatchString(line):
			msg, open = []string{trimmed}, true
		case open && strings.HasPrefix(line, "    "):
			msg = append(msg, trimmed)
		default: // a line the test printed itself
			open = false
		}
	}
	if len(msg) == 0 {
		return "(no message)"
	}
	return strings.Join(msg, " ")
}
