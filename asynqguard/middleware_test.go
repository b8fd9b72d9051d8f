package asynqguard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/guard/observe"
	"github.com/jobguard/jobguard/internal/redistest"
)

// These tests call the middleware's handler directly, on a real Redis, as
// asynq's processor would (without asynq's context values).

// counting returns a handler that counts its runs and returns err.
func counting(runs *atomic.Int64, err error) asynq.HandlerFunc {
	return func(context.Context, *asynq.Task) error {
		runs.Add(1)
		return err
	}
}

// hold acquires key with another Locker on srv until the test ends or the
// returned function is called.
func hold(t *testing.T, srv *redistest.Server, key string) (release func()) {
	t.Helper()
	le, err := newLocker(t, srv).Acquire(t.Context(), key)
	if err != nil {
		t.Fatalf("hold %q: %v", key, err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = le.Release(context.Background()) }) }
	t.Cleanup(release)
	return release
}

func TestBusyPolicies(t *testing.T) {
	srv := redistest.Start(t)
	task := asynq.NewTask("email:welcome", []byte(`{"user":42}`))
	hold(t, srv, keyOf(task.Type(), task.Payload()))
	l := newLocker(t, srv)

	tests := []struct {
		name    string
		opts    []asynqguard.Option
		wantNil bool
		also    error // the error also matches this
		logged  string
	}{
		{name: "default retries", logged: "key busy; retry later"},
		{name: "Retry", opts: []asynqguard.Option{asynqguard.Skip(), asynqguard.Retry()}, logged: "key busy; retry later"},
		{name: "Skip", opts: []asynqguard.Option{asynqguard.Skip()}, wantNil: true, logged: "skipped duplicate: key busy"},
		{name: "Revoke", opts: []asynqguard.Option{asynqguard.Revoke()}, also: asynq.RevokeTask, logged: "revoked duplicate"},
		{name: "Archive", opts: []asynqguard.Option{asynqguard.Archive()}, also: asynq.SkipRetry, logged: "archived duplicate"},
		{name: "WaitFor then retry", opts: []asynqguard.Option{asynqguard.WaitFor(150 * time.Millisecond)}, logged: "key busy; retry later"},
		{name: "WaitFor then skip", opts: []asynqguard.Option{asynqguard.WaitFor(150 * time.Millisecond), asynqguard.Skip()}, wantNil: true, logged: "skipped duplicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, buf := newLogger()
			var runs atomic.Int64
			h := asynqguard.Middleware(l, append(tt.opts, asynqguard.Logger(log))...)(counting(&runs, nil))
			start := time.Now()
			err := h.ProcessTask(t.Context(), task)
			took := time.Since(start)
			if runs.Load() != 0 {
				t.Fatalf("handler ran on a busy key")
			}
			switch {
			case tt.wantNil:
				if err != nil {
					t.Errorf("err = %v, want nil", err)
				}
			case !errors.Is(err, asynqguard.ErrBusy) || !errors.Is(err, guard.ErrNotAcquired):
				t.Errorf("err = %v, want ErrBusy and guard.ErrNotAcquired", err)
			case asynqguard.IsFailure(err):
				t.Errorf("IsFailure(%v) = true, want false", err)
			case tt.also != nil && !errors.Is(err, tt.also):
				t.Errorf("err = %v, want it to match %v", err, tt.also)
			case tt.also == nil && (errors.Is(err, asynq.SkipRetry) || errors.Is(err, asynq.RevokeTask)):
				t.Errorf("err = %v matches SkipRetry or RevokeTask", err)
			}
			if strings.HasPrefix(tt.name, "WaitFor") && took < 150*time.Millisecond {
				t.Errorf("gave up after %v, want >= 150ms", took)
			}
			if lines := buf.lines("level=INFO", tt.logged, "task_type=email:welcome"); len(lines) != 1 {
				t.Errorf("want one Info line %q, got:\n%s", tt.logged, buf)
			}
		})
	}
}

// TestWaitForRuns: a task waiting with WaitFor runs once the holder
// releases the key.
func TestWaitForRuns(t *testing.T) {
	srv := redistest.Start(t)
	task := asynq.NewTask("report", []byte("daily"))
	release := hold(t, srv, keyOf(task.Type(), task.Payload()))
	time.AfterFunc(100*time.Millisecond, release)
	var runs atomic.Int64
	h := asynqguard.Middleware(newLocker(t, srv), asynqguard.WaitFor(5*time.Second))(counting(&runs, nil))
	if err := h.ProcessTask(t.Context(), task); err != nil || runs.Load() != 1 {
		t.Errorf("err = %v, runs = %d; want nil, 1", err, runs.Load())
	}
}

