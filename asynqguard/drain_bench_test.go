package asynqguard_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The drain benchmark's size: tasks per drain and alternating rounds.
var (
	drainTasks    = flag.Int("drain.tasks", 2000, "BenchmarkLimitDrain: tasks per drain")
	drainRounds   = flag.Int("drain.rounds", 3, "BenchmarkLimitDrain: alternating rounds of every variant")
	drainCommands = flag.Bool("drain.commands", false, "BenchmarkLimitDrain: log the Redis commands per task of each drain")
	drainWorkers  = flag.Int("drain.workers", 8, "BenchmarkLimitDrain: Concurrency of the servers that run Limit(2) with more workers than permits")
	drainOnly     = flag.String("drain.only", "", "BenchmarkLimitDrain: run only the variants whose name contains this")
)

// drainTimeout bounds one drain; a drain that takes longer fails the
// benchmark rather than hang it.
const drainTimeout = 3 * time.Minute

// drainVariant is one way of draining a queue of no-op tasks on one asynq
// server.
type drainVariant struct {
	name        string
	concurrency int
	mw          []asynqguard.Option // nil: no middleware, plain asynq
	// floor: instead of asynqguard, a bare lock of two round trips around
	// each task, on a key of the task's own (SET NX PX, then a script that
	// deletes the key if it still holds the task's token, as
	// bsm/redislock does): what any lock or semaphore in Redis costs a
	// task at the least, since it takes a round trip to take it and one to
	// give it back.
	floor bool
}

// BenchmarkLimitDrain drains the same number of no-op tasks through one
// asynq server, in alternating rounds within one run: plain asynq with
// Concurrency 2 (the anchor), and Limit(2) with the middleware's defaults
// on a server with 8 workers (-drain.workers), as a fleet member with more
// workers than permits runs it; beside them Limit(2) on 2 workers (never busy on one
// server: the middleware's own cost) and Limit(2) with WaitFor(0), the
// behaviour before the default wait (every busy task through asynq's
// retry set), and a bare lock of two round trips per task on 2 workers
// (setnx_c2, see drainVariant). The servers use asynq's defaults but for
// the queue, with IsFailure and RetryDelay wired in as the docs say. It reports each
// variant's median tasks/s, its ratio to the anchor's median, and the
// median Redis CPU and CPU of this process per task:
//
//	go test -run '^$' -bench LimitDrain -benchtime 1x ./asynqguard/ -drain.tasks 20000
func BenchmarkLimitDrain(b *testing.B) {
	const pattern = "drain"
	variants := []drainVariant{
		{name: "asynq_c2", concurrency: 2},
		{name: fmt.Sprintf("limit2_c%d", *drainWorkers), concurrency: *drainWorkers, mw: []asynqguard.Option{asynqguard.Limit(2), asynqguard.Pattern(pattern)}},
		{name: "limit2_c2", concurrency: 2, mw: []asynqguard.Option{asynqguard.Limit(2), asynqguard.Pattern(pattern)}},
		{name: "setnx_c2", concurrency: 2, floor: true},
		{name: fmt.Sprintf("limit2_c%d_nowait", *drainWorkers), concurrency: *drainWorkers, mw: []asynqguard.Option{asynqguard.Limit(2), asynqguard.Pattern(pattern), asynqguard.WaitFor(0)}},
	}
	if *drainOnly != "" {
		variants = slices.DeleteFunc(variants, func(v drainVariant) bool { return !strings.Contains(v.name, *drainOnly) })
	}
	srv := redistest.Start(b)
	c := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	b.Cleanup(func() { _ = c.Close() })
	results := make([][]drainResult, len(variants))
	for range b.N {
		for round := range *drainRounds {
			for j := range variants {
				i := (j + round) % len(variants) // each round starts with another variant
				v := variants[i]
				r := drain(b, srv, c, fmt.Sprintf("%s-%d-%s", pattern, round, v.name), pattern, v)
				b.Logf("round %d %-17s %6d tasks in %7.3fs: %6.0f tasks/s; per task %4.1f commands, %5.1f µs Redis CPU, %5.1f µs client CPU; peak %d running",
					round, v.name, *drainTasks, r.took.Seconds(), r.rate, r.commands, r.serverCPU, r.clientCPU, r.peak)
				if v.mw != nil && r.peak > 2 {
					b.Errorf("%s: %d tasks ran at once under Limit(2)", v.name, r.peak)
				}
				results[i] = append(results[i], r)
			}
		}
	}
	anchor := 0.0
	for i, v := range variants {
		if v.mw == nil && !v.floor {
			anchor = medianOf(results[i], func(r drainResult) float64 { return r.rate })
		}
	}
	for i, v := range variants {
		rate := medianOf(results[i], func(r drainResult) float64 { return r.rate })
		server := medianOf(results[i], func(r drainResult) float64 { return r.serverCPU })
		client := medianOf(results[i], func(r drainResult) float64 { return r.clientCPU })
		b.ReportMetric(rate, v.name+"_tasks/s")
		if anchor > 0 && (v.mw != nil || v.floor) {
			b.ReportMetric(rate/anchor, v.name+"_x")
		}
		ratio := "no anchor in this run"
		if anchor > 0 {
			ratio = fmt.Sprintf("%.3fx the anchor", rate/anchor)
		}
		b.Logf("%-17s median %6.0f tasks/s, %s; per task %5.1f µs Redis CPU, %5.1f µs client CPU",
			v.name, rate, ratio, server, client)
	}
}

