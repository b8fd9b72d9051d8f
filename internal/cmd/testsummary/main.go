// Command testsummary runs go test -json and turns its stream into what a
// developer needs from a long run such as make test. While the tests run it
// prints a result line per package as go test reports it, the full output
// of every failing test (subtests included), the output of every failing
// package outside its tests (a panic, a timeout, goleak's report from
// TestMain) and every build error. At the end it prints a summary: one
// line per package with its result, elapsed time and counts of passed,
// failed and skipped tests; every skipped test with its skip message; the
// ten slowest top-level tests; the failed tests by name; and the totals.
// The output of tests that pass is not shown (-json-out keeps it).
//
//	go run ./internal/cmd/testsummary -- -race -count=1 -timeout 15m ./...
//	go test -json ./... | go run ./internal/cmd/testsummary
//
// The arguments after -- go to go test, after -json. Without them,
// testsummary reads a go test -json stream from stdin. It exits with go
// test's exit status when that is not 0, with 1 when the stream shows a
// failure all the same, and with 0 otherwise.
//
// Flags:
//
//	-go command     the go command that runs go test (default "go")
//	-json-out file  also write go test's raw -json stream to file
//	-slowest n      how many of the slowest tests to list (default 10)
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the command: it returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testsummary", flag.ContinueOnError)
	fs.SetOutput(stderr)
	goCmd := fs.String("go", "go", "the go `command` that runs go test")
	jsonOut := fs.String("json-out", "", "also write go test's raw -json stream to `file`")
	slowest := fs.Int("slowest", 10, "list the `n` slowest tests")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: testsummary [flags] -- [go test flags] [packages]")
		fmt.Fprintln(fs.Output(), "       go test -json ... | testsummary [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *slowest < 0 {
		fmt.Fprintln(stderr, "testsummary: -slowest must not be negative")
		return 2
	}
	if fs.NArg() == 0 && isTerminal(stdin) {
		fs.Usage()
		return 2
	}

	var raw *rawCopy
	if *jsonOut != "" {
		f, err := os.Create(*jsonOut)
		if err != nil {
			fmt.Fprintln(stderr, "testsummary:", err)
			return 2
		}
		defer f.Close() // for the early returns; close reports the error
		raw = &rawCopy{f: f}
	}

	start := time.Now()
	s := newSummarizer(stdout)
	var readErr error
	consume := func(r io.Reader) { readErr = s.consume(raw.tee(r)) }
	status := 0
	if fs.NArg() == 0 {
		consume(stdin)
	} else {
		var err error
		if status, err = goTest(*goCmd, fs.Args(), stderr, consume); err != nil {
			fmt.Fprintln(stderr, "testsummary:", err)
			return 2
		}
	}
	s.finish()
	s.report(stdout, *slowest)
	fmt.Fprintln(stdout, s.verdict(status, time.Since(start)))

	code := 0
	switch {
	case status != 0:
		code = status
	case s.failed():
		code = 1
	}
	if readErr != nil {
		fmt.Fprintln(stderr, "testsummary: reading the stream:", readErr)
		code = max(code, 1)
	}
	if err := raw.close(); err != nil {
		fmt.Fprintf(stderr, "testsummary: writing %s: %v\n", *jsonOut, err)
		code = max(code, 1)
	}
	return code
}

// goTest runs go test -json with args, hands its stdout to consume and
// returns its exit status, or an error if it did not start. go test's
// stderr goes to stderr.
func goTest(goCmd string, args []string, stderr io.Writer, consume func(io.Reader)) (int, error) {
	cmd := exec.Command(goCmd, append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	// An interrupt from the terminal reaches go test too: outlive it, to
	// summarize what finished. Notify, not Ignore, which go test would
	// inherit.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	consume(out)
	io.Copy(io.Discard, out) // if consume stopped early: go test must not block on a full pipe
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return max(exit.ExitCode(), 1), nil // -1: killed by a signal
	case err != nil:
		fmt.Fprintln(stderr, "testsummary: go test:", err)
		return 1, nil
	}
	return 0, nil
}

// rawCopy copies the stream to the -json-out file. A failed write stops
// the copy, not the run: close reports it at the end.
type rawCopy struct {
	f   *os.File
	err error
}

// tee returns r, copied to c as it is read when c is not nil.
func (c *rawCopy) tee(r io.Reader) io.Reader {
	if c == nil {
		return r
	}
	return io.TeeReader(r, c)
}

func (c *rawCopy) Write(p []byte) (int, error) {
	if c.err == nil {
		_, c.err = c.f.Write(p)
	}
	return len(p), nil
}

// close closes the file and returns the first error of the copy.
func (c *rawCopy) close() error {
	if c == nil {
		return nil
	}
	return errors.Join(c.err, c.f.Close())
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
