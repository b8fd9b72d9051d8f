package guard

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A lease released while its hold is being lost (a renewal found the key
// gone, Close gave up on it) gets ErrNotHeld, never a crash: the hold can
// end at any moment, also between the release's looks at it.
func TestReleaseWhileHoldIsLost(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	l, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 1000 {
		outer, err := l.Acquire(t.Context(), "racing", Wait(0))
		if err != nil {
			t.Fatal(err)
		}
		inner, err := l.Acquire(outer.Context(), "racing")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { outer.h.lose(lostCause("racing", store.Expired)) })
		wg.Go(func() {
			if err := inner.Release(context.Background()); err != nil && !errors.Is(err, ErrNotHeld) {
				t.Errorf("inner Release: %v", err)
			}
		})
		wg.Wait()
		if err := outer.Release(context.Background()); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("outer Release of a lost hold: %v, want ErrNotHeld", err)
		}
	}
}
