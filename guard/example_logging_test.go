package guard_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

// redisLogger gives go-redis's own log lines (a failed dial, a Cluster
// reload), which guard's logger never sees, to a *slog.Logger at Warn.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...), "source", "go-redis")
}

// withoutTime leaves the time out of the example's log lines, so that its
// output can be checked.
func withoutTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}

// One *slog.Logger for guard and for go-redis. guard logs success at Debug,
// a busy key at Info the first time and then at most once a minute per key,
// and a lost lease at Error; go-redis has one logger for the whole process,
// set with redis.SetLogger (logging.Disable() silences it).
func ExampleWithLogger() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	defer logging.Enable()          //docs:hide

	// (The output below leaves out time=.)
	logger := slog.New(slog.NewTextHandler(os.Stdout, nil))
	logger = slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: withoutTime})) //docs:hide
	redis.SetLogger(redisLogger{logger})

	holder, _ := guard.New(client, guard.WithLogger(logger))
	defer holder.Close()
	other, _ := guard.New(client, guard.WithLogger(logger))
	defer other.Close()

	ctx := context.Background()
	lease, _ := holder.Acquire(ctx, "nightly-report")
	for range 3 { // three runs find the key busy: one line
		_ = other.WithLock(ctx, "nightly-report", func(context.Context) error { return nil }, guard.Wait(0))
	}
	_ = lease.Release(ctx)
	// Output:
	// level=INFO msg="guard: lock busy" key=nightly-report
}
