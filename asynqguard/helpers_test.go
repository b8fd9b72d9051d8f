package asynqguard_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// newLocker returns a Locker on its own client of srv, as a separate server
// process would have, closed (before its client) when the test ends.
func newLocker(t *testing.T, srv *redistest.Server, opts ...guard.Option) *guard.Locker {
	t.Helper()
	l, err := guard.New(srv.Client(t), opts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// keyOf is the default key of a task.
func keyOf(typ string, payload []byte) string {
	sum := sha256.Sum256(payload)
	return typ + ":" + hex.EncodeToString(sum[:])
}

// lockKey is the Redis key guard keeps the lock of key under.
func lockKey(key string) string { return "guard:{" + key + "}" }

// testConfig is an asynq.Config for fast tests on one queue, with the
// package's hooks wired in. Retries after real failures come after 100ms
// rather than asynq's 15s or more.
func testConfig(t *testing.T, queue string) asynq.Config {
	return asynq.Config{
		Concurrency:              4,
		Queues:                   map[string]int{queue: 1},
		TaskCheckInterval:        20 * time.Millisecond,
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		ShutdownTimeout:          3 * time.Second,
		HealthCheckInterval:      time.Minute,
		IsFailure:                asynqguard.IsFailure,
		RetryDelayFunc: func(n int, err error, task *asynq.Task) time.Duration {
			if errors.Is(err, asynqguard.ErrBusy) {
				return asynqguard.RetryDelay(n, err, task)
			}
			return 100 * time.Millisecond
		},
		Logger:   testLogger{t},
		LogLevel: asynq.WarnLevel,
	}
}

// taskPrefix starts the type of every test task; the servers' ServeMux
// routes it to the handler under test.
const taskPrefix = "test:"

// startServer starts an asynq server on srv with its own Locker (made with
// lopts), routing every test task through the middleware (made with mopts)
// to h. It is shut down when the test ends, before its Locker is closed.
func startServer(t *testing.T, srv *redistest.Server, cfg asynq.Config, lopts []guard.Option, mopts []asynqguard.Option, h asynq.HandlerFunc) {
	t.Helper()
	startServerWith(t, srv, cfg, lopts, nil, mopts, h)
}

// startServerWith is startServer with outer, when not nil, installed
// around the middleware.
func startServerWith(t *testing.T, srv *redistest.Server, cfg asynq.Config, lopts []guard.Option, outer asynq.MiddlewareFunc,
	mopts []asynqguard.Option, h asynq.HandlerFunc) {
	t.Helper()
	l := newLocker(t, srv, lopts...)
	mux := asynq.NewServeMux()
	if outer != nil {
		mux.Use(outer)
	}
	mux.Use(asynqguard.Middleware(l, mopts...))
	mux.Handle(taskPrefix, h)
	s := asynq.NewServer(asynq.RedisClientOpt{Addr: srv.Addr()}, cfg)
	if err := s.Start(mux); err != nil {
		t.Fatalf("asynq server start: %v", err)
	}
	t.Cleanup(s.Shutdown)
}

// enqueue enqueues a task and returns its id.
func enqueue(t *testing.T, c *asynq.Client, typ string, payload []byte, opts ...asynq.Option) string {
	t.Helper()
	info, err := c.Enqueue(asynq.NewTask(typ, payload, opts...))
	if err != nil {
		t.Fatalf("enqueue %s: %v", typ, err)
	}
	return info.ID
}

// newClient returns an asynq client and inspector on srv, closed when the
// test ends.
func newClient(t *testing.T, srv *redistest.Server) (*asynq.Client, *asynq.Inspector) {
	t.Helper()
	opt := asynq.RedisClientOpt{Addr: srv.Addr()}
	c, in := asynq.NewClient(opt), asynq.NewInspector(opt)
	t.Cleanup(func() {
		_ = c.Close()
		_ = in.Close()
	})
	return c, in
}

// waitFor polls cond every 20ms until it holds, and fails the test with
// what when it does not within d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drained reports whether queue has no task left to process (pending,
// active, scheduled or retry).
func drained(t *testing.T, in *asynq.Inspector, queue string) bool {
	t.Helper()
	qi, err := in.GetQueueInfo(queue)
	if err != nil {
		return false // the queue is created by the first enqueue
	}
	return qi.Pending+qi.Active+qi.Scheduled+qi.Retry+qi.Aggregating == 0
}

// queueInfo returns the queue's statistics.
func queueInfo(t *testing.T, in *asynq.Inspector, queue string) *asynq.QueueInfo {
	t.Helper()
	qi, err := in.GetQueueInfo(queue)
	if err != nil {
		t.Fatalf("queue info %s: %v", queue, err)
	}
	return qi
}

// tracker records handler runs: how many run at once per label and in all.
type tracker struct {
	mu       sync.Mutex
	running  map[string]int // label -> handlers running
	overlaps int            // times a handler started while one with its label ran
	maxKeys  int            // most distinct labels running at once
	runs     map[string]int // task id -> runs
	retried  map[string][]int
}

func newTracker() *tracker {
	return &tracker{running: map[string]int{}, runs: map[string]int{}, retried: map[string][]int{}}
}

// enter records the start of a run of task id under label; call the
// returned function when it ends.
func (tr *tracker) enter(ctx context.Context, label string) func() {
	id, _ := asynq.GetTaskID(ctx)
	n, _ := asynq.GetRetryCount(ctx)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.running[label] > 0 {
		tr.overlaps++
	}
	tr.running[label]++
	tr.maxKeys = max(tr.maxKeys, len(tr.running))
	tr.runs[id]++
	tr.retried[id] = append(tr.retried[id], n)
	return func() {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if tr.running[label]--; tr.running[label] == 0 {
			delete(tr.running, label)
		}
	}
}

func (tr *tracker) totalRuns() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, r := range tr.runs {
		n += r
	}
	return n
}

// busyCounter is an asynq.ErrorHandler that counts busy errors per task id.
type busyCounter struct {
	mu    sync.Mutex
	busy  map[string]int
	other []error
}

func newBusyCounter() *busyCounter { return &busyCounter{busy: map[string]int{}} }

func (b *busyCounter) HandleError(ctx context.Context, _ *asynq.Task, err error) {
	id, _ := asynq.GetTaskID(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	if errors.Is(err, asynqguard.ErrBusy) {
		b.busy[id]++
		return
	}
	b.other = append(b.other, err)
}

func (b *busyCounter) total() (busy int, other []error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.busy {
		busy += n
	}
	return busy, append([]error(nil), b.other...)
}

func (b *busyCounter) of(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.busy[id]
}

// logBuffer is a slog handler's output, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the logged lines that contain every one of subs.
func (b *logBuffer) lines(subs ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for l := range strings.Lines(b.buf.String()) {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newLogger returns a logger that writes text lines at Debug and above to
// a buffer.
func newLogger() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// testLogger sends asynq's log to the test log.
type testLogger struct{ t *testing.T }

func (l testLogger) Debug(args ...any) { l.t.Log(append([]any{"asynq DEBUG:"}, args...)...) }
func (l testLogger) Info(args ...any)  { l.t.Log(append([]any{"asynq INFO:"}, args...)...) }
func (l testLogger) Warn(args ...any)  { l.t.Log(append([]any{"asynq WARN:"}, args...)...) }
func (l testLogger) Error(args ...any) { l.t.Log(append([]any{"asynq ERROR:"}, args...)...) }
func (l testLogger) Fatal(args ...any) { l.t.Error(append([]any{"asynq FATAL:"}, args...)...) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// waits records how long tasks waited in the middleware before their
// handler started: its outer middleware notes when a task enters, the
// handler calls started.
type waits struct {
	mu      sync.Mutex
	longest time.Duration
}

type enteredKey struct{}

func (w *waits) outer(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		return next.ProcessTask(context.WithValue(ctx, enteredKey{}, time.Now()), t)
	})
}

func (w *waits) started(ctx context.Context) {
	at, ok := ctx.Value(enteredKey{}).(time.Time)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.longest = max(w.longest, time.Since(at))
}

func (w *waits) max() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.longest
}
