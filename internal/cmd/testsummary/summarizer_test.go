package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the summarizer's output")

// The streams in testdata were recorded from go test -json (go1.26, the
// Time fields and most stack frames dropped), except subpanic, killed,
// skip_reasons and slow, written by hand from the shapes test2json emits.

// summarize feeds testdata/name.jsonl to a summarizer and returns it with
// its progress and its report (with the verdict for an exit status of 0).
func summarize(t *testing.T, name string) (s *summarizer, progress, report string) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var p, r bytes.Buffer
	s = newSummarizer(&p)
	if err := s.consume(f); err != nil {
		t.Fatal(err)
	}
	s.finish()
	s.report(&r, 10)
	r.WriteString(s.verdict(0, 0) + "\n")
	return s, p.String(), r.String()
}

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failed   bool
		progress []string // in the progress, in this order
		report   []string // in the report, in this order
		absent   []string // in neither
	}{
		{
			name: "pass",
			progress: []string{
				"?   \texample.com/exp/notests\t[no test files]\n",
				"ok  \texample.com/exp/pass\t0.003s\t4 passed\n",
			},
			report: []string{
				"example.com/exp/notests  no tests  -",
				"example.com/exp/pass     ok        0.00s    4       0       0\n",
				"    0.00s  TestA  example.com/exp/pass\n",
				"Total: 4 passed, 0 failed, 0 skipped; 2 packages: 1 ok, 0 FAIL, 1 no tests\nPASS\n",
			},
			// A passing test's output is dropped.
			absent: []string{"hello", "=== FAIL", "Skipped", "Failed"},
		},
		{
			name:   "fail",
			failed: true,
			progress: []string{
				// The failing subtest, in full, then its parent.
				"=== FAIL: example.com/exp/fail TestTable/bad (0.00s)\n" +
					"=== RUN   TestTable/bad\n" +
					"    f_test.go:7: some context\n" +
					"    f_test.go:7: got 1, want 2\n" +
					"--- FAIL: TestTable/bad (0.00s)\n",
				"=== FAIL: example.com/exp/fail TestTable (0.00s)\n" +
					"=== RUN   TestTable\n" +
					"    f_test.go:5: parent log\n" +
					"--- FAIL: TestTable (0.00s)\n",
				"FAIL\texample.com/exp/fail\t0.002s\t2 passed, 2 failed\n",
			},
			report: []string{
				"=== Failed tests (2), their output is above\n" +
					"example.com/exp/fail  TestTable/bad\n" +
					"example.com/exp/fail  TestTable\n",
				"Total: 2 passed, 2 failed, 0 skipped; 1 package: 0 ok, 1 FAIL, 0 no tests\n" +
					"FAIL: 2 tests and 1 package failed\n",
			},
			// Nor is the output of the passing subtest, nor go test's own FAIL lines.
			absent: []string{"TestTable/good (", "(package output)"},
		},
		{
			name:     "skip",
			progress: []string{"ok  \texample.com/exp/skip\t0.003s\t2 passed, 3 skipped\n"},
			report: []string{
				"=== Skipped tests (3)\n" +
					"example.com/exp/skip  TestSkipped  s_test.go:3: redis-server not found\n" +
					"example.com/exp/skip  TestSub/a    s_test.go:4: needs linux\n" +
					"example.com/exp/skip  TestSkipNow  (no message)\n",
				"Total: 2 passed, 0 failed, 3 skipped;",
				"PASS\n",
			},
			// The reason is the skip message, not an earlier log.
			absent: []string{"before"},
		},
		{
			name: "skip_reasons",
			report: []string{
				"example.com/exp/reasons  TestMultiline  r_test.go:9: no Sentinel: redis-sentinel not on PATH\n",
				"    0.25s  TestMultiline  example.com/exp/reasons\n",
			},
			absent: []string{"connecting", "printed by the test"},
		},
		{
			name:   "build",
			failed: true,
			progress: []string{
				"# example.com/exp/setup\n" +
					"setup/s_test.go:2:20: no required module provides package example.com/nonexistent; to add it:\n" +
					"\tgo get example.com/nonexistent\n" +
					"FAIL\texample.com/exp/setup [setup failed]\n",
				"# example.com/exp/build [example.com/exp/build.test]\n" +
					"build/b_test.go:3:40: cannot use \"s\" (untyped string constant) as int value in variable declaration\n" +
					"FAIL\texample.com/exp/build [build failed]\n",
			},
			report: []string{
				"example.com/exp/build  FAIL (build failed)  -        0       0       0\n",
				"example.com/exp/setup  FAIL (setup failed)  -",
				"=== Build errors (2)\n# example.com/exp/setup\n",
				"FAIL: 2 packages failed\n",
			},
		},
		{
			name:   "shared_build",
			failed: true,
			progress: []string{
				"# example.com/exp/lib\n",
				"FAIL\texample.com/exp/usera [build failed]\n",
				"FAIL\texample.com/exp/userb [build failed]\n",
			},
			report: []string{"=== Build errors (1)\n# example.com/exp/lib\n"},
		},
		{
			name:   "panic",
			failed: true,
			progress: []string{
				"=== FAIL: example.com/exp/panic TestBoom (0.00s)\n" +
					"=== RUN   TestBoom\n" +
					"    p_test.go:4: about to\n" +
					"--- FAIL: TestBoom (0.00s)\n" +
					"panic: assignment to entry in nil map [recovered, repanicked]\n",
				"\t/tmp/ts-exp/panic/p_test.go:4 +0x54\n" +
					"FAIL\texample.com/exp/panic\t0.005s\t1 passed, 1 failed\n",
			},
			report: []string{"example.com/exp/panic  TestBoom\n", "FAIL: 1 test and 1 package failed\n"},
		},
		{
			// A parallel subtest panics; test2json gives the panic to its
			// sibling, after the sibling's --- PASS line.
			name:   "subpanic",
			failed: true,
			progress: []string{
				"=== FAIL: example.com/exp/subpanic TestP/inner (0.00s)\n",
				"=== FAIL: example.com/exp/subpanic TestP (0.00s)\n",
				"=== FAIL: example.com/exp/subpanic (package output)\n" +
					"panic: boom [recovered, repanicked]\n",
				"FAIL\texample.com/exp/subpanic\t0.005s\t1 passed, 2 failed\n",
			},
		},
		{
			// The binary panics at -timeout: the running test never reports.
			name:   "timeout",
			failed: true,
			progress: []string{
				"=== FAIL: example.com/exp/timeout TestSlow (did not finish)\n" +
					"=== RUN   TestSlow\n" +
					"    t_test.go:4: sleeping\n" +
					"panic: test timed out after 1s\n" +
					"\trunning tests:\n" +
					"\t\tTestSlow (1s)\n",
				"FAIL\texample.com/exp/timeout\t1.006s\t1 passed, 1 failed\n",
			},
			report: []string{
				"example.com/exp/timeout  TestSlow  (did not finish)\n",
				"Total: 1 passed, 1 failed, 0 skipped;",
			},
		},
		{
			// Every test passes, then TestMain's goleak check fails the package.
			name:   "goleak",
			failed: true,
			progress: []string{
				"=== FAIL: example.com/exp/mainfail (package output)\n" +
					"goleak: Errors on successful test run: found unexpected goroutines:\n" +
					"[Goroutine 7 in state select]\n" +
					"FAIL\texample.com/exp/mainfail\t0.003s\t1 passed\n",
			},
			report: []string{
				"example.com/exp/mainfail  FAIL    0.00s    1       0       0\n",
				"FAIL: 1 package failed\n",
			},
			absent: []string{"PASS\n"},
		},
		{
			// go test was killed: the package never reported.
			name:   "killed",
			failed: true,
			progress: []string{
				"=== FAIL: example.com/exp/long TestSecond (did not finish)\n" +
					"=== RUN   TestSecond\n" +
					"    long_test.go:20: waiting for the leader\n",
				"FAIL\texample.com/exp/long [no result]\t1 passed, 1 failed\n",
			},
			report: []string{"example.com/exp/long  FAIL (no result)  -"},
		},
		{
			name: "slow",
			progress: []string{
				"not json: printed by a wrapper\n",
				"ok  \texample.com/exp/a\t11.000s\t2 passed, 1 skipped\n",
				"ok  \texample.com/exp/b\t10.200s\t3 passed\n",
			},
			report: []string{
				"=== Slowest tests (5)\n" +
					"   10.00s  TestB1  example.com/exp/b\n" +
					"    7.25s  TestA3  example.com/exp/a\n" +
					"    3.20s  TestA1  example.com/exp/a\n" +
					"    0.50s  TestA2  example.com/exp/a\n" +
					"    0.10s  TestB2  example.com/exp/b\n" +
					"\n",
			},
			// Subtests are not listed: their parents' time includes theirs.
			absent: []string{"TestB1/sub"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, progress, report := summarize(t, tc.name)
			if s.failed() != tc.failed {
				t.Errorf("failed() = %v, want %v", s.failed(), tc.failed)
			}
			inOrder(t, "progress", progress, tc.progress)
			inOrder(t, "report", report, tc.report)
			for _, a := range tc.absent {
				if strings.Contains(progress, a) || strings.Contains(report, a) {
					t.Errorf("%q is in the output:\n%s%s", a, progress, report)
				}
			}
		})
	}
}

