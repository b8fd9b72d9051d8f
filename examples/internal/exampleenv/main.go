package exampleenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/jobguard/jobguard/guard"
)

// Main is an example's main: it parses the -trace flag, tells the story with
// run on standard output, passing run the Locker options that trace its lock
// operations when -trace is set, and exits 1 with the error, prefixed with
// name, if run fails.
//
// -trace (or -trace=tree) prints the spans as a tree after the story;
// -trace=json prints each span as the OpenTelemetry stdout exporter's
// indented JSON as it ends, among the story's lines.
func Main(name string, run func(ctx context.Context, out io.Writer, opts ...guard.Option) error) {
	var mode traceFlag
	flag.Var(&mode, "trace", "print every lock operation's OpenTelemetry span: -trace (or -trace=tree) as a tree after the story, -trace=json as JSON while it runs")
	flag.Parse()
	var opts []guard.Option
	finish := func() {}
	var err error
	switch mode {
	case traceTree:
		opts, finish, err = SpanTree(os.Stdout)
	case traceJSON:
		// Spans print as they end, interleaved with the story; a service
		// would export them to a collector instead.
		opts, finish, err = Tracing(os.Stdout, true)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
	err = run(context.Background(), os.Stdout, opts...)
	finish() // the tree, also of a story that failed
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// traceFlag is the value of -trace: off, tree or json. It is a boolean flag
// to the flag package, so that a bare -trace means tree.
type traceFlag string

const (
	traceOff  traceFlag = ""
	traceTree traceFlag = "tree"
	traceJSON traceFlag = "json"
)

func (f *traceFlag) String() string   { return string(*f) }
func (f *traceFlag) IsBoolFlag() bool { return true }

func (f *traceFlag) Set(s string) error {
	switch s {
	case "true", "tree":
		*f = traceTree
	case "json":
		*f = traceJSON
	case "false":
		*f = traceOff
	default:
		return errors.New("want -trace, -trace=tree or -trace=json")
	}
	return nil
}

// RunTraced tells an example's story as -trace=json does, with the spans
// printed compactly among the story's lines, and returns everything it
// printed.
func RunTraced(ctx context.Context, run func(ctx context.Context, out io.Writer, opts ...guard.Option) error) (string, error) {
	out := &Writer{}
	opts, shutdown, err := Tracing(out, false)
	if err != nil {
		return "", err
	}
	defer shutdown()
	err = run(ctx, out, opts...)
	return out.String(), err
}

// RunTree tells an example's story as -trace does: the story, then its
// spans as a tree. It returns everything it printed.
func RunTree(ctx context.Context, run func(ctx context.Context, out io.Writer, opts ...guard.Option) error) (string, error) {
	out := &Writer{}
	opts, print, err := SpanTree(out)
	if err != nil {
		return "", err
	}
	err = run(ctx, out, opts...)
	print()
	return out.String(), err
}
