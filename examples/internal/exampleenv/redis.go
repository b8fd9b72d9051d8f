package exampleenv

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Connect returns a function that opens a new client (a connection pool of
// its own, as a separate process would have) to the server in REDIS_URL or,
// when REDIS_URL is unset, to an embedded miniredis. stop shuts the embedded
// server down; call it after closing every client.
func Connect() (dial func() *redis.Client, stop func(), err error) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		return func() *redis.Client { return redis.NewClient(opts) }, func() {}, nil
	}
	m, err := miniredis.Run()
	if err != nil {
		return nil, nil, fmt.Errorf("embedded redis: %w", err)
	}
	// miniredis answers TIME from the wall clock, which is what guard's
	// scripts judge expiry by, but counts key TTLs down only when told to.
	// Tell it every 10ms, so keys expire in real time as on a real server.
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	})
	stop = func() {
		close(done)
		wg.Wait()
		m.Close()
	}
	opts := &redis.Options{Addr: m.Addr()}
	return func() *redis.Client { return redis.NewClient(opts) }, stop, nil
}
