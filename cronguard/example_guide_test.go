package cronguard_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"

	"github.com/jobguard/jobguard/cronguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/robfig/cron/v3"
)

// One *slog.Logger for cron (through CronLogger), cronguard and guard; Add
// writes the schedule once; BaseContext ends on shutdown.
func ExampleCronLogger() {
	client, stop := exampleClient()                                   //docs:hide
	defer stop()                                                      //docs:hide
	ctx := context.Background()                                       //docs:hide
	syncInvoices := func(context.Context, int64) error { return nil } //docs:hide

	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))                 // the service's logger
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt) // ends on shutdown
	defer cancel()
	locker, err := guard.New(client, guard.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	c := cron.New(cron.WithLogger(cronguard.CronLogger(logger)))
	_, err = cronguard.Add(c, locker, "sync-invoices", "@every 5m", func(ctx context.Context) error {
		// ctx ends on lease loss or shutdown; cronguard.Tick(ctx) is the run's tick.
		token, _ := guard.TokenFrom(ctx, cronguard.JobName(ctx))
		return syncInvoices(ctx, token)
	}, cronguard.Logger(logger), cronguard.BaseContext(ctx))
	if err != nil {
		log.Fatal(err) // a bad spec or option, a nil locker or func: found at startup
	}
	fmt.Println(len(c.Entries()), "job scheduled")
	// Output: 1 job scheduled
}