// TestErrorsPassThrough: the handler's errors, SkipRetry and RevokeTask
// among them, come back unchanged.
func TestErrorsPassThrough(t *testing.T) {
	srv := redistest.Start(t)
	mw := asynqguard.Middleware(newLocker(t, srv))
	for _, want := range []error{
		fmt.Errorf("bad payload: %w", asynq.SkipRetry),
		asynq.RevokeTask,
		errors.New("smtp: 421 try again later"),
	} {
		var runs atomic.Int64
		got := mw(counting(&runs, want)).ProcessTask(t.Context(), asynq.NewTask("t", []byte(want.Error())))
		if got != want || runs.Load() != 1 {
			t.Errorf("got %v after %d runs, want %v unchanged after 1", got, runs.Load(), want)
		}
		if !asynqguard.IsFailure(got) {
			t.Errorf("IsFailure(%v) = false", got)
		}
	}
}

func TestKeys(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	byOrder := asynqguard.KeyFunc(func(_ context.Context, t *asynq.Task) (string, error) {
		order, _, ok := strings.Cut(string(t.Payload()), "/")
		if !ok {
			return "", errors.New("no order id")
		}
		return "order:" + order, nil
	})
	tests := []struct {
		name    string
		opts    []asynqguard.Option
		task    *asynq.Task
		wantKey string // the key the handler's context holds
		wantErr []error
	}{
		{name: "default", task: asynq.NewTask("email:welcome", []byte("42")), wantKey: keyOf("email:welcome", []byte("42"))},
		{name: "default, type with braces", task: asynq.NewTask("a}b%", []byte("42")), wantKey: keyOf("a%7Db%25", []byte("42"))},
		{name: "KeyFunc", opts: []asynqguard.Option{byOrder}, task: asynq.NewTask("charge", []byte("7/retry-2")), wantKey: "order:7"},
		{name: "KeyFunc error", opts: []asynqguard.Option{byOrder}, task: asynq.NewTask("charge", []byte("7")), wantErr: nil},
		{name: "KeyFunc bad key", opts: []asynqguard.Option{asynqguard.KeyFunc(func(context.Context, *asynq.Task) (string, error) {
			return "a}b", nil
		})}, task: asynq.NewTask("charge", nil), wantErr: []error{guard.ErrInvalid, asynq.SkipRetry}},
		{name: "KeyFunc empty key", opts: []asynqguard.Option{asynqguard.KeyFunc(func(context.Context, *asynq.Task) (string, error) {
			return "", nil
		})}, task: asynq.NewTask("charge", nil), wantErr: []error{guard.ErrInvalid, asynq.SkipRetry}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			held := ""
			h := asynqguard.Middleware(l, tt.opts...)(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
				if _, ok := guard.TokenFrom(ctx, tt.wantKey); ok {
					held = tt.wantKey
				}
				return nil
			}))
			err := h.ProcessTask(t.Context(), tt.task)
			switch {
			case tt.wantKey != "":
				if err != nil || held != tt.wantKey {
					t.Errorf("err = %v, handler held %q; want nil, %q", err, held, tt.wantKey)
				}
			case tt.wantErr == nil: // the KeyFunc's error, for asynq to retry
				if err == nil || !strings.Contains(err.Error(), "no order id") || !asynqguard.IsFailure(err) ||
					errors.Is(err, asynq.SkipRetry) {
					t.Errorf("err = %v, want the KeyFunc's error, retried", err)
				}
			default:
				for _, want := range tt.wantErr {
					if !errors.Is(err, want) {
						t.Errorf("err = %v, want it to match %v", err, want)
					}
				}
			}
		})
	}
}

