// Command charts draws the benchmark's PNG charts from the JSON that
// cmd/bench wrote:
//
//	go run ./cmd/charts -in results.json -dir .
//
// throughput.png: server CPU and client CPU per op and throughput per
// library, from the headline (unpinned) part (chart a); handoff.png:
// hand-off latency p50 and commands per acquisition against waiters
// (chart b).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jobguard/jobguard/bench/internal/charts"
	"github.com/jobguard/jobguard/bench/internal/report"
	"github.com/jobguard/jobguard/bench/internal/results"
)

func main() {
	in := flag.String("in", "results.json", "results written by cmd/bench")
	dir := flag.String("dir", ".", "directory to write the PNGs to")
	flag.Parse()
	if err := run(*in, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "charts:", err)
		os.Exit(1)
	}
}

func run(in, dir string) error {
	res, err := results.Read(in)
	if err != nil {
		return err
	}
	if err := charts.Throughput(res, filepath.Join(dir, report.ThroughputPNG)); err != nil {
		return err
	}
	return charts.Handoff(res, filepath.Join(dir, report.HandoffPNG))
}
