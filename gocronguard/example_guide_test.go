package gocronguard_test

import (
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/go-co-op/gocron/v2"
	"github.com/jobguard/jobguard/gocronguard"
	"github.com/jobguard/jobguard/guard"
)

// One *slog.Logger for gocron, gocronguard and guard: a *slog.Logger is
// also a gocron.Logger. The Locker guards every job of the scheduler.
func ExampleLogger() {
	client, stop := exampleClient()                         //docs:hide
	defer stop()                                            //docs:hide
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)) // the service's logger
	locker, err := guard.New(client, guard.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close() // after s.Shutdown

	s, err := gocron.NewScheduler(
		gocron.WithLogger(logger),
		gocron.WithDistributedLocker(gocronguard.Locker(locker, gocronguard.Logger(logger))),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown()
	_, err = s.NewJob(gocron.CronJob("*/5 * * * *", false),
		gocron.NewTask(func() { /* sync the invoices */ }),
		gocron.WithName("sync-invoices")) // the name is the lock key: name every job
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(s.Jobs()), "job scheduled")
	// Output: 1 job scheduled
}