// TestKeyFuncSerializes: tasks with different payloads but the KeyFunc's
// same key exclude each other.
func TestKeyFuncSerializes(t *testing.T) {
	srv := redistest.Start(t)
	mw := asynqguard.Middleware(newLocker(t, srv), asynqguard.KeyFunc(func(_ context.Context, t *asynq.Task) (string, error) {
		return "account:" + string(t.Payload()[:1]), nil
	}))
	entered := make(chan struct{})
	leave := make(chan struct{})
	first := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		close(entered)
		<-leave
		return nil
	}))
	done := make(chan error, 1)
	go func() { done <- first.ProcessTask(t.Context(), asynq.NewTask("deposit", []byte("1:100"))) }()
	<-entered
	var runs atomic.Int64
	err := mw(counting(&runs, nil)).ProcessTask(t.Context(), asynq.NewTask("withdraw", []byte("1:50")))
	if !errors.Is(err, asynqguard.ErrBusy) || runs.Load() != 0 {
		t.Errorf("same account: err = %v, runs = %d; want ErrBusy, 0", err, runs.Load())
	}
	err = mw(counting(&runs, nil)).ProcessTask(t.Context(), asynq.NewTask("withdraw", []byte("2:50")))
	if err != nil || runs.Load() != 1 {
		t.Errorf("other account: err = %v, runs = %d; want nil, 1", err, runs.Load())
	}
	close(leave)
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// TestDoneTTL: after a success, a duplicate is skipped and logged until the
// record expires, at Info once a minute per key; a failure records nothing.
func TestDoneTTL(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	log, buf := newLogger()
	mw := asynqguard.Middleware(l, asynqguard.DoneTTL(time.Second), asynqguard.Logger(log))
	task := asynq.NewTask("invoice:send", []byte("inv-9"))
	key := keyOf(task.Type(), task.Payload())

	var runs atomic.Int64
	boom := errors.New("boom")
	if err := mw(counting(&runs, boom)).ProcessTask(t.Context(), task); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if _, done, _ := l.Claimed(t.Context(), key); done {
		t.Fatal("a failed run left a done record")
	}
	for i, want := range []int64{2, 2, 2} { // the first succeeds, the duplicates are skipped
		if err := mw(counting(&runs, nil)).ProcessTask(t.Context(), task); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if runs.Load() != want {
			t.Fatalf("run %d: %d runs, want %d", i, runs.Load(), want)
		}
	}
	// Duplicates repeat: the first is logged at Info, the next at Debug.
	if n := len(buf.lines("skipped duplicate: already done", "task_type=invoice:send")); n != 2 {
		t.Errorf("%d skips logged, want 2:\n%s", n, buf)
	}
	if n := len(buf.lines("level=INFO", "skipped duplicate: already done")); n != 1 {
		t.Errorf("%d skips logged at Info, want 1 (once a minute per key):\n%s", n, buf)
	}
	waitFor(t, 5*time.Second, "the done record expires", func() bool {
		_, done, err := l.Claimed(t.Context(), key)
		return err == nil && !done
	})
	if err := mw(counting(&runs, nil)).ProcessTask(t.Context(), task); err != nil || runs.Load() != 3 {
		t.Errorf("after expiry: err = %v, %d runs; want nil, 3", err, runs.Load())
	}
}

// TestParentCancelKeepsLease: when asynq cancels the handler's context, the
// lease stays held until the handler returns.
func TestParentCancelKeepsLease(t *testing.T) {
	srv := redistest.Start(t)
	mw := asynqguard.Middleware(newLocker(t, srv, guard.WithTTL(600*time.Millisecond)))
	other := asynqguard.Middleware(newLocker(t, srv))
	task := asynq.NewTask("slow", nil)
	ctx, cancel := context.WithCancel(t.Context())
	var busyErr error
	err := mw(asynq.HandlerFunc(func(hctx context.Context, task *asynq.Task) error {
		cancel()
		<-hctx.Done()
		time.Sleep(time.Second) // past the TTL: renewals keep it
		var runs atomic.Int64
		busyErr = other(counting(&runs, nil)).ProcessTask(t.Context(), task)
		return hctx.Err()
	})).ProcessTask(ctx, task)
	if !errors.Is(err, context.Canceled) || errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("err = %v, want context.Canceled and no lease loss", err)
	}
	if !errors.Is(busyErr, asynqguard.ErrBusy) {
		t.Errorf("a copy run after the cancel got %v, want ErrBusy", busyErr)
	}
}

