// Command report writes RESULTS.md from the JSON that cmd/bench wrote:
//
//	go run ./cmd/report -in results.json -out RESULTS.md
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/jobguard/jobguard/bench/internal/report"
	"github.com/jobguard/jobguard/bench/internal/results"
)

// makeCmd is the command that produces the report, as the report states it.
const makeCmd = "make bench"

func main() {
	in := flag.String("in", "results.json", "results written by cmd/bench")
	out := flag.String("out", "RESULTS.md", "the Markdown report to write")
	flag.Parse()
	run, err := results.Read(*in)
	if err == nil {
		err = os.WriteFile(*out, []byte(report.Markdown(run, makeCmd)), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}
