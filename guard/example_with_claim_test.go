package guard_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jobguard/jobguard/guard"
)

// A payment runs once per request id: WithClaim binds the id's claim to
// the request's payload, runs the job under the lock, and keeps its
// receipt in the claim, so a retry is given the receipt without running
// the job again, and a request that reuses the id for another payload is
// given what the id is bound to.
func ExampleLocker_WithClaim() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	locker, _ := guard.New(client)
	defer locker.Close()

	pay := func(id, payload string) {
		ran := false
		claim, err := locker.WithClaim(context.Background(), "payment-"+id, []byte(payload), time.Minute,
			func(ctx context.Context) ([]byte, time.Duration, error) {
				ran = true // charge the card here, with ctx: it ends if the lease is lost
				return []byte("receipt for " + payload), 24 * time.Hour, nil
			})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("ran %v: %s\n", ran, claim)
	}
	pay("42", "10 EUR") // runs, and keeps its receipt
	pay("42", "10 EUR") // a retry: the receipt
	pay("42", "99 EUR") // the id reused: the claim, whose receipt is not for 99 EUR
	// Output:
	// ran true: receipt for 10 EUR
	// ran false: receipt for 10 EUR
	// ran false: receipt for 10 EUR
}
