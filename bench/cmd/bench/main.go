// Command bench runs guard, redsync, redislock and a raw SET NX baseline
// through the same scenarios, each case on a fresh redis-server, and writes
// every number to one JSON file (see package results for its schema):
//
//	go run ./cmd/bench -out results.json
//
// By default the client process is pinned to CPU 0 and every redis-server
// to CPU 1, so that each has a core of its own and neither steals the
// other's: the command re-executes itself under `taskset -c 0` (the Go
// runtime then also sees one CPU, GOMAXPROCS=1) and starts each server under
// `taskset -c 1`. Pass -client-cpu -1 -server-cpu -1 not to pin.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/jobguard/jobguard/bench/internal/results"
	"github.com/jobguard/jobguard/bench/internal/scenario"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "results.json", "where to write the results")
	clientCPU := flag.Int("client-cpu", 0, "CPU to pin this process to; -1: don't pin")
	serverCPU := flag.Int("server-cpu", 1, "CPU to pin each redis-server to; -1: don't pin")
	budget := flag.Duration("budget", 4*time.Minute, "no disturbed case is re-run once this much time has passed")
	tiny := flag.Bool("tiny", false, "run every scenario at a tiny size (seconds), to try the harness")
	only := flag.String("only", "", "run only the cases whose name matches this regexp (a partial run, e.g. 'handoff .* hold=1ms')")
	flag.Parse()
	var onlyRE *regexp.Regexp
	if *only != "" {
		var err error
		if onlyRE, err = regexp.Compile(*only); err != nil {
			return fmt.Errorf("-only: %w", err)
		}
	}
	if err := pin(*clientCPU, *serverCPU); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	sizes := scenario.DefaultSizes()
	if *tiny {
		sizes = scenario.TinySizes()
	}
	r := &scenario.Runner{
		Sizes:     sizes,
		ServerCPU: *serverCPU,
		Deadline:  start.Add(*budget),
		Only:      onlyRE,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "%6.1fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
		},
	}
	res, err := scenario.All(ctx, r)
	if err != nil {
		return err
	}
	res.Machine, err = machine(ctx, *clientCPU, *serverCPU)
	if err != nil {
		return err
	}
	res.Command = strings.Join(append([]string{"go run ./cmd/bench"}, os.Args[1:]...), " ")
	res.ElapsedSec = time.Since(start).Seconds()
	if err := results.Write(*out, res); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s in %.0fs\n", *out, res.ElapsedSec)
	return nil
}

// pinnedEnv marks the re-executed process, so that it never re-executes
// itself again.
const pinnedEnv = "JOBGUARD_BENCH_PINNED"

// pin re-executes this process under `taskset -c clientCPU` unless it
// already runs there. It checks that both CPUs exist.
func pin(clientCPU, serverCPU int) error {
	n, err := onlineCPUs()
	if err != nil {
		return err
	}
	for _, cpu := range []int{clientCPU, serverCPU} {
		if cpu >= n {
			return fmt.Errorf("CPU %d does not exist (%d online); choose others with -client-cpu and -server-cpu, or -1 not to pin", cpu, n)
		}
	}
	if clientCPU < 0 || os.Getenv(pinnedEnv) != "" {
		return nil
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return fmt.Errorf("pinning needs taskset (util-linux): %w; or pass -client-cpu -1", err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := append([]string{"taskset", "-c", fmt.Sprint(clientCPU), self}, os.Args[1:]...)
	env := append(os.Environ(), pinnedEnv+"=1")
	// On success Exec does not return: the pinned process carries on.
	return fmt.Errorf("re-exec under taskset: %w", syscall.Exec(taskset, args, env))
}