// releaseScript deletes KEYS[1] if it holds ARGV[1], as bsm/redislock's
// release does.
var releaseScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// setnxLock runs next under a bare lock on a key of the task's own: SET
// NX PX with a token, and the token's release (see drainVariant.floor).
func setnxLock(client *redis.Client, next asynq.Handler) asynq.Handler {
	var tokens atomic.Int64
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		key, token := "drain-floor:"+id, strconv.FormatInt(tokens.Add(1), 10)
		ok, err := client.SetNX(ctx, key, token, 30*time.Second).Result()
		switch {
		case err != nil:
			return err
		case !ok:
			return fmt.Errorf("drain floor: %s busy", key)
		}
		defer releaseScript.Run(context.WithoutCancel(ctx), client, []string{key}, token)
		return next.ProcessTask(ctx, t)
	})
}

// drainResult is what one drain measured: tasks per second from the
// server's start to the end of the last handler, and per task the commands
// Redis ran and the CPU time Redis and this process used (in µs), and the
// most handlers that ran at once.
type drainResult struct {
	took                           time.Duration
	rate                           float64
	commands, serverCPU, clientCPU float64
	peak                           int
}

// drain enqueues *drainTasks no-op tasks on queue, starts one server of
// variant v, and measures it until every task has run.
func drain(b *testing.B, srv *redistest.Server, c *asynq.Client, queue, pattern string, v drainVariant) drainResult {
	b.Helper()
	n := *drainTasks
	for i := range n {
		if _, err := c.Enqueue(asynq.NewTask(pattern, fmt.Appendf(nil, "%d", i)), asynq.Queue(queue)); err != nil {
			b.Fatalf("enqueue: %v", err)
		}
	}
	var (
		ran       atomic.Int64
		mu        sync.Mutex
		now, peak int
		done      = make(chan struct{})
	)
	h := asynq.Handler(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		mu.Lock()
		now++
		peak = max(peak, now)
		mu.Unlock()
		mu.Lock()
		now--
		mu.Unlock()
		if ran.Add(1) == int64(n) {
			close(done)
		}
		return nil
	}))
	if v.mw != nil {
		l, err := guard.New(srv.Client(b))
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		h = asynqguard.Middleware(l, v.mw...)(h)
	}
	if v.floor {
		h = setnxLock(srv.Client(b), h)
	}
	mux := asynq.NewServeMux()
	mux.Handle(pattern, h)
	s := asynq.NewServer(asynq.RedisClientOpt{Addr: srv.Addr()}, asynq.Config{
		Concurrency:    v.concurrency,
		Queues:         map[string]int{queue: 1},
		IsFailure:      asynqguard.IsFailure,
		RetryDelayFunc: asynqguard.RetryDelay,
		Logger:         quietLogger{},
		LogLevel:       asynq.ErrorLevel,
	})
	admin := srv.Client(b)
	cmds0, server0, client0 := commandStats(b, admin), serverCPU(b, admin), processCPU(b)
	start := time.Now()
	if err := s.Start(mux); err != nil {
		b.Fatalf("asynq server start: %v", err)
	}
	defer s.Shutdown()
	select {
	case <-done:
	case <-time.After(drainTimeout):
		b.Fatalf("%s: %d of %d tasks ran within %v", v.name, ran.Load(), n, drainTimeout)
	}
	took := time.Since(start)
	cmds, server, client := commandStats(b, admin), serverCPU(b, admin)-server0, processCPU(b)-client0
	total := 0
	var lines []string
	for name, calls := range cmds {
		if d := calls - cmds0[name]; d > 0 {
			total += d
			lines = append(lines, fmt.Sprintf("%s %.2f", name, float64(d)/float64(n)))
		}
	}
	if *drainCommands {
		slices.Sort(lines)
		b.Logf("%s: commands per task: %s", v.name, strings.Join(lines, ", "))
	}
	mu.Lock()
	defer mu.Unlock()
	perTask := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	return drainResult{
		took: took, rate: float64(n) / took.Seconds(), peak: peak,
		commands: float64(total) / float64(n), serverCPU: perTask(server), clientCPU: perTask(client),
	}
}

func medianOf(rs []drainResult, f func(drainResult) float64) float64 {
	var xs []float64
	for _, r := range rs {
		xs = append(xs, f(r))
	}
	return median(xs)
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// quietLogger discards asynq's log.
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}

// commandStats returns the calls of each command Redis has run
// (INFO commandstats).
func commandStats(b *testing.B, c *redis.Client) map[string]int {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatalf("INFO commandstats: %v", err)
	}
	stats := map[string]int{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.Atoi(calls)
		stats[name] = n
	}
	return stats
}

// serverCPU returns the CPU time Redis has used (INFO cpu, user + sys).
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatalf("INFO cpu: %v", err)
	}
	var total float64
	for line := range strings.Lines(info) {
		for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
				x, _ := strconv.ParseFloat(v, 64)
				total += x
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}

// processCPU returns the CPU time this process has used (user + sys).
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
