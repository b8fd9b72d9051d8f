package failover_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// lockedBuffer is a bytes.Buffer safe for a logger and a test to share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A slot left migrating (a resharding aborted half way) answers every
// acquisition TRYAGAIN for good. An Acquire without a Wait budget rides it
// out until its context ends, but says so, once, at Warn, rather than
// retrying in silence; and an Acquire that Close interrupts while it waits
// to try again fails with ErrClosed, as one waiting for a release does.
func TestClusterStuckMigrationIsLoggedAndCloseEndsTheRetries(t *testing.T) {
	const ttl = time.Second
	c := redistest.StartCluster(t)
	var logged lockedBuffer
	l := clusterLocker(t, c, nil, guard.WithTTL(ttl), guard.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	from, to := c.Nodes()[0], c.Nodes()[1]
	name, _ := namesOn(t, c, from)
	holder := clusterLocker(t, c, nil, guard.WithTTL(ttl))
	le := mustAcquire(t, t.Context(), holder, name) // the fence exists: the slot has some of the keys
	mustRelease(t, le)
	m := c.BeginMigration(t, c.Slot(t, lockKey(name)), from, to)
	t.Cleanup(func() { m.MoveKeys(t); m.Finish(t) })

	ctx, cancel := context.WithTimeout(t.Context(), 3*ttl)
	defer cancel()
	_, err := l.Acquire(ctx, name) // no Wait: until ctx is done
	if err == nil || errors.Is(err, guard.ErrNotAcquired) || !strings.Contains(err.Error(), "TRYAGAIN") {
		t.Fatalf("Acquire on a slot stuck migrating: %v; want TRYAGAIN then the deadline", err)
	}
	if got := strings.Count(logged.String(), "migrating for a TTL"); got != 1 {
		t.Errorf("want one warning that the slot kept migrating, got %d; log:\n%s", got, logged.String())
	}

	other := clusterLocker(t, c, nil, guard.WithTTL(ttl))
	done := make(chan error, 1)
	go func() {
		_, err := other.Acquire(t.Context(), name, guard.Wait(20*time.Second))
		done <- err
	}()
	time.Sleep(ttl / 2)
	_ = other.Close()
	select {
	case err := <-done:
		if !errors.Is(err, guard.ErrClosed) {
			t.Errorf("Acquire interrupted by Close: %v; want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire did not return after Close")
	}
}
