// Package scenario runs the benchmark's scenarios, each case on a fresh
// redis-server, checking every case for load from outside and running a
// disturbed case again later.
package scenario

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jobguard/jobguard/bench/internal/measure"
	"github.com/jobguard/jobguard/bench/internal/redisproc"
	"github.com/jobguard/jobguard/bench/internal/results"
	"github.com/redis/go-redis/v9"
)

// Runner runs cases. Sizes must be set, and ServerCPU to -1 for servers
// that are not pinned (0 pins them to CPU 0); the rest may stay zero.
type Runner struct {
	Sizes results.Sizes
	// ServerCPU pins each redis-server to this CPU with taskset; -1: not pinned.
	ServerCPU int
	// Deadline: no case starts a re-run after it, so the whole run stays
	// bounded. Zero: no deadline.
	Deadline time.Time
	// Logf reports progress; it may be nil.
	Logf func(format string, args ...any)
	// Only, when set, runs just the cases whose name it matches (a partial
	// run, to look at a few cases while working; not for RESULTS.md).
	Only *regexp.Regexp
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
			if cn != nil {
				_ = cn.Close()
			}
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

// Case is one benchmark case: a scenario for one library with its
// parameters. Each attempt runs it on a fresh redis-server and records the
// attempt in the quality record of its result.
type Case struct {
	Name    string
	body    func(context.Context, *Env) error // stores its result
	quality func() *results.Quality
}

// newCase returns a case whose body's result is stored in *out; q returns
// the quality record inside *out, which every attempt keeps.
func newCase[T any](name string, out *T, q func(*T) *results.Quality, body func(context.Context, *Env) (T, error)) *Case {
	return &Case{
		Name: name,
		body: func(ctx context.Context, env *Env) error {
			res, err := body(ctx, env)
			if err != nil {
				return err
			}
			keep := *q(out)
			*out = res
			*q(out) = keep
			return nil
		},
		quality: func() *results.Quality { return q(out) },
	}
}

// RunAll runs every case once, then runs the disturbed ones again, one
// pass after another, until none is disturbed, Sizes.MaxAttempts are
// spent or the Deadline has passed. A re-run comes a whole pass later than
// the attempt it repeats, so that a burst of outside load has time to pass.
func (r *Runner) RunAll(ctx context.Context, cases []*Case) error {
	if r.Only != nil {
		cases = slices.DeleteFunc(cases, func(c *Case) bool { return !r.Only.MatchString(c.Name) })
	}
	for pass := 1; pass <= r.Sizes.MaxAttempts && len(cases) > 0; pass++ {
		var disturbed []*Case
		for _, c := range cases {
			if pass > 1 && !r.Deadline.IsZero() && time.Now().After(r.Deadline) {
				r.logf("%-34s not re-run: past the time budget", c.Name)
				continue
			}
			if err := r.attempt(ctx, c); err != nil {
				return fmt.Errorf("%s: %w", c.Name, err)
			}
			if c.quality().Disturbed {
				disturbed = append(disturbed, c)
			}
		}
		cases = disturbed
	}
	return nil
}

// attempt runs c once on a fresh server, between two PING floor samples
// and under a Watch, and records the attempt.
func (r *Runner) attempt(ctx context.Context, c *Case) error {
	srv, err := redisproc.Start(ctx, r.ServerCPU)
	if err != nil {
		return err
	}
	env := &Env{srv: srv, poolSize: r.Sizes.PoolSize, admin: redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1})}
	defer env.close()
	var a results.Attempt
	if a.FloorBeforeUs, err = floor(ctx, env.admin, r.Sizes.FloorPings); err != nil {
		return err
	}
	start := time.Now()
	w := measure.StartWatch(srv.Pid())
	err = c.body(ctx, env)
	a.Noise = w.Stop()
	a.Seconds = time.Since(start).Seconds()
	if err != nil {
		return err
	}
	if a.FloorAfterUs, err = floor(ctx, env.admin, r.Sizes.FloorPings); err != nil {
		return err
	}
	a.Reasons = judge(a, r.Sizes)
	q := c.quality()
	q.Attempts = append(q.Attempts, a)
	q.Disturbed = len(a.Reasons) > 0
	if q.Disturbed {
		r.logf("%-34s disturbed (attempt %d): %s", c.Name, len(q.Attempts), strings.Join(a.Reasons, "; "))
	} else {
		r.logf("%-34s done in %.1fs", c.Name, a.Seconds)
	}
	return nil
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
