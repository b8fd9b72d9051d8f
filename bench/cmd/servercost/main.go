// Command servercost counts the instructions redis-server executes per
// uncontended acquire+release of each library, under valgrind's callgrind:
// a count that, unlike CPU time, does not move with the machine's noise.
//
//	go run ./cmd/servercost -n 2000
//
// For each library it starts a redis-server under callgrind with
// instrumentation off, warms the library up (loading its scripts), samples
// the server's idle cost (its cron) for a while, then turns instrumentation
// on with callgrind_control, runs n acquire+release pairs on one key from
// one goroutine, and counts on for a few seconds after the last pair, so
// that the keys a library leaves to expire are deleted inside the window.
// The count over the window, less the idle cost scaled to the window's
// length, divided by n, is the figure. With -annotate DIR it also leaves each
// library's callgrind output and callgrind_annotate's inclusive listing
// there, to see where the instructions go.
//
// With -waiters W (W > 1) it counts a contended key instead: W goroutines
// take turns on one key, each holding it for -hold, until n acquisitions
// are made in all; the figure is per acquisition, and counts what the
// library's waiting costs the server (guard's registrations and grants, a
// poller's failed attempts).
//
//	go run ./cmd/servercost -n 1000 -waiters 8 -hold 1ms -libs guard,redislock
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jobguard/jobguard/bench/internal/locks"
	"github.com/jobguard/jobguard/bench/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "servercost:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("n", 2000, "acquire+release pairs per library")
	libs := flag.String("libs", strings.Join(locks.Names(), ","), "libraries to measure, comma-separated")
	annotate := flag.String("annotate", "", "directory to keep callgrind's output and an inclusive annotation in")
	out := flag.String("out", "", "also write the table, with how it was measured, to this Markdown file")
	waiters := flag.Int("waiters", 1, "goroutines taking turns on the key; above 1, the figure is per contended acquisition")
	hold := flag.Duration("hold", time.Millisecond, "how long each contended acquisition holds the key (with -waiters above 1)")
	flag.Parse()
	if *waiters < 1 || *hold < 0 {
		return errors.New("-waiters must be at least 1 and -hold not negative")
	}
	load := workload{n: *n, waiters: *waiters, hold: *hold}
	if *n <= 0 {
		return errors.New("-n must be positive")
	}
	for _, tool := range []string{"valgrind", "callgrind_control", "redis-server"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is needed: %w", tool, err)
		}
	}
	if *annotate != "" {
		if err := os.MkdirAll(*annotate, 0o755); err != nil {
			return err
		}
	}
	unit := "Ir/op"
	if load.waiters > 1 {
		unit = "Ir/acq"
	}
	fmt.Printf("%-10s %12s %14s %12s\n", "library", unit, "window Ir", "idle Ir")
	names := strings.Split(*libs, ",")
	results := make([]result, len(names))
	for i, name := range names {
		r, err := measure(name, load, *annotate)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		results[i] = r
		fmt.Printf("%-10s %12.0f %14d %12d\n", name, r.perOp, r.window, r.idle)
	}
	if *out != "" {
		return os.WriteFile(*out, markdown(names, results, load), 0o644)
	}
	return nil
}

// markdown is the table with the run's date, server version and command.
func markdown(names []string, results []result, load workload) []byte {
	var b strings.Builder
	version, _ := exec.Command("redis-server", "--version").Output()
	if load.waiters > 1 {
		fmt.Fprintf(&b, "# Server instructions per contended acquisition\n\n")
		fmt.Fprintf(&b, "Written by `go run ./cmd/servercost -n %d -waiters %d -hold %s -out FILE` (in bench/) on %s; %s.\n\n",
			load.n, load.waiters, load.hold, time.Now().UTC().Format("2006-01-02"), strings.TrimSpace(string(version)))
		b.WriteString("Instructions redis-server executed (valgrind's callgrind, `Ir`) while " + strconv.Itoa(load.waiters) +
			" goroutines took turns on one key, each holding it for " + load.hold.String() + ", per acquisition: " +
			"releases, grants, registrations and failed attempts included, less the server's idle cost over as long a time.\n\n")
		b.WriteString("| library | instructions per acquisition | × redislock |\n| --- | ---: | ---: |\n")
		writeRows(&b, names, results)
		return []byte(b.String())
	}
	fmt.Fprintf(&b, "# Server instructions per acquire+release\n\n")
	fmt.Fprintf(&b, "Written by `go run ./cmd/servercost -n %d -out SERVERCOST.md` (in bench/) on %s; %s.\n\n",
		load.n, time.Now().UTC().Format("2006-01-02"), strings.TrimSpace(string(version)))
	b.WriteString("Instructions redis-server executed (valgrind's callgrind, `Ir`), per uncontended acquire+release on one key " +
		"from one goroutine, less the server's idle cost over as long a time. Unlike CPU time, the count does not move " +
		"with the machine's load, so small changes to a script show. It counts what runs in the server process: the " +
		"kernel's share of each request (reading and writing the socket) is not in it, and is about the same for every " +
		"library, so CPU-time ratios (RESULTS.md) are smaller than these.\n\n")
	b.WriteString("| library | instructions per acquire+release | × redislock |\n| --- | ---: | ---: |\n")
	writeRows(&b, names, results)
	return []byte(b.String())
}

