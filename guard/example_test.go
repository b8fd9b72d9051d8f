package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

// exampleClient returns a client on an embedded Redis, so the examples run
// anywhere; use your own redis.NewClient (or a Sentinel or Cluster client).
func exampleClient() (*redis.Client, func()) {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return client, func() { client.Close(); m.Close() }
}

func Example() {
	client, stop := exampleClient()  //docs:hide
	defer stop()                     //docs:hide
	locker, err := guard.New(client) // a go-redis client: standalone, Sentinel or Cluster
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.WithLock(context.Background(), "nightly-report", func(ctx context.Context) error {
		// ctx ends before the lease could; the token is for the store you write to.
		token, ok := guard.TokenFrom(ctx, "nightly-report")
		fmt.Println("running with a fencing token:", ok && token > 0)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: running with a fencing token: true
}

// A job that should run on one instance of the fleet and be skipped
// elsewhere tries once: Wait(0).
func ExampleWait() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	a, _ := guard.New(client)
	defer a.Close()
	b, _ := guard.New(client)
	defer b.Close()

	ctx := context.Background()
	lease, err := a.Acquire(ctx, "billing-sync")
	if err != nil {
		log.Fatal(err)
	}
	err = b.WithLock(ctx, "billing-sync", func(context.Context) error { return nil }, guard.Wait(0))
	fmt.Println("second instance skipped:", errors.Is(err, guard.ErrNotAcquired))
	_ = lease.Release(ctx)
	// Output: second instance skipped: true
}

// A context that holds a key re-enters it: the inner call does not wait for
// itself and sees the same fencing token.
func ExampleLocker_WithLock_reentrant() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	locker, _ := guard.New(client)
	defer locker.Close()

	ctx := context.Background()
	_ = locker.WithLock(ctx, "accounts", func(ctx context.Context) error {
		outer, _ := guard.TokenFrom(ctx, "accounts")
		return locker.WithLock(ctx, "accounts", func(ctx context.Context) error {
			inner, _ := guard.TokenFrom(ctx, "accounts")
			fmt.Println("same token:", inner == outer)
			return nil
		})
	})
	// Output: same token: true
}

// Readers share a key; a read holder asking to write gets ErrUpgrade at once.
func ExampleLocker_AcquireRead() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	a, _ := guard.New(client)
	defer a.Close()
	b, _ := guard.New(client)
	defer b.Close()

	ctx := context.Background()
	r1, _ := a.AcquireRead(ctx, "catalog")
	r2, err := b.AcquireRead(ctx, "catalog", guard.Wait(0))
	fmt.Println("two readers:", err == nil)
	_, err = a.Acquire(r1.Context(), "catalog")
	fmt.Println("upgrade refused:", errors.Is(err, guard.ErrUpgrade))
	_ = r2.Release(ctx)
	_ = r1.Release(ctx)
	// Output:
	// two readers: true
	// upgrade refused: true
}

// Lease.Context ends when the lease is released or lost; its cause says which.
func ExampleLease_Context() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	locker, _ := guard.New(client)
	defer locker.Close()

	ctx := context.Background()
	lease, _ := locker.Acquire(ctx, "reindex")
	_ = lease.Release(ctx)
	<-lease.Context().Done()
	fmt.Println(context.Cause(lease.Context()))
	fmt.Println(lease.Release(ctx))
	// Output:
	// guard: lease released
	// guard: lease not held: lease on "reindex" already released
}

// A partner API allows two calls at a time: with Permits(2), at most two
// instances of the fleet call it at once, and a third waits until one of
// them is done.
func ExamplePermits() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	var fleet [3]*guard.Locker
	for i := range fleet {
		fleet[i], _ = guard.New(client)
		defer fleet[i].Close()
	}

	ctx := context.Background()
	first, err := fleet[0].Acquire(ctx, "partner-api", guard.Permits(2))
	if err != nil {
		log.Fatal(err)
	}
	second, err := fleet[1].Acquire(ctx, "partner-api", guard.Permits(2))
	if err != nil {
		log.Fatal(err)
	}
	_, err = fleet[2].Acquire(ctx, "partner-api", guard.Permits(2), guard.Wait(0))
	fmt.Println("third instance busy:", errors.Is(err, guard.ErrNotAcquired))

	// The permit the first instance releases goes to the third.
	third := make(chan *guard.Lease)
	go func() {
		le, err := fleet[2].Acquire(ctx, "partner-api", guard.Permits(2))
		if err != nil {
			log.Fatal(err)
		}
		third <- le
	}()
	_ = first.Release(ctx)
	le := <-third
	fmt.Println("third instance holds a permit:", le.Token() > second.Token())

	// Every holder must agree on the number of permits.
	_, err = fleet[0].Acquire(ctx, "partner-api", guard.Wait(0))
	fmt.Println("a plain lock on the key refused:", errors.Is(err, guard.ErrPermitsDiffer))
	_ = second.Release(ctx)
	_ = le.Release(ctx)
	// Output:
	// third instance busy: true
	// third instance holds a permit: true
	// a plain lock on the key refused: true
}
