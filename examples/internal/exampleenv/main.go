package exampleenv

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/jobguard/jobguard/guard"
)

// Main is an example's main: it parses the -trace flag, tells the story with
// run on standard output, passing run the Locker options that print spans
// when -trace is set, and exits 1 with the error, prefixed with name, if run
// fails.
func Main(name string, run func(ctx context.Context, out io.Writer, opts ...guard.Option) error) {
	withTrace := flag.Bool("trace", false, "print every lock operation's OpenTelemetry spans (stdout exporter)")
	flag.Parse()
	var opts []guard.Option
	if *withTrace {
		// Spans print as they end, interleaved with the story; a service
		// would export them to a collector instead.
		traceOpts, shutdown, err := Tracing(os.Stdout, true)
		if err != nil {
			fmt.Fprintln(os.Stderr, name+":", err)
			os.Exit(1)
		}
		defer shutdown()
		opts = traceOpts
	}
	if err := run(context.Background(), os.Stdout, opts...); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1) // the syncer has printed every span already
	}
}

// RunTraced tells an example's story as -trace does, with the spans printed
// compactly among the story's lines, and returns everything it printed.
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