// writeRows writes one table row per library, with its ratio to redislock
// when redislock was measured.
func writeRows(b *strings.Builder, names []string, results []result) {
	base := -1.0
	for i, name := range names {
		if name == "redislock" {
			base = results[i].perOp
		}
	}
	for i, name := range names {
		ratio := "—"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f×", results[i].perOp/base)
		}
		fmt.Fprintf(b, "| %s | %.0f | %s |\n", name, results[i].perOp, ratio)
	}
}

// workload is what is counted: n uncontended acquire+release pairs from
// one goroutine (waiters 1), or n acquisitions of one key that waiters
// goroutines take turns on, each holding it for hold.
type workload struct {
	n, waiters int
	hold       time.Duration
}

// run makes n acquisitions of key with lib as the workload says.
func (w workload) run(ctx context.Context, lib locks.Lib, key string, n int) error {
	pair := func(hold time.Duration) error {
		le, err := lib.Lock(ctx, key)
		if err != nil {
			return err
		}
		time.Sleep(hold)
		return le.Unlock(ctx)
	}
	if w.waiters == 1 {
		for range n {
			if err := pair(0); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		left     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	left.Store(int64(n))
	for range w.waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := pair(w.hold); err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					left.Store(0)
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// idleWindow is how long the idle cost is sampled (callgrind_control is
// seen at the server's next wake-up, within 100ms: a long window keeps
// that small); settle how long the count goes on after the last pair,
// past the 2s release marker guard leaves.
const (
	idleWindow = 5 * time.Second
	settle     = 3 * time.Second
)

type result struct {
	perOp        float64
	window, idle int64
}

// measure runs one library's idle sample and window on one server under
// callgrind.
func measure(name string, load workload, keep string) (result, error) {
	dir, err := os.MkdirTemp("", "servercost-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(dir)
	if err != nil {
		return result{}, err
	}
	defer srv.kill()
	client := redis.NewClient(&redis.Options{Addr: srv.addr, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	defer client.Close()
	lib, err := locks.New(name, client, locks.Config{TTL: 10 * time.Second, RetryDelay: time.Millisecond})
	if err != nil {
		return result{}, err
	}
	defer func() {
		if err := lib.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "servercost: closing %s: %v\n", name, err)
		}
	}()
	ctx := context.Background()
	// Scripts loaded, connections open (every waiter's, when contended).
	if err := load.run(ctx, lib, "servercost", 50); err != nil {
		return result{}, err
	}
	// The idle cost: the server's cron, measured before the window so that
	// keys the library leaves to expire (guard's release markers) are
	// deleted inside the window and counted.
	time.Sleep(3 * time.Second) // the warm-up's expiring keys are gone
	if err := srv.collect(true); err != nil {
		return result{}, err
	}
	idleStart := time.Now()
	time.Sleep(idleWindow)
	if err := srv.collect(false); err != nil {
		return result{}, err
	}
	idleTook := time.Since(idleStart)
	idleRun, err := srv.dump()
	if err != nil {
		return result{}, err
	}
	if err := srv.collect(true); err != nil { // the dump zeroed the counts
		return result{}, err
	}
	start := time.Now()
	if err := load.run(ctx, lib, "servercost", load.n); err != nil {
		return result{}, err
	}
	// Collect on while the keys the window left to expire do, so that
	// their deletion counts too.
	time.Sleep(settle)
	took := time.Since(start)
	if err := srv.collect(false); err != nil {
		return result{}, err
	}
	window, err := srv.dump()
	if err != nil {
		return result{}, err
	}
	if keep != "" {
		if err := srv.keep(filepath.Join(keep, name)); err != nil {
			return result{}, err
		}
	}
	idle := int64(float64(idleRun) * float64(took) / float64(idleTook))
	return result{perOp: float64(window-idle) / float64(load.n), window: window, idle: idle}, nil
}

// server is one redis-server under callgrind.
type server struct {
	addr, out string
	cmd       *exec.Cmd
	dumps     int
}

func startServer(dir string) (*server, error) {
	port, err := redisproc.FreePort()
	if err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "callgrind.out")
	cmd := exec.Command("valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file="+out,
		"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), out: out, cmd: cmd}
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second) // valgrind starts slowly
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			s.kill()
			return nil, errors.New("redis-server under valgrind did not answer PING within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s, nil
}

func (s *server) control(args ...string) error {
	args = append(args, strconv.Itoa(s.cmd.Process.Pid))
	if out, err := exec.Command("callgrind_control", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control %v: %w: %s", args, err, out)
	}
	return nil
}

func (s *server) collect(on bool) error {
	if on {
		return s.control("-i", "on")
	}
	return s.control("-i", "off")
}

// dump has callgrind write its counts since the last dump, which zeroes
// them, and returns their total.
func (s *server) dump() (int64, error) {
	if err := s.control("-d"); err != nil {
		return 0, err
	}
	s.dumps++
	path := fmt.Sprintf("%s.%d", s.out, s.dumps)
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	// The header's "summary:" may be 0 in a dump; "totals:" at the end
	// is the sum of the costs listed.
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "totals: "); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no totals in %s", path)
}

// keep copies the latest dump to base.callgrind and its inclusive
// annotation to base.txt.
func (s *server) keep(base string) error {
	src := fmt.Sprintf("%s.%d", s.out, s.dumps)
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".callgrind", data, 0o644); err != nil {
		return err
	}
	out, err := exec.Command("callgrind_annotate", "--inclusive=yes", src).Output()
	if err != nil {
		return fmt.Errorf("callgrind_annotate: %w", err)
	}
	return os.WriteFile(base+".txt", out, 0o644)
}

func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
}
