package observe_test

import (
	"context"
	"fmt"
	"log"
	"sync"

	"github.com/alicebob/miniredis/v2"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/guard/observe"
	"github.com/redis/go-redis/v9"
)

// runLog is an Observer that records how each run ended, as a metrics
// exporter other than OpenTelemetry would.
type runLog struct {
	mu   sync.Mutex
	runs []string
}

func (r *runLog) Begin(ctx context.Context, _ observe.Phase, _ observe.Info) context.Context {
	return ctx
}

func (r *runLog) End(_ context.Context, phase observe.Phase, info observe.Info) {
	if phase != observe.Run {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, fmt.Sprintf("%s: %s", info.Name, info.Result))
}

func (r *runLog) Event(context.Context, observe.Event, observe.Info) {}

func Example() {
	m, err := miniredis.Run() // use your own Redis client
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()

	runs := &runLog{}
	locker, err := guard.New(client, guard.WithObserver(runs))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	_ = locker.WithLock(ctx, "invoice-42", func(context.Context) error { return nil }, guard.Name("invoice"))
	le, err := locker.Acquire(ctx, "invoice-43")
	if err != nil {
		log.Fatal(err)
	}
	_ = locker.WithLock(ctx, "invoice-43", func(context.Context) error { return nil }, guard.Name("invoice"), guard.Wait(0))
	_ = le.Release(ctx)

	for _, run := range runs.runs {
		fmt.Println(run)
	}
	// Output:
	// invoice: released
	// invoice: busy
}