// TestInvalidOptions: New returns an error matching guard.ErrInvalid;
// Middleware panics with it.
func TestInvalidOptions(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	tests := []struct {
		name string
		l    *guard.Locker
		opts []asynqguard.Option
	}{
		{"nil Locker", nil, nil},
		{"nil option", l, []asynqguard.Option{nil}},
		{"nil KeyFunc", l, []asynqguard.Option{asynqguard.KeyFunc(nil)}},
		{"negative WaitFor", l, []asynqguard.Option{asynqguard.WaitFor(-time.Second)}},
		{"zero DoneTTL", l, []asynqguard.Option{asynqguard.DoneTTL(0)}},
		{"negative DoneTTL", l, []asynqguard.Option{asynqguard.DoneTTL(-time.Second)}},
		{"zero TTL", l, []asynqguard.Option{asynqguard.TTL(0)}},
		{"TTL too short for the Locker's schedule", l, []asynqguard.Option{asynqguard.TTL(time.Nanosecond)}},
		{"negative FenceTTL", l, []asynqguard.Option{asynqguard.FenceTTL(-time.Second)}},
		{"nil Logger", l, []asynqguard.Option{asynqguard.Logger(nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mw, err := asynqguard.New(tt.l, tt.opts...)
			if !errors.Is(err, guard.ErrInvalid) || mw != nil {
				t.Errorf("New: %v, want guard.ErrInvalid and no middleware", err)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "asynqguard: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			defer func() {
				p, _ := recover().(error)
				if !errors.Is(p, guard.ErrInvalid) {
					t.Errorf("Middleware panicked with %v, want an error matching guard.ErrInvalid", p)
				}
			}()
			asynqguard.Middleware(tt.l, tt.opts...)
		})
	}
	if _, err := asynqguard.New(l, asynqguard.WaitFor(0), asynqguard.TTL(time.Second), asynqguard.DoneTTL(time.Hour),
		asynqguard.Logger(slog.Default())); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// TestObserver: metrics see the task type as the lock name, spans the
// messaging attributes.
func TestObserver(t *testing.T) {
	srv := redistest.Start(t)
	obs := &recorder{}
	l := newLocker(t, srv, guard.WithObserver(obs))
	h := asynqguard.Middleware(l)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	if err := h.ProcessTask(t.Context(), asynq.NewTask("email:welcome", []byte("42"))); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.runs) != 1 {
		t.Fatalf("%d runs observed, want 1", len(obs.runs))
	}
	info := obs.runs[0]
	if info.Name != "email:welcome" {
		t.Errorf("Name = %q, want the task type", info.Name)
	}
	attrs := map[string]string{}
	for _, a := range info.Attrs {
		attrs[a.Key] = a.Value.String()
	}
	if attrs["messaging.system"] != "asynq" {
		t.Errorf("attrs %v lack messaging.system=asynq", attrs)
	}
	for _, k := range []string{"messaging.destination.name", "messaging.message.id"} {
		if _, ok := attrs[k]; !ok {
			t.Errorf("attrs %v lack %s", attrs, k)
		}
	}
}

// recorder is a guard.Observer that keeps the Info of every ended run.
type recorder struct {
	mu   sync.Mutex
	runs []observe.Info
}

func (r *recorder) Begin(ctx context.Context, _ observe.Phase, _ observe.Info) context.Context {
	return ctx
}
func (r *recorder) Event(context.Context, observe.Event, observe.Info) {}
func (r *recorder) End(_ context.Context, p observe.Phase, info observe.Info) {
	if p == observe.Run {
		r.mu.Lock()
		r.runs = append(r.runs, info)
		r.mu.Unlock()
	}
}

func TestIsFailureAndRetryDelay(t *testing.T) {
	busy := fmt.Errorf("%w: %w", asynqguard.ErrBusy, guard.ErrNotAcquired)
	other := errors.New("boom")
	if asynqguard.IsFailure(nil) || asynqguard.IsFailure(busy) || !asynqguard.IsFailure(other) {
		t.Errorf("IsFailure: nil %v, busy %v, other %v; want false, false, true",
			asynqguard.IsFailure(nil), asynqguard.IsFailure(busy), asynqguard.IsFailure(other))
	}
	task := asynq.NewTask("t", nil)
	seen := map[time.Duration]bool{}
	for range 200 {
		d := asynqguard.RetryDelay(3, busy, task)
		if d < 500*time.Millisecond || d >= 1500*time.Millisecond {
			t.Fatalf("busy delay %v outside [500ms, 1.5s)", d)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Errorf("%d distinct busy delays in 200, want jitter", len(seen))
	}
	if d := asynqguard.RetryDelay(0, other, task); d < 15*time.Second {
		t.Errorf("delay for another error %v, want asynq's default (>= 15s)", d)
	}
}

// The default keys are payload hashes, used a few times and then never
// again: their fencing counters must not stay in Redis forever.
func TestDefaultKeyFencingCounterExpires(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	admin := srv.Client(t)
	task := asynq.NewTask("email:welcome", []byte("42"))
	h := asynqguard.Middleware(l)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	if err := h.ProcessTask(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	fence := "guard:{" + keyOf("email:welcome", []byte("42")) + "}:fence"
	if ttl := admin.PTTL(t.Context(), fence).Val(); ttl <= 0 || ttl > 24*time.Hour {
		t.Fatalf("fencing counter %s PTTL %v, want (0, 24h]", fence, ttl)
	}
}
