// Package gocronguard runs a go-co-op/gocron (v2) job on one instance of a
// fleet per tick, and never two runs of it at once, with a guard.Locker.
// Every instance schedules the same jobs as usual; the adapter decides at
// each run whether this instance runs it. There are two ways to wire it.
//
// A Locker guards every job of a scheduler with one line:
//
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(gocronguard.Locker(locker)))
//
// A Task guards one job and hands it the lease's context:
//
//	_, err = s.NewJob(gocron.DurationJob(5*time.Minute),
//		gocronguard.Task(locker, "sync-invoices", func(ctx context.Context) error {
//			token, _ := guard.TokenFrom(ctx, "sync-invoices")
//			return syncInvoices(ctx, token) // ctx ends on lease loss or shutdown
//		}, gocronguard.Window(5*time.Minute)),
//		gocron.WithName("sync-invoices"), gocron.WithDisabledDistributedJobLocker(true))
//
// # Which to pick
//
// Both give a run of a job the same lease, renewed while the job runs, and
// the same once-per-tick rule. They differ in what the job learns. gocron
// calls a Locker's Lock before the run and its Unlock after, and hands the
// job a context of its own that the Locker cannot reach: if the lease is
// lost during a run (Redis unreachable for longer than the TTL, its
// key deleted by hand), a Locker can log it, but the job runs on, and
// another instance may start the job meanwhile. A Task runs the job in the
// lease's context, which is canceled before the lease could end, and
// carries the fencing token for the resource the job writes to.
//
// Pick Task for a job that writes anything a second, overlapping run would
// harm, or that can run longer than a Redis outage lasts: it is the only
// way the job can stop in time and fence its writes. Pick Locker to guard
// every job of a scheduler at once, for jobs that are short, idempotent,
// or take no context. They mix: a Locker on the scheduler and Tasks for the
// jobs that need them (with gocron.WithDisabledDistributedJobLocker(true)
// on those, or they also hold the Locker's lease).
//
// # How gocron calls a Locker
//
// For each run, gocron calls Lock(ctx, name) with the job's context and
// its name (gocron.WithName, or else the name of the job's function; the
// same code gives the same name on every instance, but name your jobs: a
// renamed function otherwise changes the lease key). An error from Lock
// skips the run: gocron calls the job's AfterLockError listener with it,
// counts the run as skipped and waits for the next scheduled time; it does
// not retry. After the run, and after its AfterJobRuns listeners, gocron
// calls Unlock with the job's context and ignores its error. The same
// context, canceled on Shutdown, is what a job whose function takes a
// context.Context receives.
//
// # One run per tick
//
// A lock that is released when a short job returns lets the same
// scheduled time run again on an instance whose clock, or whose timer, is
// a few milliseconds behind: with a Locker that deletes its key on Unlock
// (gocron-redis-lock does), a fast job runs on many instances. So, as cronguard does, the first instance to claim the
// job's key and the run's tick in Redis (guard.Locker.Claim, SET NX) runs
// it, every other instance skips it (ErrTickClaimed), and the claim is
// not deleted when the run ends. NoDedupe turns this off.
//
// gocron tells the Locker the job's name and nothing about the run, so the
// tick cannot be the run's scheduled time: it is the Window (default 1s)
// that holds the moment the run asks for the lock, counted from the Unix
// epoch on this instance's clock. Each instance fires by its own clock and
// names the run by the same clock, so instances whose clocks disagree
// still name a run the same, as long as its scheduled time opens a window
// and the run asks for the lock before that window ends: for the default,
// within a second of its scheduled time. gocron asks within milliseconds;
// a run that waited in gocron's queue (singleton or limit mode
// LimitModeWait) asks later and may be taken for a new tick. A claim is
// kept for two windows and at least a minute, so clocks may be up to that
// far apart. A job that gocron fires at set times of day, which are whole
// seconds (CronJob, DailyJob, WeeklyJob, MonthlyJob, a OneTimeJob at a
// given time), needs no Window; a DurationJob does, since each instance
// starts it at its own moment: give it the job's duration, so that each
// period is one tick whatever the instances' phases (or start it on every
// instance at the same whole second, such as the next multiple of its
// duration, with gocron.WithStartAt, as gocron's Locker doc suggests). A
// run started at its own moment (gocron.WithStartImmediately, Job.RunNow,
// OneTimeJobStartImmediately) is a tick of its own on each instance. Two
// runs of one job must not share a window (a DurationJob shorter than a
// second, Job.RunNow just after a run): the second is skipped everywhere.
//
// Where this differs from cronguard: a robfig/cron job can be told its
// schedule (cronguard.Add), so cronguard names a run by its activation,
// and a run may start up to a period late; its claim is kept two periods.
// gocron keeps the schedule to itself and tells the Locker only the name,
// so gocronguard names a run by its window, and a run may start only as
// late as the rest of its window; its claim is kept at least a minute.
//
// # No overlap
//
// A run holds the guard lease on its job's key while the job runs,
// renewed by the Locker's heartbeat, so a run longer than the period is
// never joined by another instance's next run: that run is skipped
// (ErrBusy), logged at Info the first time and then at most once a minute
// per job. gocron's own singleton mode (gocron.WithSingletonMode) does the
// same for the runs of one instance. MinHold(d) keeps the lease for at
// least d (ShedLock's lockAtLeastFor).
//
// # Choosing a TTL
//
// The lease's TTL (TTL, or the Locker's guard.WithTTL, default 30s) is how
// long an instance that crashes mid-run keeps the job from running
// anywhere; a live run renews its lease and may run far longer. Keep it
// below the job's period when a skipped run matters: 10-30s for a job
// every minute, a few seconds for one every few seconds; the default suits
// hourly and daily jobs.
//
// # Shutdown
//
// gocron's Shutdown cancels the jobs' contexts and waits, up to
// gocron.WithStopTimeout (default 10s), for running jobs to return; Unlock
// then releases their leases, and a Task's run releases its own when fn
// returns. Close the guard.Locker after Shutdown has returned. A job still
// running when Shutdown gives up keeps its lease until it returns, or until
// the guard.Locker is closed (guard.Locker.Close keeps renewing while it
// waits for it, up to its close timeout).
//
// # Clock assumptions
//
// Those of guard (see its package doc) for the lease; for ticks, that the
// instances' clocks agree to within the claim's lifetime, and that a
// clock is not stepped back while gocron waits for a run, which could
// start the run in the window before its scheduled time. Fencing tokens
// (guard.TokenFrom in a Task's fn) protect the resource when a holder was
// paused past its lease; the lock alone cannot.
package gocronguard
