package asynqguard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

// exampleLocker returns a Locker on an embedded Redis and a func that
// closes both.
func exampleLocker() (*guard.Locker, func()) {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	locker, err := guard.New(client)
	if err != nil {
		log.Fatal(err)
	}
	return locker, func() { locker.Close(); client.Close(); m.Close() }
}

// A server whose tasks run under a guard lease: identical tasks never run at
// the same time on any server of the fleet, and a task that finds its key
// busy is retried soon without spending a retry. Here a task and its
// duplicate go through the mux by hand, as srv.Run(mux) would run them.
func ExampleMiddleware() {
	locker, stop := exampleLocker() //docs:hide
	defer stop()                    //docs:hide

	cfg := asynq.Config{ // for srv := asynq.NewServer(redisOpt, cfg)
		IsFailure:      asynqguard.IsFailure,  // a busy key spends no retry
		RetryDelayFunc: asynqguard.RetryDelay, // and is retried when the holder's lease would end, 5.5s at most
	}
	mux := asynq.NewServeMux()
	mux.Use(asynqguard.Middleware(locker, asynqguard.DoneTTL(time.Hour)))
	mux.HandleFunc("email:welcome", func(ctx context.Context, t *asynq.Task) error {
		fmt.Printf("welcome email for %s\n", t.Payload())
		return nil // a real handler stops when ctx is done
	})
	_ = cfg //docs:hide

	task := asynq.NewTask("email:welcome", []byte(`{"user":42}`))
	_ = mux.ProcessTask(context.Background(), task)
	_ = mux.ProcessTask(context.Background(), task) // a duplicate, within DoneTTL: skipped
	// Output: welcome email for {"user":42}
}

// The hooks for asynq.Config tell a busy key from a failure.
func ExampleIsFailure() {
	busy := fmt.Errorf("%w: %w", asynqguard.ErrBusy, guard.ErrNotAcquired) // what a busy task returns
	failed := errors.New("smtp: 421 service not available")
	task := asynq.NewTask("email:welcome", []byte(`{"user":42}`))

	for _, c := range []struct {
		name string
		err  error
	}{{"busy key", busy}, {"smtp error", failed}} {
		d := asynqguard.RetryDelay(0, c.err, task)
		fmt.Printf("%-10s failure=%-5v retry within 2s=%v\n", c.name, asynqguard.IsFailure(c.err), d < 2*time.Second)
	}
	// Output:
	// busy key   failure=false retry within 2s=true
	// smtp error failure=true  retry within 2s=false
}

// At most two exports run at once across every server of the fleet, however
// many servers and workers there are; the others are retried soon, without
// spending a retry. Pattern makes the limit hold for every task the mux
// routes to the handler: "report:export:eu" as well as "report:export".
func ExampleLimit() {
	locker, err := guard.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: "localhost:6379"}, asynq.Config{
		Concurrency:    20, // per server
		IsFailure:      asynqguard.IsFailure,
		RetryDelayFunc: asynqguard.RetryDelay,
	})
	mux := asynq.NewServeMux()
	export := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		return nil // call the rate-limited API; stop when ctx is done
	})
	const pattern = "report:export"
	mux.Handle(pattern, asynqguard.Middleware(locker, asynqguard.Limit(2), asynqguard.Pattern(pattern))(export))
	if err := srv.Run(mux); err != nil {
		log.Fatal(err)
	}
}

// asynq's ServeMux runs a handler for every task whose type starts with the
// handler's pattern, so a limit keyed by task type would not bound the
// handler: New refuses Limit without Pattern (or KeyFunc), and with Pattern
// every task the handler runs takes a permit of the one key.
func ExamplePattern() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	locker, err := guard.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	_, err = asynqguard.New(locker, asynqguard.Limit(2))
	fmt.Println("Limit alone refused:", errors.Is(err, guard.ErrInvalid))

	const pattern = "report:export"
	limit, err := asynqguard.New(locker, asynqguard.Limit(2), asynqguard.Pattern(pattern))
	if err != nil {
		log.Fatal(err)
	}
	mux := asynq.NewServeMux()
	mux.Handle(pattern, limit(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		return nil // call the rate-limited API; stop when ctx is done
	})))
	for _, typ := range []string{"report:export", "report:export:eu"} {
		_, p := mux.Handler(asynq.NewTask(typ, nil))
		fmt.Printf("%-16s runs the %q handler, under its limit\n", typ, p)
	}
	// Output:
	// Limit alone refused: true
	// report:export    runs the "report:export" handler, under its limit
	// report:export:eu runs the "report:export" handler, under its limit
}
