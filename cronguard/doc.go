// Package cronguard runs a robfig/cron job on one instance of a fleet per
// tick, and never two runs of it at once, with a guard.Locker:
//
//	c := cron.New()
//	_, err := cronguard.Add(c, locker, "sync-invoices", "@every 5m", syncInvoices,
//		cronguard.Logger(logger))
//
// Every instance schedules the job as usual; the adapter decides at each
// activation whether this instance runs it.
//
// # One run per tick
//
// The tick of a run is the schedule activation it belongs to. The first
// instance to claim the job's name and tick in Redis (guard.Locker.Claim,
// SET NX) runs it; every other instance skips it, logged at Debug. The claim
// is never deleted: it expires after two periods of the schedule (at least
// 2s), so a fast job does not run again on an instance whose tick comes a
// little later. NoDedupe turns this off.
//
// How the tick is found: it is the schedule's latest activation at or
// before the time the run starts; for @every d it is the d-long bucket,
// counted from the Unix epoch, holding that time, because each instance
// starts an @every schedule at its own phase.
//
// # The schedule is written once
//
// A cron.Job cannot see the schedule cron runs it on, and the tick depends
// on it: "@every 2s" and "*/2 * * * * *" both fire on whole seconds, but
// the first fires at a different second on each instance and needs
// epoch-aligned buckets. So the job must be told its schedule, and a
// schedule written twice (once for cron, once for the job) can disagree.
// Add takes the spec once, parses it once (Parser, for a Cron made with
// cron.WithParser) and gives the same schedule to the Cron
// (cron.Cron.Schedule) and to the job, read in the Cron's location. Job,
// Func and Wrapper, for cron.AddJob and cron.Chain, refuse to be made
// without a Spec or Schedule (unless NoDedupe): guessing the tick would
// silently run an @every job on several instances per tick.
//
// # Wiring mistakes fail at once
//
// Add returns an error matching guard.ErrInvalid for a nil Cron, Locker or
// func, an empty name, a bad spec or option. Job, Func and Wrapper, which
// return no error as cron's own constructors of jobs do not, panic with
// that error, as regexp.MustCompile does: a wiring mistake stops the
// program when it starts, never becomes a job that quietly does not run.
// Validate returns the error without the panic.
//
// # Clock assumptions
//
// Each instance reads the tick on the clock cron fires by (time.Now), so a
// clock that is off shifts an instance's firings and its ticks together: a
// firing is named by the activation it was for, whatever the skew. Skew and
// late starts only spread the claims of one tick over time, and the claim
// outlives that spread while clocks are less than about one period apart.
// A run may start up to one period after its activation (a busy machine, a
// wrapper that delays it, such as cron.DelayIfStillRunning) and still get
// its own tick. Go timers do not fire early; only a wall clock stepped back
// while cron waited can start a run before its activation, which then
// takes the previous tick, normally already claimed, and skips.
//
// # No overlap
//
// A run holds the guard lease name while the job runs, renewed by the
// Locker's heartbeat, so a run longer than a period is never joined by
// another instance's next tick: that tick is skipped, logged at Info the
// first time and then at most once a minute per job, with the number of
// skips not logged ("repeated"), however often the job fires (Wait(d)
// waits for the running one instead). MinHold(d) keeps the lease for at
// least d (ShedLock's lockAtLeastFor). Permits(n) lets up to n runs
// overlap instead, each holding one of the lease's n permits: ticks still
// run once each, and a tick that finds n runs still going is skipped.
//
// # Choosing a TTL
//
// The lease's TTL (TTL, or the Locker's guard.WithTTL, default 30s) is how
// long an instance that crashes mid-run keeps the job from running
// anywhere: every tick in that time is skipped as still running. A live
// run renews its lease, so a run may last far longer than the TTL; the TTL
// only has to outlast a pause of the process or a Redis hiccup (renewals
// start at a third of it). Pick it well under the period, so that a crash
// costs at most the next tick: for a job every minute, 10-30s; for one
// every few seconds, a few seconds; for daily jobs the default is fine.
//
// # The job's context
//
// A Func's context carries the job's name (JobName), its tick (Tick) and
// the fencing token of its lease (guard.TokenFrom(ctx, name)). It is
// canceled when the lease is lost, with a cause matching guard.ErrLeaseLost,
// and when the BaseContext is canceled (shutdown): then the lease is kept
// until the job returns. A panic in the job is recovered and logged at
// Error with its stack, and the lease is released. Errors the job returns
// and Redis errors are logged at Error; a lost lease at Warn, naming the
// job and its tick (the Locker's logger, if it has one, reports it at
// Error); a run that succeeded at Debug. An acquisition that fails for any reason but a holder that
// Redis reported (Redis unreachable, a timeout) is an error, never taken
// for contention.
package cronguard
