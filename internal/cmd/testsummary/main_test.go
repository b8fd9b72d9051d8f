package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// With TESTSUMMARY_FAKE_GO set, the test binary is the go command that
// run starts: it prints its arguments to stderr, writes the stream named
// by the variable to stdout and exits with TESTSUMMARY_FAKE_STATUS.
func TestMain(m *testing.M) {
	if stream, ok := os.LookupEnv("TESTSUMMARY_FAKE_GO"); ok {
		fakeGo(stream)
	}
	goleak.VerifyTestMain(m)
}

func fakeGo(stream string) {
	fmt.Fprintln(os.Stderr, "fake go:", strings.Join(os.Args[1:], " "))
	if stream != "" {
		f, err := os.Open(stream)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		io.Copy(os.Stdout, f)
	}
	status, _ := strconv.Atoi(os.Getenv("TESTSUMMARY_FAKE_STATUS"))
	os.Exit(status)
}

// runFakeGo runs the command with the test binary as go, replaying
// testdata/name.jsonl ("" for none) and exiting with status.
func runFakeGo(t *testing.T, name string, status int, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	stream := ""
	if name != "" {
		stream = filepath.Join("testdata", name+".jsonl")
	}
	t.Setenv("TESTSUMMARY_FAKE_GO", stream)
	t.Setenv("TESTSUMMARY_FAKE_STATUS", strconv.Itoa(status))
	var out, errb bytes.Buffer
	code = run(append([]string{"-go", os.Args[0]}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunGoTest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stream   string
		status   int // go test's
		wantCode int
		verdict  string
	}{
		{"pass", "pass", 0, 0, "PASS in "},
		{"test failure", "fail", 1, 1, "FAIL: 2 tests and 1 package failed; go test exited with status 1 in "},
		// go test's status wins, whatever the stream says.
		{"build failure", "build", 2, 2, "FAIL: 2 packages failed; go test exited with status 2 in "},
		{"status without a failure", "pass", 2, 2, "FAIL; go test exited with status 2 in "},
		{"bad flag, no stream", "", 2, 2, "FAIL; go test exited with status 2 in "},
		// A failure in the stream fails the run even if go test's status does not.
		{"failure with status 0", "fail", 0, 1, "FAIL: 2 tests and 1 package failed in "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runFakeGo(t, tc.stream, tc.status, "--", "-race", "-count=1", "./...")
			if code != tc.wantCode {
				t.Errorf("exit status %d, want %d", code, tc.wantCode)
			}
			if want := "fake go: test -json -race -count=1 ./...\n"; stderr != want {
				t.Errorf("stderr = %q, want %q", stderr, want)
			}
			lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, tc.verdict) {
				t.Errorf("last line %q, want it to start with %q", last, tc.verdict)
			}
		})
	}
}

func TestRunStdin(t *testing.T) {
	for _, tc := range []struct {
		stream   string
		wantCode int
	}{
		{"pass", 0},
		{"skip", 0},
		{"fail", 1},
		{"goleak", 1},
		{"build", 1},
		{"killed", 1},
	} {
		t.Run(tc.stream, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", tc.stream+".jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if code := run(nil, bytes.NewReader(in), &out, &errb); code != tc.wantCode {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, tc.wantCode, errb.String())
			}
			if !strings.Contains(out.String(), "=== Packages\n") {
				t.Errorf("no summary:\n%s", out.String())
			}
		})
	}
}

func TestRunJSONOut(t *testing.T) {
	raw := filepath.Join(t.TempDir(), "test.json")
	code, _, stderr := runFakeGo(t, "skip", 0, "-json-out", raw, "--", "./...")
	if code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, stderr)
	}
	got, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "skip.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("-json-out wrote\n%s\nwant the stream as go test wrote it\n%s", got, want)
	}
}

func TestRunUsage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"unknown flag", []string{"-race", "./..."}, "flag provided but not defined: -race"},
		{"negative slowest", []string{"-slowest", "-1"}, "-slowest must not be negative"},
		{"no go command", []string{"-go", filepath.Join(t.TempDir(), "nogo"), "--", "./..."}, "no such file or directory"},
		{"unwritable json-out", []string{"-json-out", filepath.Join(t.TempDir(), "no", "dir", "x.json")}, "no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tc.args, strings.NewReader(""), &out, &errb); code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			if !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("stderr = %q, want it to contain %q", errb.String(), tc.stderr)
			}
		})
	}
}
