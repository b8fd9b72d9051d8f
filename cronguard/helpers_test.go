package cronguard_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// newLocker returns a Locker on its own client to addr, as a separate
// process of the fleet would have, closed when the test ends.
func newLocker(t *testing.T, addr string, opts ...guard.Option) *guard.Locker {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr})
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

// startCron starts a cron.Cron with seconds that runs job on spec. The
// returned stop stops it and waits for running jobs; it also runs when the
// test ends, before the Lockers close.
func startCron(t *testing.T, spec string, job cron.Job) (stop func()) {
	t.Helper()
	c := cron.New(cron.WithSeconds())
	if _, err := c.AddJob(spec, job); err != nil {
		t.Fatalf("AddJob(%q): %v", spec, err)
	}
	c.Start()
	var once sync.Once
	stop = func() { once.Do(func() { <-c.Stop().Done() }) }
	t.Cleanup(stop)
	return stop
}

// fixedClock returns a clock that always reads at.
func fixedClock(at time.Time) func() time.Time { return func() time.Time { return at } }

// entry is one message logged through a recLogger.
type entry struct {
	level string // "debug", "info", "warn" or "error"
	msg   string
	err   error // the record's "err" attribute, if any
	kv    map[string]any
}

// recLogger records what a *slog.Logger made of it (logger) is told, at
// every level.
type recLogger struct {
	mu      sync.Mutex
	entries []entry
	onEntry func(entry) // optional: called with every entry
}

// logger returns a *slog.Logger whose records rec keeps.
func (l *recLogger) logger() *slog.Logger { return slog.New(recHandler{l}) }

type recHandler struct{ l *recLogger }

func (recHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recHandler) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h recHandler) WithGroup(string) slog.Handler          { return h }

func (h recHandler) Handle(_ context.Context, r slog.Record) error {
	e := entry{level: strings.ToLower(r.Level.String()), msg: r.Message, kv: map[string]any{}}
	r.Attrs(func(a slog.Attr) bool {
		v := a.Value.Any()
		if err, ok := v.(error); ok && a.Key == "err" {
			e.err = err
		}
		e.kv[a.Key] = v
		return true
	})
	h.l.add(e)
	return nil
}

func (l *recLogger) add(e entry) {
	l.mu.Lock()
	l.entries = append(l.entries, e)
	on := l.onEntry
	l.mu.Unlock()
	if on != nil {
		on(e)
	}
}

// info returns the entries logged with msg at Info or above: what an
// operator whose logger drops Debug sees.
func (l *recLogger) info(msg string) []entry {
	var out []entry
	for _, e := range l.all(msg) {
		if e.level != "debug" {
			out = append(out, e)
		}
	}
	return out
}

// all returns the entries logged with msg, at every level.
func (l *recLogger) all(msg string) []entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []entry
	for _, e := range l.entries {
		if e.msg == msg {
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
		s += fmt.Sprintf("  %s %q err=%v %v\n", e.level, e.msg, e.err, e.kv)
	}
	return s
}
