// Command httpbench measures what httpguard costs an HTTP service, in the
// units its users count: requests per second of a no-op handler, each
// request with a fresh Idempotency-Key, served on loopback four ways in
// one run, in alternating rounds:
//
//   - none: the handler alone;
//   - redislock: a bare bsm/redislock Obtain and Release around it, keyed
//     by the Idempotency-Key (no fingerprint, no stored response);
//   - redislock-await: the same, with Obtain run on a worker goroutine that
//     the handler waits on with the request's context, as a lock that
//     returns when its context ends must (go-redis does not interrupt a
//     read): what that promise costs a bare lock. Its Release, under a
//     context that cannot end, runs on the handler's goroutine;
//   - httpguard: httpguard.Middleware(locker, httpguard.SharedKeys()).
//
// It prints requests/s per round and the ratios of each round, and the
// round trips and server commands per request of each (a go-redis hook
// on each Redis client; INFO commandstats), all from one run:
//
//	go run ./cmd/httpbench
//
// Nothing is pinned and GOMAXPROCS is the machine's: the clients, the
// server and redis-server share the CPUs, as a service on one host does.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/jobguard/jobguard/bench/internal/locks"
	"github.com/jobguard/jobguard/bench/internal/measure"
	"github.com/jobguard/jobguard/bench/internal/redisproc"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/httpguard"
	"github.com/redis/go-redis/v9"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "httpbench:", err)
		os.Exit(1)
	}
}

// variant is one way of serving the handler.
type variant struct {
	name    string
	handler http.Handler
	trips   *measure.Counter // nil: no Redis
}

func run() error {
	duration := flag.Duration("duration", 3*time.Second, "length of one variant's run in a round")
	rounds := flag.Int("rounds", 3, "rounds; each runs every variant once, in a rotated order")
	conc := flag.Int("c", 16, "concurrent clients")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the rounds to this file")
	stats := flag.Bool("commandstats", false, "print each variant's INFO commandstats per request, first round")
	callgrind := flag.Int("callgrind", 0, "instead, count redis-server's instructions per request under callgrind, over this many sequential requests per variant")
	annotate := flag.String("annotate", "", "with -callgrind, write callgrind_annotate's inclusive listing per variant to this directory")
	only := flag.String("only", "", "run only the variants whose name contains this, to profile one alone (a ratio is printed when both its variants ran)")
	flag.Parse()
	if *callgrind > 0 {
		return serverInstructions(*callgrind, *annotate)
	}
	ctx := context.Background()

	srv, err := redisproc.Start(ctx, -1)
	if err != nil {
		return err
	}
	defer srv.Stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	svc, err := newService(srv.Addr(), 2**conc, *conc)
	if err != nil {
		return err
	}
	defer svc.close()
	variants := svc.variants
	if *only != "" {
		variants = slices.DeleteFunc(slices.Clone(variants), func(v variant) bool { return !strings.Contains(v.name, *only) })
		if len(variants) == 0 {
			return fmt.Errorf("-only %q: no variant has it in its name", *only)
		}
	}

	fmt.Printf("GOMAXPROCS %d, %d CPUs, %s, %d clients, %v per variant and round, %d rounds, redis-server %s\n",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version(), *conc, *duration, *rounds, redisproc.Version(ctx, admin))
	for _, v := range variants { // warm up: connections, scripts, the library
		if _, err := load(svc.client, svc.url(v), "warm-"+v.name, *conc, 300*time.Millisecond); err != nil {
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
	rates := make(map[string][]float64)
	type cost struct {
		requests, trips, commands int64
		server, process           time.Duration // CPU: redis-server's; this process's (clients and service)
	}
	costs := make(map[string]*cost)
	for _, v := range variants {
		costs[v.name] = &cost{}
	}
	for r := range *rounds {
		order := slices.Clone(variants)
		for range r % len(order) { // rotate, so no variant always runs first
			order = append(order[1:], order[0])
		}
		for _, v := range order {
			before, err := redisproc.Snapshot(ctx, admin)
			if err != nil {
				return err
			}
			cpu0 := measure.ProcessCPU()
			var trips0 int64
			if v.trips != nil {
				trips0 = v.trips.Read().RoundTrips
			}
			n, err := load(svc.client, svc.url(v), fmt.Sprintf("r%d-%s", r, v.name), *conc, *duration)
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			cpu := measure.ProcessCPU() - cpu0
			after, err := redisproc.Snapshot(ctx, admin)
			if err != nil {
				return err
			}
			c := costs[v.name]
			c.requests += n
			c.commands += commands(after) - commands(before) - 1 // less the INFO that read them
			c.server += time.Duration((after.CPUSeconds - before.CPUSeconds) * float64(time.Second))
			c.process += cpu
			if *stats && r == 0 {
				printStats(v.name, before, after, n)
			}
			if v.trips != nil {
				c.trips += v.trips.Read().RoundTrips - trips0
			}
			rates[v.name] = append(rates[v.name], float64(n)/duration.Seconds())
		}
	}

	fmt.Printf("\n%-16s %s\n", "variant", "requests/s per round")
	for _, v := range variants {
		fmt.Printf("%-16s %s\n", v.name, measure.Join(rates[v.name], "%.0f", "  "))
	}
	ratio := func(a, b string) []float64 {
		out := make([]float64, *rounds)
		for i := range out {
			out[i] = rates[a][i] / rates[b][i]
		}
		return out
	}
	fmt.Printf("\n%-30s %s\n", "ratio", "per round")
	for _, p := range [][2]string{{"httpguard", "redislock"}, {"httpguard", "redislock-await"}, {"redislock-await", "redislock"}, {"httpguard", "none"}, {"redislock", "none"}} {
		if rates[p[0]] != nil && rates[p[1]] != nil {
			fmt.Printf("%-30s %s\n", p[0]+" / "+p[1], measure.Join(ratio(p[0], p[1]), "%.2f", "  "))
		}
	}
	fmt.Printf("\nper request, all rounds:\n%-16s %12s %16s %18s %20s\n", "variant", "round trips", "server commands", "redis-server CPU", "service+client CPU")
	for _, v := range variants {
		c := costs[v.name]
		per := func(d time.Duration) string {
			return fmt.Sprintf("%.1f µs", float64(d.Microseconds())/float64(c.requests))
		}
		fmt.Printf("%-16s %12.2f %16.2f %18s %20s\n", v.name, float64(c.trips)/float64(c.requests), float64(c.commands)/float64(c.requests), per(c.server), per(c.process))
	}
	return nil
}

// service is the variants on one Redis, served over HTTP on
// loopback, and an HTTP client for them.
type service struct {
	variants []variant
	base     string
	client   *http.Client
	closers  []func() error
}

// newService serves the variants on the Redis at addr, with Redis pools
// of poolSize and an HTTP client that keeps conc connections.
func newService(addr string, poolSize, conc int) (*service, error) {
	s := &service{}
	noop := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "ok")
	})
	lockClient := redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize})
	lockTrips := new(measure.Counter)
	lockClient.AddHook(lockTrips)
	awaitClient := redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize})
	awaitTrips := new(measure.Counter)
	awaitClient.AddHook(awaitTrips)
	workers := new(locks.Workers)
	s.closers = append(s.closers, awaitClient.Close, func() error { workers.Stop(); return nil })
	guardClient := redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize})
	guardTrips := new(measure.Counter)
	guardClient.AddHook(guardTrips)
	s.closers = append(s.closers, lockClient.Close, guardClient.Close)
	locker, err := guard.New(guardClient)
	if err != nil {
		s.close()
		return nil, err
	}
	s.closers = append(s.closers, locker.Close)
	s.variants = []variant{
		{"none", noop, nil},
		{"redislock", redislockMiddleware(locks.BareObtain(redislock.New(lockClient), 30*time.Second), noop), lockTrips},
		{"redislock-await", redislockMiddleware(workers.ObtainFunc(redislock.New(awaitClient), 30*time.Second), noop), awaitTrips},
		{"httpguard", httpguard.Middleware(locker, httpguard.SharedKeys())(noop), guardTrips},
	}
	mux := http.NewServeMux()
	for _, v := range s.variants {
		mux.Handle("POST /"+v.name, v.handler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.close()
		return nil, err
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(ln) }()
	s.closers = append(s.closers, server.Close)
	s.base = "http://" + ln.Addr().String() + "/"
	s.client = &http.Client{Transport: &http.Transport{MaxIdleConns: conc, MaxIdleConnsPerHost: conc}}
	return s, nil
}

