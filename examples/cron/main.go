// Cron runs three instances of one service, each with its own cron.Cron,
// Redis client and guard.Locker, all scheduling the same jobs, and shows
// what cronguard does with them: each tick of a fast job runs on one
// instance (also when one instance fires 300ms late), a job that runs
// longer than its period is never joined by another instance, and a
// shutdown cancels the running job's context.
//
//	go run ./examples/cron                                            # embedded Redis
//	REDIS_URL=redis://127.0.0.1:6379/15 go run ./examples/cron        # a real one
//	go run ./examples/cron -trace                                     # and print the spans
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jobguard/jobguard/cronguard"
	"github.com/jobguard/jobguard/examples/internal/exampleenv"
	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

func main() { exampleenv.Main("cron", run) }

// instance is one simulated process: its own Redis client and Locker.
type instance struct {
	name   string
	client *redis.Client
	locker *guard.Locker
}

// run tells the story on out; opts go to every instance's Locker.
func run(ctx context.Context, out io.Writer, opts ...guard.Option) error {
	dial, stopRedis, err := exampleenv.Connect()
	if err != nil {
		return err
	}
	defer stopRedis()
	p := exampleenv.NewPrinter(out)

	var fleet []*instance
	defer func() {
		for _, in := range fleet {
			in.locker.Close()
			in.client.Close()
		}
	}()
	for i := range 3 {
		c := dial()
		if err := c.Ping(ctx).Err(); err != nil {
			c.Close()
			return fmt.Errorf("redis: %w", err)
		}
		l, err := guard.New(c, opts...)
		if err != nil {
			c.Close()
			return err
		}
		fleet = append(fleet, &instance{name: fmt.Sprintf("instance-%d", i+1), client: c, locker: l})
	}

	p.Say("fleet", "--- report: every second, a 10ms job; instance-3 fires 300ms late")
	report(ctx, p, fleet)
	p.Say("fleet", "--- rebuild: every second, a 2.5s job; then the fleet shuts down")
	rebuild(ctx, p, fleet)
	return nil
}

// report schedules a fast job on every instance. Each tick runs on the
// instance that claims it first; the others skip it, also instance-3, whose
// runs start 300ms after its cron fires them, but name the same tick.
func report(ctx context.Context, p *exampleenv.Printer, fleet []*instance) {
	const spec = "* * * * * *"
	crons := make([]*cron.Cron, len(fleet))
	for i, in := range fleet {
		var job cron.Job = cronguard.Func(in.locker, "report", func(ctx context.Context) error {
			tick, _ := cronguard.Tick(ctx)
			token, _ := guard.TokenFrom(ctx, "report")
			p.Say(in.name, "report %s ran (fencing token %d)", clock(tick), token)
			time.Sleep(10 * time.Millisecond)
			return nil
		}, cronguard.Spec(spec), cronguard.Logger(slog.New(storyLogger{p, in.name})), cronguard.BaseContext(ctx))
		if i == 2 {
			job = late(job, 300*time.Millisecond)
		}
		crons[i] = start(spec, job)
	}
	time.Sleep(3500 * time.Millisecond)
	stop(crons)
}

// rebuild schedules a job that takes longer than its period. The run holds
// the job's lease, so the ticks that come meanwhile are skipped on every
// instance. Then the fleet shuts down: canceling the base context cancels
// the running job's context, and cron's Stop waits for it to return.
func rebuild(ctx context.Context, p *exampleenv.Printer, fleet []*instance) {
	const spec = "* * * * * *"
	base, shutdown := context.WithCancel(ctx)
	defer shutdown()
	crons := make([]*cron.Cron, len(fleet))
	for i, in := range fleet {
		// Add writes the schedule once, for the Cron and for the tick.
		c := cron.New(cron.WithSeconds())
		_, err := cronguard.Add(c, in.locker, "rebuild", spec, func(ctx context.Context) error {
			tick, _ := cronguard.Tick(ctx)
			token, _ := guard.TokenFrom(ctx, "rebuild")
			p.Say(in.name, "rebuild %s started (fencing token %d)", clock(tick), token)
			select {
			case <-time.After(2500 * time.Millisecond):
				p.Say(in.name, "rebuild %s done", clock(tick))
				return nil
			case <-ctx.Done():
				p.Say(in.name, "rebuild %s told to stop: %v", clock(tick), context.Cause(ctx))
				return ctx.Err()
			}
		}, cronguard.Logger(slog.New(storyLogger{p, in.name})), cronguard.BaseContext(base))
		if err != nil {
			panic(err) // the spec and options above are constants
		}
		c.Start()
		crons[i] = c
	}
	time.Sleep(4200 * time.Millisecond)
	p.Say("fleet", "shutting down")
	shutdown()
	stop(crons)
}

// start starts a cron.Cron with seconds that runs job on spec.
func start(spec string, job cron.Job) *cron.Cron {
	c := cron.New(cron.WithSeconds())
	if _, err := c.AddJob(spec, job); err != nil {
		panic(err) // the specs above are constants
	}
	c.Start()
	return c
}

// stop stops the crons and waits for their running jobs.
func stop(crons []*cron.Cron) {
	var wg sync.WaitGroup
	for _, c := range crons {
		wg.Go(func() { <-c.Stop().Done() })
	}
	wg.Wait()
}

// late starts each run of job d after cron fires it, as on a busy machine.
func late(job cron.Job, d time.Duration) cron.Job {
	return cron.FuncJob(func() {
		time.Sleep(d)
		job.Run()
	})
}

// storyLogger is the slog.Handler of one instance's logger: it tells the
// story of skipped ticks and errors, at every level.
type storyLogger struct {
	p    *exampleenv.Printer
	name string
}

func (storyLogger) Enabled(context.Context, slog.Level) bool { return true }
func (l storyLogger) WithAttrs([]slog.Attr) slog.Handler     { return l }
func (l storyLogger) WithGroup(string) slog.Handler          { return l }

func (l storyLogger) Handle(_ context.Context, r slog.Record) error {
	f := make(map[string]any)
	r.Attrs(func(a slog.Attr) bool {
		f[a.Key] = a.Value.Any()
		return true
	})
	switch {
	case r.Message == "cronguard: skip":
		l.p.Say(l.name, "%s %s skipped: %v", f["job"], clock(f["tick"]), f["reason"])
	case r.Message == "cronguard: job stopped":
		l.p.Say(l.name, "%s %s stopped: %v", f["job"], clock(f["tick"]), f["reason"])
	case r.Level >= slog.LevelError:
		l.p.Say(l.name, "%s %s: %s: %v", f["job"], clock(f["tick"]), r.Message, f["err"])
	}
	return nil
}

// clock formats a tick as "tick 15:04:05".
func clock(v any) string {
	t, ok := v.(time.Time)
	if !ok {
		return "tick ?"
	}
	return "tick " + t.Format(time.TimeOnly)
}
