package cronguard_test

import (
	"fmt"
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
	level string // "info" or "error"
	msg   string
	err   error
	kv    map[string]any
}

// recLogger is a cron.Logger that records what it is told.
type recLogger struct {
	mu      sync.Mutex
	entries []entry
	onInfo  func(entry) // optional
}

func (l *recLogger) Info(msg string, kv ...any) { l.add(entry{level: "info", msg: msg, kv: kvMap(kv)}) }

func (l *recLogger) Error(err error, msg string, kv ...any) {
	l.add(entry{level: "error", msg: msg, err: err, kv: kvMap(kv)})
}

func (l *recLogger) add(e entry) {
	l.mu.Lock()
	l.entries = append(l.entries, e)
	on := l.onInfo
	l.mu.Unlock()
	if on != nil && e.level == "info" {
		on(e)
	}
}

// all returns the entries logged with msg.
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

func kvMap(kv []any) map[string]any {
	m := make(map[string]any, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[fmt.Sprint(kv[i])] = kv[i+1]
	}
	return m
}
