// Command asynqbench measures what asynqguard costs an asynq worker, in the
// units its users count: tasks per second of a no-op handler, each task
// with a payload of its own, drained from one queue by one asynq server
// in several ways in one run, in alternating rounds:
//
//   - asynq: the handler alone;
//   - redislock: a bare bsm/redislock Obtain and Release around it, keyed
//     as asynqguard keys a task by default (its type and a hash of its
//     payload), a busy key failing the task so that asynq retries it;
//   - redislock-await: the same, with Obtain run on a worker goroutine
//     that the task waits on with its context, as a lock that returns when
//     its context ends must: what that promise costs a bare lock. Its
//     Release, under a context that cannot end, runs on the task's
//     goroutine;
//   - asynqguard: asynqguard.Middleware(locker) with its defaults;
//   - asynqguard-nocancel: the same under task contexts that cannot end.
//
// It prints tasks/s per round and each round's ratios, and per task the
// commands Redis ran (INFO commandstats, asynq's own included) and the CPU
// that redis-server and this process used:
//
//	go run ./cmd/asynqbench
//
// Nothing is pinned and GOMAXPROCS is the machine's: the workers and
// redis-server share the CPUs, as a worker on one host does. The tasks are
// enqueued before a drain's clock starts.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/bench/internal/locks"
	"github.com/jobguard/jobguard/bench/internal/measure"
	"github.com/jobguard/jobguard/bench/internal/redisproc"
	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "asynqbench:", err)
		os.Exit(1)
	}
}

// variant is one way of running the handler.
type variant struct {
	name string
	wrap func(asynq.Handler) asynq.Handler // nil: the handler alone
}

// taskType is the type of every task; each payload differs, so each task
// has a key of its own.
const taskType = "bench:noop"

// drainTimeout bounds one drain: a drain that takes longer fails the run
// rather than hang it.
const drainTimeout = 3 * time.Minute

func run() error {
	tasks := flag.Int("tasks", 5000, "tasks per drain")
	rounds := flag.Int("rounds", 3, "rounds; each drains with every variant once, in a rotated order")
	conc := flag.Int("c", 16, "the asynq server's Concurrency")
	commands := flag.Bool("commands", false, "print the commands per task of each variant's first drain")
	only := flag.String("only", "", "drain only the variants whose name contains this (a ratio is printed when both its variants ran)")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the rounds to this file")
	flag.Parse()
	ctx := context.Background()

	srv, err := redisproc.Start(ctx, -1)
	if err != nil {
		return err
	}
	defer srv.Stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	lockClient := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer lockClient.Close()
	l, err := guard.New(lockClient)
	if err != nil {
		return err
	}
	defer l.Close()
	rl := redislock.New(lockClient)
	workers := new(locks.Workers)
	defer workers.Stop()
	variants := []variant{
		{name: "asynq"},
		{name: "redislock", wrap: func(next asynq.Handler) asynq.Handler {
			return redislockMiddleware(locks.BareObtain(rl, 30*time.Second), next)
		}},
		{name: "redislock-await", wrap: func(next asynq.Handler) asynq.Handler {
			return redislockMiddleware(workers.ObtainFunc(rl, 30*time.Second), next)
		}},
		{name: "asynqguard", wrap: asynqguard.Middleware(l)},
		// What the promise to return the moment a task's context ends
		// costs: under a context that cannot end, guard sends each request
		// on the task's own goroutine instead of handing it to another.
		{name: "asynqguard-nocancel", wrap: func(next asynq.Handler) asynq.Handler {
			inner := asynqguard.Middleware(l)(next)
			return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
				return inner.ProcessTask(context.WithoutCancel(ctx), t)
			})
		}},
	}
	variants = slices.DeleteFunc(variants, func(v variant) bool { return !strings.Contains(v.name, *only) })
	enqueue := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer enqueue.Close()

	fmt.Printf("GOMAXPROCS %d, %d CPUs, %s, Concurrency %d, %d tasks per drain, %d rounds, redis-server %s\n",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version(), *conc, *tasks, *rounds, redisproc.Version(ctx, admin))
	for _, v := range variants { // warm up: connections, scripts, the library
		if _, err := drain(ctx, srv.Addr(), admin, enqueue, v, "warm-"+v.name, 200, *conc); err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	results := make(map[string][]result)
	for r := range *rounds {
		order := slices.Clone(variants)
		for range r % len(order) { // rotate, so no variant always drains first
			order = append(order[1:], order[0])
		}
		for _, v := range order {
			res, err := drain(ctx, srv.Addr(), admin, enqueue, v, fmt.Sprintf("r%d-%s", r, v.name), *tasks, *conc)
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			results[v.name] = append(results[v.name], res)
			if *commands && r == 0 {
				fmt.Printf("%s, commands per task: %s\n", v.name, res.perCommand)
			}
		}
	}

	fmt.Printf("\n%-19s %s\n", "variant", "tasks/s per round")
	for _, v := range variants {
		fmt.Printf("%-19s %s\n", v.name, join(results[v.name], "%.0f", func(r result) float64 { return r.rate }))
	}
	ratio := func(a, b string) []float64 {
		out := make([]float64, *rounds)
		for i := range out {
			out[i] = results[a][i].rate / results[b][i].rate
		}
		return out
	}
	fmt.Printf("\n%-33s %s\n", "ratio", "per round")
	for _, p := range [][2]string{{"asynqguard", "redislock"}, {"asynqguard-nocancel", "redislock"}, {"asynqguard", "redislock-await"}, {"redislock-await", "redislock"}, {"asynqguard", "asynq"}, {"redislock", "asynq"}} {
		if results[p[0]] != nil && results[p[1]] != nil {
			fmt.Printf("%-33s %s\n", p[0]+" / "+p[1], measure.Join(ratio(p[0], p[1]), "%.2f", ", "))
		}
	}
	fmt.Printf("\nper task, median round:\n%-19s %16s %18s %15s\n", "variant", "server commands", "redis-server CPU", "worker CPU")
	for _, v := range variants {
		rs := results[v.name]
		med := func(f func(result) float64) float64 {
			xs := make([]float64, len(rs))
			for i, r := range rs {
				xs[i] = f(r)
			}
			slices.Sort(xs)
			return xs[len(xs)/2]
		}
		fmt.Printf("%-19s %16.1f %15.1f µs %12.1f µs\n", v.name,
			med(func(r result) float64 { return r.commands }),
			med(func(r result) float64 { return r.serverCPU }),
			med(func(r result) float64 { return r.workerCPU }))
	}
	return nil
}

