package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// flightLog counts how the client sends commands: alone, or in pipelines
// of some size.
type flightLog struct {
	mu        sync.Mutex
	alone     int
	pipelines []int // each pipeline's number of commands
}

func (f *flightLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *flightLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "fcall" {
			f.mu.Lock()
			f.alone++
			f.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (f *flightLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		// A connection's first commands (HELLO, CLIENT SETINFO) go as a
		// pipeline of their own.
		n := 0
		for _, cmd := range cmds {
			if cmd.Name() == "fcall" {
				n++
			}
		}
		if n > 0 {
			f.mu.Lock()
			f.pipelines = append(f.pipelines, n)
			f.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

func (f *flightLog) counts() (alone int, pipelines []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.alone, append([]int(nil), f.pipelines...)
}

// slowStore is a Store whose every round trip takes about 2×latency, so
// that requests sent at once are in flight together; log sees how they go.
func slowStore(t *testing.T, latency time.Duration) (*Store, *redis.Client, *flightLog) {
	t.Helper()
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 4 * maxFlights, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	s := New(c, Options{})
	// The library loaded, a connection open: the requests below are all
	// answered by their first try.
	if _, err := s.Acquire(t.Context(), store.KeysFor("guard:", "warm-up"), store.AcquireArgs{Owner: "W", TTL: time.Minute, Write: true}); err != nil {
		t.Fatal(err)
	}
	log := new(flightLog)
	c.AddHook(log)
	proxy.SetLatency(latency)
	return s, srv.Client(t), log
}

// acquireAll acquires n distinct keys at once, each under ctxOf(i) (called
// on the attempt's goroutine), and returns each attempt's reply and error,
// and how long after acquireAll's start each returned.
func acquireAll(s *Store, n int, ctxOf func(i int) context.Context, keyOf func(i int) string) ([]store.AcquireReply, []error, []time.Duration) {
	replies, errs, took := make([]store.AcquireReply, n), make([]error, n), make([]time.Duration, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i], errs[i] = s.Acquire(ctxOf(i), store.KeysFor("guard:", keyOf(i)), store.AcquireArgs{Owner: "O" + strconv.Itoa(i), TTL: time.Minute, Write: true})
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	return replies, errs, took
}

// Requests that come while maxFlights are in flight go together in the
// next flight, and each gets its own answer.
func TestBatcherSendsWhatWaitsInOneFlight(t *testing.T) {
	s, direct, log := slowStore(t, 40*time.Millisecond)
	const n = maxFlights + 12
	replies, errs, _ := acquireAll(s, n, func(int) context.Context { return t.Context() }, func(i int) string { return fmt.Sprint("k", i) })
	seen := map[int64]bool{}
	for i := range n {
		if errs[i] != nil || !replies[i].Acquired {
			t.Fatalf("acquisition %d: %+v, %v", i, replies[i], errs[i])
		}
		// Its own reply: the token Redis recorded for its own owner.
		k := store.KeysFor("guard:", fmt.Sprint("k", i))
		if got := direct.HGet(t.Context(), k.Lock, "O"+strconv.Itoa(i)+":t").Val(); got != strconv.FormatInt(replies[i].Token, 10) {
			t.Errorf("acquisition %d: reply token %d, Redis recorded %q", i, replies[i].Token, got)
		}
		if seen[replies[i].Token] {
			t.Errorf("token %d twice", replies[i].Token)
		}
		seen[replies[i].Token] = true
	}
	alone, pipelines := log.counts()
	sent, shared := alone, 0
	for _, size := range pipelines {
		sent += size
		if size > 1 {
			shared++
		}
	}
	if sent != n {
		t.Errorf("%d commands sent (%d alone, pipelines %v), want %d: each request once", sent, alone, pipelines, n)
	}
	if shared == 0 || alone > maxFlights+len(pipelines) {
		t.Errorf("%d alone and pipelines %v: the requests past the first %d should have shared flights", alone, pipelines, maxFlights)
	}
	t.Logf("%d requests: %d alone, pipelines %v", n, alone, pipelines)
}

// A request that waits for a flight gives up when its context is done,
// unsent; the flights in the air are not held up by it.
func TestBatcherWaitingRequestGivesUp(t *testing.T) {
	s, direct, _ := slowStore(t, 150*time.Millisecond)
	const n = maxFlights + 1
	ctxOf := func(i int) context.Context {
		if i < maxFlights {
			return t.Context()
		}
		// The last one comes once maxFlights are in the air, and gives up soon.
		time.Sleep(30 * time.Millisecond)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	keyOf := func(i int) string { return fmt.Sprint("g", i) }
	replies, errs, took := acquireAll(s, n, ctxOf, keyOf)
	late := took[maxFlights]
	if err := errs[maxFlights]; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the waiting request: %+v, %v; want the context's deadline", replies[maxFlights], err)
	}
	if late >= 250*time.Millisecond {
		t.Errorf("the waiting request returned after %v: it should give up at its deadline (about 50ms), not wait for a flight (300ms)", late)
	}
	for i := range maxFlights {
		if errs[i] != nil || !replies[i].Acquired {
			t.Errorf("request %d in flight: %+v, %v", i, replies[i], errs[i])
		}
	}
	// It was never sent.
	if n := direct.Exists(t.Context(), store.KeysFor("guard:", keyOf(maxFlights)).Lock).Val(); n != 0 {
		t.Errorf("the request that gave up was sent: its key exists")
	}
}

// A command that fails in a shared flight fails alone.
func TestBatchedCommandFailsAlone(t *testing.T) {
	s, direct, log := slowStore(t, 40*time.Millisecond)
	const n = maxFlights + 3
	wrong := n - 2 // queued, so it travels in a pipeline
	if err := direct.Set(t.Context(), store.KeysFor("guard:", fmt.Sprint("w", wrong)).Lock, "not a lock", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	replies, errs, _ := acquireAll(s, n, func(i int) context.Context {
		if i >= maxFlights {
			time.Sleep(10 * time.Millisecond) // after the first maxFlights
		}
		return t.Context()
	}, func(i int) string { return fmt.Sprint("w", i) })
	for i := range n {
		switch {
		case i == wrong && !errors.Is(errs[i], store.ErrWrongType):
			t.Errorf("the key of another type: %+v, %v; want ErrWrongType", replies[i], errs[i])
		case i != wrong && (errs[i] != nil || !replies[i].Acquired):
			t.Errorf("acquisition %d: %+v, %v", i, replies[i], errs[i])
		}
	}
	if _, pipelines := log.counts(); len(pipelines) == 0 {
		t.Errorf("no pipeline: the queued requests did not share a flight")
	}
}

// A flight's context is its requests' whose deadline comes first.
func TestFlightContextIsTheEarliestDeadline(t *testing.T) {
	base := context.Background()
	soon, cancel1 := context.WithTimeout(base, time.Second)
	defer cancel1()
	later, cancel2 := context.WithTimeout(base, time.Hour)
	defer cancel2()
	for _, tc := range []struct {
		name  string
		batch []context.Context
		want  context.Context
	}{
		{"first earliest", []context.Context{soon, later}, soon},
		{"last earliest", []context.Context{later, later, soon}, soon},
		{"unbounded ones last", []context.Context{base, later, base}, later},
		{"all unbounded", []context.Context{base, base}, base},
	} {
		batch := make([]*queued, len(tc.batch))
		for i, ctx := range tc.batch {
			batch[i] = &queued{ctx: ctx}
		}
		if got := earliest(batch); got != tc.want {
			t.Errorf("%s: got a context with deadline %v", tc.name, fmt.Sprint(got.Deadline()))
		}
	}
}

// A flight ends by the first deadline among its requests: none waits for it
// past its own, as none would alone (with ContextTimeoutEnabled, go-redis
// ends a read at its context's deadline).
func TestFlightEndsByItsEarliestDeadline(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 4 * maxFlights, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	s := New(c, Options{})
	if _, err := s.Acquire(t.Context(), store.KeysFor("guard:", "warm-up"), store.AcquireArgs{Owner: "W", TTL: time.Minute, Write: true}); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(true)
	// maxFlights requests fill the flights; one of them times out at
	// 200ms, the others at 3s. The two queued behind them then share the
	// flight that lands first: the first of the two is to end at 700ms,
	// the second at 3s.
	deadlines := make([]time.Duration, maxFlights+2)
	for i := range maxFlights {
		deadlines[i] = 3 * time.Second
	}
	deadlines[0] = 200 * time.Millisecond
	deadlines[maxFlights], deadlines[maxFlights+1] = 700*time.Millisecond, 3*time.Second
	ctxOf := func(i int) context.Context {
		if i >= maxFlights {
			time.Sleep(50 * time.Millisecond) // the flights are out
		}
		ctx, cancel := context.WithTimeout(t.Context(), deadlines[i])
		t.Cleanup(cancel)
		return ctx
	}
	_, errs, took := acquireAll(s, len(deadlines), ctxOf, func(i int) string { return fmt.Sprint("e", i) })
	for i := range deadlines {
		if errs[i] == nil {
			t.Errorf("request %d answered through a black hole", i)
		}
	}
	if last := took[maxFlights+1]; last > 2*time.Second {
		t.Errorf("the queued request with the later deadline returned after %v, past its flight's first deadline (about 750ms)", last)
	}
	if first := took[maxFlights]; first > 1500*time.Millisecond {
		t.Errorf("the queued request with the earlier deadline returned after %v, past its deadline (about 750ms)", first)
	}
	t.Logf("returned after %v", took)
}
