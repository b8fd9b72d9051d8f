package guard

import (
	"context"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard/internal/redisstore"
	"github.com/redis/go-redis/v9"
)

// Regression (found by the soak in internal/soak): the scheduler measured
// its next sleep before it canceled the holds that had come to their stop
// time, and armed its timer with that duration after the cancellations:
// when canceling thousands of holds took a while, every later stop time
// was kept that much late, and under load a lease's context outlived its
// hold in Redis. The timer must be armed for the instant the next hold is
// due, however long the cancellations took.
func TestSchedulerWakesAtNextDueAfterSlowCancellations(t *testing.T) {
	clk := newFakeClock()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialed: no hold is renewed
	t.Cleanup(func() { _ = client.Close() })
	cfg, err := newConfig([]Option{WithTTL(30 * time.Second), WithCloseTimeout(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(redisstore.New(client, redisstore.Options{}), clk, cfg)
	t.Cleanup(func() { _ = l.Close() })

	tm, err := newTiming(30*time.Second, 10*time.Second, 3*time.Second, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Two holds whose renewals are far off and whose stop times are 1s apart.
	hold := func(key string, stop time.Time) *hold {
		h := &hold{l: l, key: key, name: key, keys: l.keysFor(key), owner: key, token: 1, timing: tm, start: t0, index: -1,
			leaseEnd: stop.Add(tm.grace), nextRenew: t0.Add(time.Hour), writes: 1, permits: 1}
		h.ctx, h.cancel = context.WithCancelCause(context.Background())
		h.obsCtx = context.Background()
		l.mu.Lock()
		l.holds[h] = struct{}{}
		l.mu.Unlock()
		l.hb.add(h)
		return h
	}
	a := hold("a", t0.Add(5*time.Second))
	b := hold("b", t0.Add(6*time.Second))
	clk.waitArmed(t, t0.Add(5*time.Second))

	// Hold the Locker's mutex, so the scheduler's cancellation of a stalls
	// in forget, and let time pass meanwhile.
	l.mu.Lock()
	clk.Advance(5 * time.Second)
	eventually(t, "a's context is canceled", func() bool { return a.ctx.Err() != nil })
	clk.Advance(500 * time.Millisecond)
	l.mu.Unlock()

	// b is due at t0+6s: the timer is armed there, not 500ms later.
	clk.waitArmed(t, t0.Add(6*time.Second))
	clk.Advance(500 * time.Millisecond)
	eventually(t, "b's context is canceled at its stop time", func() bool { return b.ctx.Err() != nil })
}
