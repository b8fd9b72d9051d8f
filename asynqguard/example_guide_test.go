package asynqguard_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

// guideClient returns a client on an embedded Redis, so the example runs
// anywhere; use your own redis.NewClient (or a Sentinel or Cluster client).
func guideClient() (*redis.Client, func()) {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return client, func() { client.Close(); m.Close() }
}

// A duplicate of a task that is still running finds its key busy: with the
// two asynq.Config hooks it is retried soon and spends no retry.
func ExampleMiddleware_duplicate() {
	client, stop := guideClient() //docs:hide
	defer stop()                  //docs:hide
	locker, err := guard.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close() // after srv.Shutdown: running handlers keep their leases

	cfg := asynq.Config{ // for asynq.NewServer(redisOpt, cfg)
		IsFailure:      asynqguard.IsFailure,  // a busy key spends no retry
		RetryDelayFunc: asynqguard.RetryDelay, // and is retried when the holder's lease would end, 5.5s at most
	}
	mux := asynq.NewServeMux()
	mux.Use(asynqguard.Middleware(locker))
	mux.HandleFunc("email:welcome", func(ctx context.Context, t *asynq.Task) error {
		// The same task, delivered again while this one runs:
		err := mux.ProcessTask(context.Background(), asynq.NewTask(t.Type(), t.Payload()))
		fmt.Println("duplicate busy:", errors.Is(err, asynqguard.ErrBusy), "failure:", cfg.IsFailure(err))
		return nil // send the email; stop when ctx is done
	})
	err = mux.ProcessTask(context.Background(), asynq.NewTask("email:welcome", []byte(`{"user":42}`)))
	fmt.Println("first:", err)
	// Output:
	// duplicate busy: true failure: false
	// first: <nil>
}
