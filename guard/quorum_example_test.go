package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

// Redlock over three independent masters: a hold counts when two of them
// granted it, so the lock outlives any one of them.
func ExampleNewQuorum() {
	var clients []redis.UniversalClient
	for range 3 {
		m, err := miniredis.Run() // your own masters: redis.NewClient(&redis.Options{Addr: ...})
		if err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		defer c.Close()
		clients = append(clients, c)
	}
	a, err := guard.NewQuorum(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := guard.NewQuorum(clients) // another process of the fleet
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	ctx := context.Background()
	err = a.WithLock(ctx, "ledger", func(ctx context.Context) error {
		token, _ := guard.TokenFrom(ctx, "ledger")
		fmt.Println("a holds the ledger, token on a majority:", token > 0)
		_, err := b.Acquire(ctx, "ledger", guard.Wait(0))
		fmt.Println("b is turned away:", errors.Is(err, guard.ErrNotAcquired))
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// b waits a moment rather than trying once: a master that answered b's
	// first attempt late may hold that attempt's grant until b drops it.
	lease, err := b.Acquire(ctx, "ledger", guard.Wait(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("b gets it after a released")
	_ = lease.Release(ctx)
	// Output:
	// a holds the ledger, token on a majority: true
	// b is turned away: true
	// b gets it after a released
}
