package gocronguard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/jobguard/jobguard/gocronguard"
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

// Three instances of a service schedule the same job for the same time,
// each with a Locker on its scheduler. It runs on one of them; gocron
// skips it on the others, and tells their AfterLockError listeners why.
func Example() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide

	// A whole second at least a second away: the job's time on every instance.
	at := time.Now().Truncate(time.Second).Add(2 * time.Second)
	var mu sync.Mutex
	var ran, skipped int
	var wg sync.WaitGroup
	wg.Add(3)
	for range 3 {
		locker, err := guard.New(client) // in real life: one per process
		if err != nil {
			log.Fatal(err)
		}
		defer locker.Close()
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(gocronguard.Locker(locker)))
		if err != nil {
			log.Fatal(err)
		}
		defer s.Shutdown()
		_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartDateTime(at)),
			gocron.NewTask(func() {
				defer wg.Done()
				mu.Lock()
				ran++
				mu.Unlock()
			}),
			gocron.WithName("nightly-report"),
			gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
				defer wg.Done()
				if errors.Is(err, gocronguard.ErrTickClaimed) {
					mu.Lock()
					skipped++
					mu.Unlock()
				}
			})))
		if err != nil {
			log.Fatal(err)
		}
		s.Start()
	}
	wg.Wait()
	fmt.Printf("ran %d, skipped %d\n", ran, skipped)
	// Output:
	// ran 1, skipped 2
}

// A Task runs the job in the lease's context: it carries the fencing token
// and the tick, and it is canceled if the lease is lost. The job disables
// the scheduler's Locker, if it has one: a Task guards itself.
func ExampleTask() {
	locker, stop := exampleLocker() //docs:hide
	defer stop()                    //docs:hide
	s, err := gocron.NewScheduler()
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown()

	done := make(chan struct{})
	_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
		gocronguard.Task(locker, "sync-invoices", func(ctx context.Context) error {
			defer close(done)
			token, _ := guard.TokenFrom(ctx, "sync-invoices")
			_, ok := gocronguard.Tick(ctx)
			fmt.Println("fencing token:", token > 0, "tick:", ok)
			return nil // a real job passes ctx and the token on, and stops when ctx is done
		}),
		gocron.WithName("sync-invoices"),
		gocron.WithDisabledDistributedJobLocker(true))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	<-done // a service runs until shutdown instead
	// Output: fencing token: true tick: true
}

// A DurationJob starts at a different moment on each instance, so its runs
// do not fall on whole seconds: Window tells the Locker that each 5-minute
// window, counted from the Unix epoch, is one run. The Locker is the job's
// own here (gocron.WithDistributedJobLocker).
func ExampleWindow() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	locker, err := guard.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	s, err := gocron.NewScheduler()
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown()

	job, err := s.NewJob(gocron.DurationJob(5*time.Minute),
		gocron.NewTask(func() { /* sync the invoices */ }),
		gocron.WithName("sync-invoices"),
		gocron.WithDistributedJobLocker(gocronguard.Locker(locker, gocronguard.Window(5*time.Minute))))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.Name())
	// Output:
	// sync-invoices
}

// Skips are normal in a fleet; a failure to reach Redis is not. The errors
// of a Locker's Lock tell them apart, for an AfterLockError listener (the
// Logger option reports them too). Here two instances call Lock as gocron
// would, the second while the first still runs the job, and the listener
// as gocron does when Lock fails.
func ExampleErrBusy() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	ctx := context.Background()
	var instances []gocron.Locker
	for range 2 {
		locker, err := guard.New(client) // in real life: one per process
		if err != nil {
			log.Fatal(err)
		}
		defer locker.Close()
		instances = append(instances, gocronguard.Locker(locker, gocronguard.NoDedupe()))
	}

	onLockError := func(_ uuid.UUID, job string, err error) {
		switch {
		case errors.Is(err, gocronguard.ErrTickClaimed):
			fmt.Printf("%s: this time ran on another instance\n", job)
		case errors.Is(err, gocronguard.ErrBusy):
			_, known := guard.HeldFor(err) // how long the holder's lease has left
			fmt.Printf("%s: still running on another instance (its lease's time left known: %v)\n", job, known)
		default:
			fmt.Printf("%s: not run: %v\n", job, err)
		}
	}

	lock, err := instances[0].Lock(ctx, "rebuild-index") // a long run starts
	if err != nil {
		log.Fatal(err)
	}
	if _, err := instances[1].Lock(ctx, "rebuild-index"); err != nil {
		onLockError(uuid.Nil, "rebuild-index", err)
	}
	if err := lock.Unlock(ctx); err != nil { // the run is over
		log.Fatal(err)
	}
	// Output:
	// rebuild-index: still running on another instance (its lease's time left known: true)
}
