package tracing_test

import (
	"context"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/tracing"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func Example() {
	m, err := miniredis.Run() // an embedded Redis for the example
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()

	// In a service: tracing.New() with the global providers, or pass yours.
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	locker, err := guard.New(client, guard.WithObserver(tracing.New(tracing.WithTracerProvider(tp))))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	_ = locker.WithLock(context.Background(), "nightly-report", func(ctx context.Context) error {
		return nil // spans started from ctx are children of jobguard.run
	})
	for _, s := range spans.Ended() {
		fmt.Println(s.Name())
	}
	// Output:
	// jobguard.lock.acquire
	// jobguard.lock.release
	// jobguard.run
}