func (s *service) url(v variant) string { return s.base + v.name }

// close stops the HTTP server and the Locker and closes the clients.
func (s *service) close() {
	for _, c := range slices.Backward(s.closers) {
		_ = c()
	}
}

// redislockMiddleware takes the request's Idempotency-Key with obtain (a
// bare redislock Obtain, or one run by workers so that the request returns
// when its context ends), refusing a busy key with 409, and releases it
// after the handler (under a context that cannot end, so on the handler's
// goroutine either way).
func redislockMiddleware(obtain locks.ObtainFunc, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lock, err := obtain(r.Context(), "idem:"+r.Header.Get("Idempotency-Key"))
		switch {
		case errors.Is(err, redislock.ErrNotObtained):
			http.Error(w, "in flight", http.StatusConflict)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer func() { _ = lock.Release(context.WithoutCancel(r.Context())) }()
		next.ServeHTTP(w, r)
	})
}

// load sends POSTs to url from conc clients for d, each with a fresh
// Idempotency-Key under prefix, and returns how many were answered 201.
func load(client *http.Client, url, prefix string, conc int, d time.Duration) (int64, error) {
	var done atomic.Int64
	var failed atomic.Pointer[error]
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline) && failed.Load() == nil; i++ {
				if err := post(client, url, prefix+"-"+strconv.Itoa(w)+"-"+strconv.Itoa(i)); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return 0, *err
	}
	return done.Load(), nil
}

func post(client *http.Client, url, key string) error {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"sku":"book","qty":1}`))
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("status %d for key %s", resp.StatusCode, key)
	}
	return nil
}

// printStats prints the commands the server ran between before and
// after, per request of n, with their server time.
func printStats(name string, before, after redisproc.Stats, n int64) {
	fmt.Printf("%s: per request\n", name)
	for cmd, a := range after.Commands {
		b := before.Commands[cmd]
		if calls := a.Calls - b.Calls; calls > 0 && cmd != "info" {
			fmt.Printf("  %-12s %6.2f calls %8.2f µs\n", cmd, float64(calls)/float64(n), float64(a.Usec-b.Usec)/float64(n))
		}
	}
}

// commands returns how many commands the server had run (INFO
// commandstats; scripts' own calls are counted there too).
func commands(st redisproc.Stats) int64 {
	var n int64
	for _, cmd := range st.Commands {
		n += cmd.Calls
	}
	return n
}
