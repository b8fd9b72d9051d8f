package cronguard_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"

	"github.com/alicebob/miniredis/v2"
	"github.com/jobguard/jobguard/cronguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
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

// skipPrinter is a slog.Handler that prints why an instance skipped a
// tick: the reason of each record that has one.
type skipPrinter string

func (skipPrinter) Enabled(context.Context, slog.Level) bool { return true }
func (p skipPrinter) WithAttrs([]slog.Attr) slog.Handler     { return p }
func (p skipPrinter) WithGroup(string) slog.Handler          { return p }

func (p skipPrinter) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "reason" {
			fmt.Printf("%s skips: %v\n", p, a.Value)
		}
		return true
	})
	return nil
}

// Three instances of a service schedule the same nightly job. When the day
// comes, cron calls the job on each of them; it runs on the first.
func Example() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide

	var jobs []cron.Job
	for i := 1; i <= 3; i++ {
		locker, err := guard.New(client) // in real life: one per process
		if err != nil {
			log.Fatal(err)
		}
		defer locker.Close()
		instance := fmt.Sprintf("instance-%d", i)
		jobs = append(jobs, cronguard.Func(locker, "nightly-report", func(ctx context.Context) error {
			token, _ := guard.TokenFrom(ctx, cronguard.JobName(ctx))
			fmt.Printf("%s runs %s with a fencing token: %v\n", instance, cronguard.JobName(ctx), token > 0)
			return nil
		}, cronguard.Spec("@daily"), cronguard.Logger(slog.New(skipPrinter(instance)))))
	}
	// Each instance's cron would call Run at midnight; call it by hand.
	for _, job := range jobs {
		job.Run()
	}
	// Output:
	// instance-1 runs nightly-report with a fencing token: true
	// instance-2 skips: tick already claimed
	// instance-3 skips: tick already claimed
}

// exampleLocker returns a Locker on an embedded Redis and a func that
// closes both.
func exampleLocker() (*guard.Locker, func()) {
	client, stop := exampleClient() //docs:hide
	locker, err := guard.New(client)
	if err != nil {
		log.Fatal(err)
	}
	return locker, func() { locker.Close(); stop() }
}

// The usual setup: Add schedules the job on the Cron and tells the job
// its schedule, from one spec; one *slog.Logger logs for cron, cronguard
// and guard (CronLogger gives it to cron), and the base context
// ends on shutdown, which cancels running jobs' contexts; cron's Stop then
// waits for them. A wiring mistake (a typo in the spec, a bad option) is
// Add's error, at startup.
func ExampleAdd() {
	locker, stop := exampleLocker() //docs:hide
	defer stop()                    //docs:hide
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	ran := make(chan struct{}, 1)   //docs:hide
	go func() { <-ran; cancel() }() //docs:hide

	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)) // the service's logger
	c := cron.New(cron.WithLogger(cronguard.CronLogger(logger)))
	_, err := cronguard.Add(c, locker, "sync-invoices", "@every 1s", func(ctx context.Context) error {
		token, _ := guard.TokenFrom(ctx, "sync-invoices")
		ran <- struct{}{} //docs:hide
		fmt.Println("syncing invoices with a fencing token:", token > 0)
		return nil // a real job passes ctx and the token on, and stops when ctx is done
	}, cronguard.Logger(logger), cronguard.BaseContext(ctx))
	if err != nil {
		log.Fatal(err) // a bad spec or option: found at startup
	}
	c.Start()
	<-ctx.Done() // until interrupted
	<-c.Stop().Done()
	// Output: syncing invoices with a fencing token: true
}

// Func guards a job for cron's own AddJob; it needs the same spec as a
// Spec, since a job cannot see its schedule. It panics on a wiring mistake.
func ExampleFunc() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	locker, err := guard.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	c := cron.New()
	const spec = "0 3 * * *"
	_, err = c.AddJob(spec, cronguard.Func(locker, "nightly-cleanup", func(ctx context.Context) error {
		return nil
	}, cronguard.Spec(spec)))
	if err != nil {
		log.Fatal(err)
	}
	c.Start()
	defer func() { <-c.Stop().Done() }()
}

// Wrapper guards a plain cron.Job in a cron.Chain. It recovers and logs
// panics itself, so cron.Recover is not needed in front of it.
func ExampleWrapper() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	locker, err := guard.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	logger := slog.Default()
	c := cron.New(cron.WithLogger(cronguard.CronLogger(logger)))
	guarded := cron.NewChain(
		cronguard.Wrapper(locker, "nightly-cleanup", cronguard.Spec("0 3 * * *"), cronguard.Logger(logger)),
	)
	_, err = c.AddJob("0 3 * * *", guarded.Then(cron.FuncJob(func() { fmt.Println("cleaning up") })))
	if err != nil {
		log.Fatal(err)
	}
	c.Start()
	defer func() { <-c.Stop().Done() }()
}
