// Package scenario runs the benchmark's scenarios, each case on a fresh
// redis-server, checking every case for load from outside and running a
// disturbed case again.
package scenario

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jobguard/jobguard/bench/internal/measure"
	"github.com/jobguard/jobguard/bench/internal/redisproc"
	"github.com/jobguard/jobguard/bench/internal/results"
	"github.com/redis/go-redis/v9"
)

// Runner runs cases. The zero value is not usable; set every field.
type Runner struct {
	Sizes results.Sizes
	// ServerCPU pins each redis-server to this CPU with taskset; -1: not pinned.
	ServerCPU int
	// Deadline: no case starts a re-run after it, so the whole run stays
	// bounded. Zero: no deadline.
	Deadline time.Time
	// Logf reports progress; it may be nil.
	Logf func(format string, args ...any)
}

func (r *Runner) logf(format string, args ...any) {
	if r.Logf != nil {
		r.Logf(format, args...)
	}
}

// Env is one attempt of a case: its redis-server and the clients on it,
// all closed when the attempt ends.
type Env struct {
	srv      *redisproc.Server
	poolSize int
	admin    *redis.Client // INFO and floor PINGs; never given to a library
	clients  []*redis.Client
}

// Client returns a new client on the case's server with a command counter.
func (e *Env) Client() (*redis.Client, *measure.Counter) {
	c := redis.NewClient(&redis.Options{Addr: e.srv.Addr(), PoolSize: e.poolSize})
	counter := &measure.Counter{}
	c.AddHook(counter)
	e.clients = append(e.clients, c)
	return c, counter
}

// warmPool opens n connections of c's pool at once and returns them to it
// idle, so that n goroutines find a connection without dialing.
func warmPool(ctx context.Context, c *redis.Client, n int) error {
	conns := make([]*redis.Conn, n)
	defer func() {
		for _, cn := range conns {
			_ = cn.Close()
		}
	}()
	for i := range conns {
		conns[i] = c.Conn()
		if err := conns[i].Ping(ctx).Err(); err != nil {
			return err
		}
	}
	return nil
}

// Stats reads the server's CPU time and commandstats.
func (e *Env) Stats(ctx context.Context) (redisproc.Stats, error) {
	return redisproc.Snapshot(ctx, e.admin)
}

func (e *Env) close() {
	for _, c := range e.clients {
		_ = c.Close()
	}
	_ = e.admin.Close()
	e.srv.Stop()
}

// adminCommands are the harness's own commands, left out of every count.
var adminCommands = []string{"info", "ping", "config|resetstat", "client|setinfo", "hello"}

// run runs body as one case called name, on a fresh server each attempt,
// until an attempt is undisturbed, Sizes.MaxAttempts are spent or the
// Deadline has passed. It returns the last attempt's result.
func run[T any](ctx context.Context, r *Runner, name string, body func(context.Context, *Env) (T, error)) (T, results.Quality, error) {
	var (
		res T
		q   results.Quality
	)
	for n := 1; ; n++ {
		var a results.Attempt
		var err error
		res, a, err = attempt(ctx, r, body)
		if err != nil {
			return res, q, fmt.Errorf("%s: %w", name, err)
		}
		q.Attempts = append(q.Attempts, a)
		q.Disturbed = len(a.Reasons) > 0
		if !q.Disturbed {
			r.logf("%-34s done in %.1fs", name, a.Seconds)
			return res, q, nil
		}
		r.logf("%-34s disturbed (attempt %d): %v", name, n, a.Reasons)
		if n >= r.Sizes.MaxAttempts || (!r.Deadline.IsZero() && time.Now().After(r.Deadline)) {
			return res, q, nil
		}
	}
}

func attempt[T any](ctx context.Context, r *Runner, body func(context.Context, *Env) (T, error)) (T, results.Attempt, error) {
	var (
		res T
		a   results.Attempt
	)
	srv, err := redisproc.Start(ctx, r.ServerCPU)
	if err != nil {
		return res, a, err
	}
	env := &Env{srv: srv, poolSize: r.Sizes.PoolSize, admin: redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1})}
	defer env.close()
	if a.FloorBeforeUs, err = floor(ctx, env.admin, r.Sizes.FloorPings); err != nil {
		return res, a, err
	}
	start := time.Now()
	w := measure.StartWatch(srv.Pid())
	res, err = body(ctx, env)
	a.Noise = w.Stop()
	a.Seconds = time.Since(start).Seconds()
	if err != nil {
		return res, a, err
	}
	if a.FloorAfterUs, err = floor(ctx, env.admin, r.Sizes.FloorPings); err != nil {
		return res, a, err
	}
	a.Reasons = judge(a, r.Sizes)
	return res, a, nil
}

// floor returns the p50 of n sequential PINGs on c, in microseconds.
func floor(ctx context.Context, c *redis.Client, n int) (float64, error) {
	rtts := make([]time.Duration, n)
	for i := range rtts {
		start := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			return 0, fmt.Errorf("floor PING: %w", err)
		}
		rtts[i] = time.Since(start)
	}
	return measure.Summarize(rtts).P50us, nil
}

// judge returns why an attempt counts as disturbed, if it does: the PING
// floor moved by more than FloorDriftLimit times between before and after,
// or other processes (or the hypervisor) took more than OthersCoresLimit
// cores while it ran.
func judge(a results.Attempt, s results.Sizes) []string {
	var why []string
	lo, hi := math.Min(a.FloorBeforeUs, a.FloorAfterUs), math.Max(a.FloorBeforeUs, a.FloorAfterUs)
	if lo > 0 && hi/lo > s.FloorDriftLimit {
		why = append(why, fmt.Sprintf("PING floor %.1fµs before, %.1fµs after", a.FloorBeforeUs, a.FloorAfterUs))
	}
	if a.OthersCores > s.OthersCoresLimit {
		why = append(why, fmt.Sprintf("other processes used %.2f cores", a.OthersCores))
	}
	if a.StealCores > s.OthersCoresLimit {
		why = append(why, fmt.Sprintf("steal %.2f cores", a.StealCores))
	}
	return why
}
