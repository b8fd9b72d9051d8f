package gocronguard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// newLocker returns a Locker on its own client to addr, as a separate
// process of the fleet would have, closed when the test ends.
func newLocker(t *testing.T, addr string, opts ...guard.Option) *guard.Locker {
	t.Helper()
	return newLockerOn(t, redis.NewClient(&redis.Options{Addr: addr}), opts...)
}

// newLockerOn returns a Locker on client; both are closed when the test
// ends.
func newLockerOn(t *testing.T, client *redis.Client, opts ...guard.Option) *guard.Locker {
	t.Helper()
	l, err := guard.New(client, opts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	t.Cleanup(func() {
		_ = l.Close()
		_ = client.Close()
	})
	return l
}

// newFleet starts a server and n Lockers on it.
func newFleet(t *testing.T, n int, opts ...guard.Option) (*redistest.Server, []*guard.Locker) {
	t.Helper()
	srv := redistest.Start(t)
	ls := make([]*guard.Locker, n)
	for i := range ls {
		ls[i] = newLocker(t, srv.Addr(), opts...)
	}
	return srv, ls
}

// newScheduler returns a started gocron scheduler. The returned shutdown
// shuts it down, waiting for its running jobs, and fails the test if that
// fails; it also runs when the test ends, before the Lockers close
// (cleanups run last-in first-out).
func newScheduler(t *testing.T, opts ...gocron.SchedulerOption) (gocron.Scheduler, func()) {
	t.Helper()
	s, err := gocron.NewScheduler(append([]gocron.SchedulerOption{gocron.WithStopTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("gocron.NewScheduler: %v", err)
	}
	var once sync.Once
	shutdown := func() {
		once.Do(func() {
			if err := s.Shutdown(); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		})
	}
	t.Cleanup(shutdown)
	return s, shutdown
}

// mustNewJob adds a job to s.
func mustNewJob(t *testing.T, s gocron.Scheduler, def gocron.JobDefinition, task gocron.Task, opts ...gocron.JobOption) gocron.Job {
	t.Helper()
	j, err := s.NewJob(def, task, opts...)
	if err != nil {
		t.Fatalf("NewJob: %v", err)
	}
	return j
}

// everySecond is a CronJob firing on every whole second.
func everySecond() gocron.JobDefinition { return gocron.CronJob("* * * * * *", true) }

// tally counts the runs of each tick.
type tally struct {
	mu   sync.Mutex
	runs map[time.Time]int
}

func (ta *tally) add(tick time.Time) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if ta.runs == nil {
		ta.runs = make(map[time.Time]int)
	}
	ta.runs[tick.UTC()]++
}

// check fails unless each tick ran exactly once and at least min ticks ran.
// It returns the ticks, in order.
func (ta *tally) check(t *testing.T, min int) []time.Time {
	t.Helper()
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ticks := make([]time.Time, 0, len(ta.runs))
	for tick, n := range ta.runs {
		ticks = append(ticks, tick)
		if n != 1 {
			t.Errorf("tick %v ran %d times, want once", tick, n)
		}
	}
	slices.SortFunc(ticks, time.Time.Compare)
	if len(ticks) < min {
		t.Errorf("%d ticks ran (%v), want at least %d", len(ticks), ticks, min)
	}
	return ticks
}

// recordingLocker is a gocron.Locker that records, for each run it let in,
// the time just before it asked the wrapped Locker: the time the wrapped
// Locker reads its tick from.
type recordingLocker struct {
	gocron.Locker
	window time.Duration
	ta     *tally
}

func (r recordingLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	asked := time.Now()
	lk, err := r.Locker.Lock(ctx, key)
	if err == nil {
		r.ta.add(asked.Truncate(r.window))
	}
	return lk, err
}

// entry is one message logged through a recLogger.
type entry struct {
	level string
	msg   string
	kv    map[string]any
}

// recLogger is a gocron.Logger that records what it is told.
type recLogger struct {
	mu      sync.Mutex
	entries []entry
}

// logger returns a *slog.Logger whose records l keeps, at every level.
func (l *recLogger) logger() *slog.Logger { return slog.New(recHandler{l}) }

type recHandler struct{ l *recLogger }

func (recHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recHandler) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h recHandler) WithGroup(string) slog.Handler          { return h }

func (h recHandler) Handle(_ context.Context, r slog.Record) error {
	m := make(map[string]any)
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.Any()
		return true
	})
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	h.l.entries = append(h.l.entries, entry{level: strings.ToLower(r.Level.String()), msg: r.Message, kv: m})
	return nil
}

// all returns the entries logged at level with msg and, if reason is not
// empty, that reason.
func (l *recLogger) all(level, msg, reason string) []entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []entry
	for _, e := range l.entries {
		if e.level == level && e.msg == msg && (reason == "" || e.kv["reason"] == reason) {
			out = append(out, e)
		}
	}
	return out
}

func (l *recLogger) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := ""
	for _, e := range l.entries {
		s += fmt.Sprintf("  %s %q %v\n", e.level, e.msg, e.kv)
	}
	return s
}

// waitFor polls cond every 10ms until it holds or d has passed, and
// reports whether it held.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// isFree reports whether key is free in Redis, by taking and releasing it
// with l.
func isFree(t *testing.T, l *guard.Locker, key string) bool {
	t.Helper()
	le, err := l.Acquire(t.Context(), key, guard.Wait(0))
	if errors.Is(err, guard.ErrNotAcquired) {
		return false
	}
	if err != nil {
		t.Fatalf("acquire %q: %v", key, err)
	}
	if err := le.Release(t.Context()); err != nil {
		t.Errorf("release %q: %v", key, err)
	}
	return true
}
