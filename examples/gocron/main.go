// Gocron runs three instances of one service, each with its own gocron v2
// scheduler, Redis client and guard.Locker, all scheduling the same jobs,
// and shows what gocronguard does with them: with the Locker on the
// schedulers, each second of a fast job runs on one instance; a job
// wrapped by Task that runs longer than its period is never joined by
// another instance, and a shutdown cancels its context; and a Task whose
// lease is lost mid-run is told to stop (a job guarded by the Locker alone
// would run on).
//
//	go run ./examples/gocron                                            # embedded Redis
//	REDIS_URL=redis://127.0.0.1:6379/15 go run ./examples/gocron        # a real one
//	go run ./examples/gocron -trace                                     # and print the spans
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jobguard/jobguard/examples/internal/exampleenv"
	"github.com/jobguard/jobguard/gocronguard"
	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

func main() { exampleenv.Main("gocron", run) }

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

	admin := dial() // an operator's client, for mischief in the last part
	defer admin.Close()
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

	p.Say("fleet", "--- report: every second, a 10ms job; the Locker is on every scheduler")
	if err := report(p, fleet); err != nil {
		return err
	}
	p.Say("fleet", "--- rebuild: a Task every second that takes 2.5s; then the fleet shuts down")
	if err := rebuild(p, fleet); err != nil {
		return err
	}
	p.Say("fleet", "--- ledger: a Task whose lease is lost while it runs")
	return ledger(ctx, p, fleet[2], admin)
}

// report puts the Locker on every instance's scheduler and schedules a fast
// job. Each second runs on the instance that claims it first; the others
// skip it, which the Locker logs at Debug.
func report(p *exampleenv.Printer, fleet []*instance) error {
	var schedulers []gocron.Scheduler
	defer func() { shutdown(schedulers) }()
	for _, in := range fleet {
		logger := storyLogger{p, in.name}
		s, err := gocron.NewScheduler(
			gocron.WithDistributedLocker(gocronguard.Locker(in.locker, gocronguard.Logger(logger.logger()))))
		if err != nil {
			return err
		}
		schedulers = append(schedulers, s)
		_, err = s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func() {
			p.Say(in.name, "report %s ran", clock(time.Now().Truncate(time.Second)))
			time.Sleep(10 * time.Millisecond)
		}), gocron.WithName("report"))
		if err != nil {
			return err
		}
	}
	for _, s := range schedulers {
		s.Start()
	}
	time.Sleep(3500 * time.Millisecond)
	return nil
}

// rebuild schedules, on every instance, a job that takes longer than its
// period, wrapped by Task. A run holds the job's lease, so the runs that
// come meanwhile are skipped on every instance. Then the fleet shuts down:
// gocron's Shutdown cancels the running job's context and waits for it to
// return, and the lease is released.
func rebuild(p *exampleenv.Printer, fleet []*instance) error {
	var schedulers []gocron.Scheduler
	defer func() { shutdown(schedulers) }()
	for _, in := range fleet {
		s, err := gocron.NewScheduler()
		if err != nil {
			return err
		}
		schedulers = append(schedulers, s)
		_, err = s.NewJob(gocron.CronJob("* * * * * *", true),
			gocronguard.Task(in.locker, "rebuild", func(ctx context.Context) error {
				tick, _ := gocronguard.Tick(ctx)
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
			}, gocronguard.Logger(storyLogger{p, in.name}.logger())),
			gocron.WithName("rebuild"))
		if err != nil {
			return err
		}
	}
	for _, s := range schedulers {
		s.Start()
	}
	time.Sleep(4200 * time.Millisecond)
	p.Say("fleet", "shutting down")
	return nil // the deferred shutdown
}

// ledger runs a Task on one instance and deletes its lease behind its
// back, as an expiry during a long outage would leave it. The next renewal
// finds the lease gone and cancels the job's context, with a cause
// matching guard.ErrLeaseLost: the job stops. With the Locker alone, gocron
// would have given the job its own context, and it would have run on.
func ledger(ctx context.Context, p *exampleenv.Printer, in *instance, admin *redis.Client) error {
	s, err := gocron.NewScheduler()
	if err != nil {
		return err
	}
	defer shutdown([]gocron.Scheduler{s})
	stopped := make(chan error, 1)
	_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
		gocronguard.Task(in.locker, "ledger", func(ctx context.Context) error {
			token, _ := guard.TokenFrom(ctx, "ledger")
			p.Say(in.name, "ledger started (fencing token %d)", token)
			lockKey := "guard:{ledger}" // guard's default prefix, then the key in a Cluster hash tag
			if err := admin.Del(ctx, lockKey).Err(); err != nil {
				stopped <- err
				return err
			}
			p.Say("admin", "deleted %s", lockKey)
			select { // a real job checks ctx between steps of its work
			case <-ctx.Done():
				p.Say(in.name, "ledger told to stop: %v", context.Cause(ctx))
				stopped <- nil
				return ctx.Err()
			case <-time.After(5 * time.Second):
				stopped <- errors.New("the lost lease went unnoticed")
				return nil
			}
		}, gocronguard.TTL(time.Second), gocronguard.Logger(storyLogger{p, in.name}.logger())),
		gocron.WithName("ledger"))
	if err != nil {
		return err
	}
	s.Start()
	select {
	case err = <-stopped:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdown shuts the schedulers down at once, each waiting for its
// running jobs.
func shutdown(schedulers []gocron.Scheduler) {
	var wg sync.WaitGroup
	for _, s := range schedulers {
		wg.Go(func() { _ = s.Shutdown() })
	}
	wg.Wait()
}

// storyLogger is the gocron.Logger of one instance's guards: it tells the
// story of skipped runs, lost leases and errors.
type storyLogger struct {
	p    *exampleenv.Printer
	name string
}

// logger returns a *slog.Logger that tells l's story at every level.
func (l storyLogger) logger() *slog.Logger { return slog.New(l) }

func (storyLogger) Enabled(context.Context, slog.Level) bool { return true }
func (l storyLogger) WithAttrs([]slog.Attr) slog.Handler     { return l }
func (l storyLogger) WithGroup(string) slog.Handler          { return l }

func (l storyLogger) Handle(_ context.Context, r slog.Record) error {
	f := make(map[string]any)
	r.Attrs(func(a slog.Attr) bool {
		f[a.Key] = a.Value.Any()
		return true
	})
	switch r.Message {
	case "gocronguard: ran": // the job has said so itself
	case "gocronguard: skip":
		l.p.Say(l.name, "%s %s skipped: %v", f["job"], clock(f["tick"]), f["reason"])
	case "gocronguard: lease lost during the run":
		l.p.Say(l.name, "%s %s: lease lost", f["job"], clock(f["tick"]))
	default:
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
