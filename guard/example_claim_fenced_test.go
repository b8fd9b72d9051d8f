package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jobguard/jobguard/guard"
)

// A holder keeps its result beside the lock with ClaimFenced: once a newer
// hold has begun, an older holder (one whose lease ran out while it was
// paused, say) can no longer store over it.
func ExampleLocker_ClaimFenced() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	locker, _ := guard.New(client)
	defer locker.Close()

	ctx := context.Background()
	first, err := locker.Acquire(ctx, "daily-report")
	if err != nil {
		log.Fatal(err)
	}
	_ = first.Release(ctx) // or its lease ran out unnoticed
	second, err := locker.Acquire(ctx, "daily-report")
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release(ctx)

	err = locker.ClaimFenced(ctx, "daily-report", second.Token(), []byte("second's report"), 24*time.Hour)
	fmt.Println("second stored:", err == nil)
	err = locker.ClaimFenced(ctx, "daily-report", first.Token(), []byte("first's report"), 24*time.Hour)
	fmt.Println("first refused:", errors.Is(err, guard.ErrSuperseded))
	report, _, _ := locker.Claimed(ctx, "daily-report")
	fmt.Println(string(report))
	// Output:
	// second stored: true
	// first refused: true
	// second's report
}