// result is one drain: tasks per second from the server's start to the
// last handler's return, and per task the commands Redis ran and the CPU
// (µs) redis-server and this process used.
type result struct {
	rate                           float64
	commands, serverCPU, workerCPU float64
	perCommand                     string // each command's calls per task, by name
}

// drain enqueues n no-op tasks on a queue of their own, starts an asynq
// server with Concurrency conc running variant v, and measures it until
// every task has run once.
func drain(ctx context.Context, addr string, admin *redis.Client, enqueue *asynq.Client, v variant, queue string, n, conc int) (result, error) {
	for i := range n {
		payload := fmt.Appendf(nil, "%s-%d", queue, i)
		if _, err := enqueue.EnqueueContext(ctx, asynq.NewTask(taskType, payload), asynq.Queue(queue)); err != nil {
			return result{}, fmt.Errorf("enqueue: %w", err)
		}
	}
	var ran atomic.Int64
	done := make(chan struct{})
	var h asynq.Handler = asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if ran.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})
	if v.wrap != nil {
		h = v.wrap(h)
	}
	mux := asynq.NewServeMux()
	mux.Handle(taskType, h)
	s := asynq.NewServer(asynq.RedisClientOpt{Addr: addr}, asynq.Config{
		Concurrency:    conc,
		Queues:         map[string]int{queue: 1},
		IsFailure:      asynqguard.IsFailure,
		RetryDelayFunc: asynqguard.RetryDelay,
		Logger:         quietLogger{},
		LogLevel:       asynq.ErrorLevel,
	})
	before, err := redisproc.Snapshot(ctx, admin)
	if err != nil {
		return result{}, err
	}
	cpu0 := measure.ProcessCPU()
	start := time.Now()
	if err := s.Start(mux); err != nil {
		return result{}, fmt.Errorf("asynq server: %w", err)
	}
	select {
	case <-done:
	case <-time.After(drainTimeout):
		s.Shutdown()
		return result{}, fmt.Errorf("%d of %d tasks ran within %v", ran.Load(), n, drainTimeout)
	}
	took := time.Since(start)
	cpu := measure.ProcessCPU() - cpu0
	after, err := redisproc.Snapshot(ctx, admin)
	if err != nil {
		return result{}, err
	}
	s.Shutdown()
	per := func(x float64) float64 { return x / float64(n) }
	d := after.Sub(before, "info")
	var each []string
	for name, c := range d.Commands {
		each = append(each, fmt.Sprintf("%s %.2f", name, per(float64(c.Calls))))
	}
	slices.Sort(each)
	return result{
		perCommand: strings.Join(each, ", "),
		rate:       float64(n) / took.Seconds(),
		commands:   per(float64(d.Calls())),
		serverCPU:  per((after.CPUSeconds - before.CPUSeconds) * 1e6),
		workerCPU:  per(float64(cpu.Microseconds())),
	}, nil
}

// redislockMiddleware runs next holding a redislock lock on the task's
// key (asynqguard's default key: its type and a hash of its payload),
// taken once with obtain (a bare Obtain, or one run by workers so that the
// task returns when its context ends); a busy key fails the task, which
// asynq then retries. The release runs under a context that cannot end,
// so on the task's goroutine either way.
func redislockMiddleware(obtain locks.ObtainFunc, next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		sum := sha256.Sum256(t.Payload())
		lock, err := obtain(ctx, t.Type()+":"+hex.EncodeToString(sum[:]))
		if err != nil {
			return err
		}
		defer func() { _ = lock.Release(context.WithoutCancel(ctx)) }()
		return next.ProcessTask(ctx, t)
	})
}

func join(rs []result, format string, f func(result) float64) string {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return measure.Join(xs, format, ", ")
}

// quietLogger discards asynq's log.
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}
