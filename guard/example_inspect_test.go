package guard_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jobguard/jobguard/guard"
)

// Inspect tells an operator who holds a key, in what mode, with which
// fencing token, and who waits for it.
func ExampleLocker_Inspect() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	worker, _ := guard.New(client, guard.WithIdentity("worker-1/4242"))
	defer worker.Close()
	ops, _ := guard.New(client)
	defer ops.Close()

	ctx := context.Background()
	lease, err := worker.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	st, err := ops.Inspect(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range st.Holders {
		fmt.Printf("%s holds %q: write=%v leases=%d token matches=%v left<=TTL=%v\n",
			h.Identity, st.Key, h.Write, h.Writes, h.Token == lease.Token(), h.Left > 0 && h.Left <= 30*time.Second)
	}
	free, _ := ops.Inspect(ctx, "never-taken")
	fmt.Println("free key holders:", len(free.Holders))
	// Output:
	// worker-1/4242 holds "nightly-report": write=true leases=1 token matches=true left<=TTL=true
	// free key holders: 0
}

// Scan walks every lock under the prefix, a page of SCAN at a time.
func ExampleLocker_Scan() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	l, _ := guard.New(client, guard.WithIdentity("scanner"))
	defer l.Close()

	ctx := context.Background()
	for _, key := range []string{"billing-sync", "email-digest", "reindex"} {
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			log.Fatal(err)
		}
		defer lease.Release(ctx)
	}
	n := 0
	err := l.Scan(ctx, "*-*", func(st guard.LockState) error {
		n++ // SCAN order is the server's: sort keys if you print them
		return nil
	})
	fmt.Println(n, "locks match *-*", err)
	// Output: 2 locks match *-* <nil>
}

// ForceRelease ends a hold whose job is stuck; the holder's lease context is
// canceled at its next renewal, and the next token is still higher.
func ExampleLocker_ForceRelease() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	worker, _ := guard.New(client, guard.WithIdentity("stuck-worker"), guard.WithTTL(300*time.Millisecond))
	defer worker.Close()
	ops, _ := guard.New(client)
	defer ops.Close()

	ctx := context.Background()
	lease, err := worker.Acquire(ctx, "import")
	if err != nil {
		log.Fatal(err)
	}
	released, err := ops.ForceRelease(ctx, "import")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released the hold of", released.Holders[0].Identity)

	<-lease.Context().Done() // the holder's next renewal finds the hold gone
	fmt.Println(context.Cause(lease.Context()))
	next, err := ops.Acquire(ctx, "import")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("next token higher:", next.Token() > lease.Token())
	_ = next.Release(ctx)
	_ = lease.Release(ctx)
	// Output:
	// released the hold of stuck-worker
	// guard: lease lost: "import" expired or was force-released
	// next token higher: true
}
