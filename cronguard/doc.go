// Package cronguard runs a robfig/cron job on one instance of a fleet per
// tick, and never two runs of it at once, with a guard.Locker:
//
//	c := cron.New()
//	c.AddJob("@every 5m", cronguard.Func(locker, "sync-invoices", syncInvoices,
//		cronguard.Spec("@every 5m"), cronguard.Logger(logger)))
//
// Every instance schedules the job as usual; the adapter decides at each
// activation whether this instance runs it.
//
// # One run per tick
//
// The tick of a run is the schedule activation it belongs to. The first
// instance to claim the job's name and tick in Redis (guard.Locker.Claim,
// SET NX) runs it; every other instance skips it, logged at Info. The claim
// is never deleted: it expires after two periods of the schedule (at least
// 2s; one minute without a Spec), so a fast job does not run again on an
// instance whose tick comes a little later. NoDedupe turns this off.
//
// How the tick is found: with a Spec, it is the schedule's latest
// activation at or before the time the run starts; for @every d it is the
// d-long bucket, counted from the Unix epoch, holding that time, because
// each instance starts an @every schedule at its own phase. Without a Spec
// it is the start time truncated to the second, right for any spec that
// fires on whole seconds (robfig/cron fires nothing more often); @every
// needs a Spec.
//
// # Clock assumptions
//
// Each instance reads the tick on the clock cron fires by (time.Now), so a
// clock that is off shifts an instance's firings and its ticks together: a
// firing is named by the activation it was for, whatever the skew. Skew and
// late starts only spread the claims of one tick over time, and the claim
// outlives that spread while clocks are less than about one period apart
// (a minute without a Spec). With a Spec, a run may start up to one period
// after its activation (a busy machine, a wrapper that delays it) and still
// get its own tick. Without a Spec the tick is the whole second the run
// starts in, so a run that starts a second or more late takes another tick
// and may run it again: give a Spec when runs can start late, as with
// cron.DelayIfStillRunning. Go timers do not fire early; only a wall clock stepped back
// while cron waited can start a run before its activation, which then
// takes the previous tick, normally already claimed, and skips.
//
// # No overlap
//
// A run holds the guard lease name while the job runs, renewed by the
// Locker's heartbeat, so a run longer than a period is never joined by
// another instance's next tick: that tick is skipped, logged at Info
// (Wait(d) waits for the running one instead). MinHold(d) keeps the lease
// for at least d (ShedLock's lockAtLeastFor).
//
// # The job's context
//
// A Func's context carries the job's name (JobName), its tick (Tick) and
// the fencing token of its lease (guard.TokenFrom(ctx, name)). It is
// canceled when the lease is lost, with a cause matching guard.ErrLeaseLost,
// and when the BaseContext is canceled (shutdown): then the lease is kept
// until the job returns. A panic in the job is recovered and logged at
// Error with its stack, and the lease is released. Errors the job returns,
// lost leases and Redis errors are logged at Error; successful runs log
// nothing.
//
// # Configuration errors
//
// Job, Func and Wrapper return no error, as cron's own constructors of jobs
// do not. With an invalid option, the returned job never runs the work and
// logs the error at Error on every tick. Validate returns the same error,
// to fail at startup.
package cronguard