// inOrder checks that got holds each of want, in that order.
func inOrder(t *testing.T, what, got string, want []string) {
	t.Helper()
	rest := got
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("%s lacks %q (or has it out of order):\n%s", what, w, got)
			return
		}
		rest = rest[i+len(w):]
	}
}

// The whole output of each recorded stream, byte for byte. Rewrite the
// golden files with go test ./internal/cmd/testsummary -update, and read
// the diff.
func TestGolden(t *testing.T) {
	streams, err := filepath.Glob(filepath.Join("testdata", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, stream := range streams {
		name := strings.TrimSuffix(filepath.Base(stream), ".jsonl")
		t.Run(name, func(t *testing.T) {
			_, progress, report := summarize(t, name)
			got := progress + report
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("output of %s differs from %s:\n%s", stream, golden, got)
			}
		})
	}
}

// Two runs of a package in one stream (two streams concatenated) add up.
func TestPackageTwice(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "fail.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	s := newSummarizer(&progress)
	if err := s.consume(bytes.NewReader(append(in, in...))); err != nil {
		t.Fatal(err)
	}
	s.finish()
	if got, want := s.totals(), "Total: 4 passed, 4 failed, 0 skipped; 1 package: 0 ok, 1 FAIL, 0 no tests"; got != want {
		t.Errorf("totals() = %q, want %q", got, want)
	}
	if n := strings.Count(progress.String(), "=== FAIL: example.com/exp/fail TestTable/bad"); n != 2 {
		t.Errorf("the failing subtest's output is shown %d times, want 2:\n%s", n, progress.String())
	}
}

func TestSlowestLimit(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{0, nil},
		{2, []string{"TestB1", "TestA3"}},
		{10, []string{"TestB1", "TestA3", "TestA1", "TestA2", "TestB2"}},
	} {
		s, _, _ := summarize(t, "slow")
		var got []string
		for _, r := range s.slowest(tc.n) {
			got = append(got, r.test)
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("slowest(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

func TestVerdict(t *testing.T) {
	pass, _, _ := summarize(t, "pass")
	fail, _, _ := summarize(t, "fail")
	for _, tc := range []struct {
		s      *summarizer
		status int
		want   string
	}{
		{pass, 0, "PASS"},
		{pass, 2, "FAIL; go test exited with status 2"}, // a bad flag: no stream
		{fail, 0, "FAIL: 2 tests and 1 package failed"},
		{fail, 1, "FAIL: 2 tests and 1 package failed; go test exited with status 1"},
	} {
		if got := tc.s.verdict(tc.status, 0); got != tc.want {
			t.Errorf("verdict(%d) = %q, want %q", tc.status, got, tc.want)
		}
	}
}

func TestSkipReason(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"none", []string{"=== RUN   TestX\n", "--- SKIP: TestX (0.00s)\n"}, "(no message)"},
		{"one", []string{"=== RUN   TestX\n", "    x_test.go:3: no redis\n", "--- SKIP: TestX (0.00s)\n"}, "x_test.go:3: no redis"},
		{"last of several", []string{"    x_test.go:3: a\n", "    x_test.go:4: b\n", "--- SKIP: TestX (0.00s)\n"}, "x_test.go:4: b"},
		{"continued", []string{"    x_test.go:3: a\n", "        b\n", "--- SKIP: TestX (0.00s)\n"}, "x_test.go:3: a b"},
		{"printed line not part of it", []string{"    x_test.go:3: a\n", "stdout\n", "--- SKIP: TestX (0.00s)\n"}, "x_test.go:3: a"},
		{"helper file", []string{"    redistest.go:83: redis-server not on PATH\n", "--- SKIP: TestX (0.01s)\n"}, "redistest.go:83: redis-server not on PATH"},
		{"no SKIP line", []string{"    x_test.go:3: a\n"}, "x_test.go:3: a"},
	} {
		if got := skipReason(tc.lines); got != tc.want {
			t.Errorf("%s: skipReason = %q, want %q", tc.name, got, tc.want)
		}
	}
}
