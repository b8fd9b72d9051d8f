// Command bench runs guard, redsync, redislock and a raw SET NX baseline
// through the same scenarios, each case on a fresh redis-server, and writes
// every number to one JSON file (see package results for its schema):
//
//	go run ./cmd/bench -out results.json
//
// The headline figures are measured as users run a service: nothing is
// pinned, GOMAXPROCS is Go's default (every CPU), the server is on
// loopback, and every operation runs under a cancelable context of its own
// (see scenario.OpContext). Then, unless -pinned=false, the command measures
// PING, sequential and throughput a second time pinned, for a second table:
// it re-executes itself under `taskset -c client-cpu` (the Go runtime then
// sees one CPU, GOMAXPROCS 1) and starts each redis-server under `taskset -c
// server-cpu`. The pinned figures go into the same JSON, under "pinned".
//
// -quick runs smaller cases (about 45 s in all on 2 cores); -tiny runs a
// harness check whose numbers mean nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobguard/jobguard/bench/internal/results"
	"github.com/jobguard/jobguard/bench/internal/scenario"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// flags are the command's flags. The pinned part receives them again,
// with its own -out and -budget.
type flags struct {
	out                  string
	pinned               bool
	clientCPU, serverCPU int
	budget               time.Duration
	quick, tiny          bool
	only                 string
}

func parseFlags() flags {
	var f flags
	flag.StringVar(&f.out, "out", "results.json", "where to write the results")
	flag.BoolVar(&f.pinned, "pinned", true, "after the unpinned headline cases, measure PING, sequential and throughput again pinned (-client-cpu, GOMAXPROCS 1; -server-cpu), for a second table")
	flag.IntVar(&f.clientCPU, "client-cpu", 0, "CPU the client process of the pinned part runs on")
	flag.IntVar(&f.serverCPU, "server-cpu", 1, "CPU each redis-server of the pinned part runs on")
	flag.DurationVar(&f.budget, "budget", 4*time.Minute, "no disturbed case is re-run once this much time has passed (the unpinned part stops re-running at 3/4 of it when the pinned part follows)")
	flag.BoolVar(&f.quick, "quick", false, "smaller cases, no renewal, no re-runs: about 45 s in all on 2 cores, for working on the libraries")
	flag.BoolVar(&f.tiny, "tiny", false, "run every scenario at a tiny size (seconds), to try the harness; its numbers mean nothing")
	flag.StringVar(&f.only, "only", "", "run only the cases whose name matches this regexp (a partial run, e.g. 'handoff .* hold=1ms')")
	flag.Parse()
	return f
}

func (f flags) sizes() results.Sizes {
	switch {
	case f.tiny:
		return scenario.TinySizes()
	case f.quick:
		return scenario.QuickSizes()
	}
	return scenario.DefaultSizes()
}

// pinnedEnv marks the re-executed process that measures the pinned part.
const pinnedEnv = "JOBGUARD_BENCH_PINNED"

func run() error {
	f := parseFlags()
	var onlyRE *regexp.Regexp
	if f.only != "" {
		var err error
		if onlyRE, err = regexp.Compile(f.only); err != nil {
			return fmt.Errorf("-only: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	if os.Getenv(pinnedEnv) != "" {
		return pinnedPart(ctx, f, onlyRE, start)
	}
	if f.pinned {
		if err := checkPinning(f.clientCPU, f.serverCPU); err != nil {
			return err
		}
	}
	deadline := start.Add(f.budget)
	if f.pinned {
		deadline = start.Add(f.budget * 3 / 4)
	}
	res, err := scenario.All(ctx, newRunner(f.sizes(), -1, deadline, onlyRE, start, ""))
	if err != nil {
		return err
	}
	if res.Machine, err = machine(ctx, -1, -1); err != nil {
		return err
	}
	res.Command = strings.Join(append([]string{"go run ./cmd/bench"}, os.Args[1:]...), " ")
	if f.pinned {
		if res.Pinned, err = runPinned(ctx, f, time.Until(start.Add(f.budget))); err != nil {
			return err
		}
	}
	res.ElapsedSec = time.Since(start).Seconds()
	if err := results.Write(f.out, res); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s in %.0fs\n", f.out, res.ElapsedSec)
	return nil
}

// newRunner returns a runner that logs its progress to stderr, each line
// prefixed with the seconds since start and followed by part.
func newRunner(s results.Sizes, serverCPU int, deadline time.Time, only *regexp.Regexp, start time.Time, part string) *scenario.Runner {
	return &scenario.Runner{
		Sizes:     s,
		ServerCPU: serverCPU,
		Deadline:  deadline,
		Only:      only,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "%6.1fs  %s%s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...), part)
		},
	}
}

// runPinned re-executes this command under `taskset -c clientCPU` to
// measure the pinned part, with budget as its time budget, and returns
// what it measured.
func runPinned(ctx context.Context, f flags, budget time.Duration) (*results.Run, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bench-pinned-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "pinned.json")
	args := []string{"-c", fmt.Sprint(f.clientCPU), self,
		"-out", out, "-budget", max(budget, 0).String(),
		"-client-cpu", fmt.Sprint(f.clientCPU), "-server-cpu", fmt.Sprint(f.serverCPU),
		"-quick=" + fmt.Sprint(f.quick), "-tiny=" + fmt.Sprint(f.tiny), "-only", f.only}
	cmd := exec.CommandContext(ctx, "taskset", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// GOMAXPROCS is left to follow the affinity: one CPU.
	cmd.Env = append(withoutEnv(os.Environ(), "GOMAXPROCS"), pinnedEnv+"=1")
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("pinned part: %w", err)
	}
	res, err := results.Read(out)
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// pinnedPart is the re-executed process: it checks that it runs on
// clientCPU alone with GOMAXPROCS 1, measures PING, sequential and
// throughput with each redis-server on serverCPU, and writes them to -out.
func pinnedPart(ctx context.Context, f flags, only *regexp.Regexp, start time.Time) error {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return err
	}
	if set.Count() != 1 || !set.IsSet(f.clientCPU) || runtime.GOMAXPROCS(0) != 1 {
		return fmt.Errorf("pinned part: runs on %d CPUs with GOMAXPROCS %d, want CPU %d alone and GOMAXPROCS 1",
			set.Count(), runtime.GOMAXPROCS(0), f.clientCPU)
	}
	r := newRunner(scenario.CostsOnly(f.sizes()), f.serverCPU, start.Add(f.budget), only, start, " (pinned part)")
	res, err := scenario.All(ctx, r)
	if err != nil {
		return err
	}
	if res.Machine, err = machine(ctx, f.clientCPU, f.serverCPU); err != nil {
		return err
	}
	res.Command = fmt.Sprintf("taskset -c %d bench %s", f.clientCPU, strings.Join(os.Args[1:], " "))
	res.ElapsedSec = time.Since(start).Seconds()
	return results.Write(f.out, res)
}

// checkPinning checks that both CPUs exist and that taskset is there.
func checkPinning(clientCPU, serverCPU int) error {
	n, err := onlineCPUs()
	if err != nil {
		return err
	}
	for _, cpu := range []int{clientCPU, serverCPU} {
		if cpu < 0 || cpu >= n {
			return fmt.Errorf("CPU %d does not exist (%d online); choose others with -client-cpu and -server-cpu, or pass -pinned=false", cpu, n)
		}
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return fmt.Errorf("the pinned part needs taskset (util-linux), or pass -pinned=false: %w", err)
	}
	return nil
}

// withoutEnv returns env without the variable name.
func withoutEnv(env []string, name string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
