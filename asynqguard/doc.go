// Package asynqguard runs github.com/hibiken/asynq task handlers under a
// guard lease, so that at most one handler per key (or, with Limit, at most
// n per handler) runs at a time across every server of a fleet.
//
//	locker, err := guard.New(redisClient)
//	...
//	srv := asynq.NewServer(redisOpt, asynq.Config{
//		IsFailure:      asynqguard.IsFailure,  // a busy key spends no retry
//		RetryDelayFunc: asynqguard.RetryDelay, // and is retried soon
//	})
//	mux := asynq.NewServeMux()
//	mux.Use(asynqguard.Middleware(locker))
//
// # Keys
//
// By default a task's key is its type and the SHA-256 of its payload, so
// identical tasks exclude each other and all others run in parallel.
// KeyFunc derives it otherwise, for example from an order id in the
// payload. Metrics are reported under the task type (guard.Name), traces
// carry the messaging attributes of the queue and task id.
//
// # At most n at a time
//
// asynq's Concurrency bounds the handlers of one server; Limit(n) bounds
// the tasks of one key across the whole fleet. Each running task holds one
// of the key's n permits (guard.Permits). A task that finds all n taken
// waits for one in its worker, in line: a release grants the permit to the
// task that has waited longest, which starts at once. The wait is bounded,
// by default by 10s or a tenth of the time left before the task's
// deadline, whichever is less (WaitFor sets it; WaitFor(0) does not
// wait); a task still busy then is handled as below. So a backlog of a
// limited handler drains at the pace its permits free, not at the pace of
// asynq's retry set, at the price of workers held while they wait: on a
// server that also runs other handlers, give the limited one a queue or
// server of its own, or a shorter WaitFor. Give each handler its own limit
// with a middleware around it, and pass the pattern it is registered
// under:
//
//	mux.Handle("report:export", asynqguard.Middleware(locker,
//		asynqguard.Limit(2), asynqguard.Pattern("report:export"))(exportHandler))
//
// The key is then the pattern, so a fleet of any size runs at most n tasks
// of the handler at once, whatever their type: asynq's ServeMux routes
// every type that starts with the pattern to the handler, so
// "report:export:1" runs it as well as "report:export", and a limit per
// task type would let one task of each such type run at once. New refuses
// Limit without Pattern or KeyFunc for that reason. With KeyFunc instead
// of Pattern, n tasks of each key it returns run at once (for example n
// per tenant). Without Limit, Pattern does not change the key: a task's
// key names that task, not its handler.
//
// # Busy keys
//
// By default a task whose key is held elsewhere fails with an error
// matching ErrBusy, and asynq retries it. The error also carries Redis's
// answer about the holder: guard.HeldFor(err) is its remaining lease time.
// With IsFailure and RetryDelay in asynq.Config, the retry comes after that
// time, at most 4s, plus 0.5-1.5s of jitter (plus the
// DelayedTaskCheckInterval), and does not count against MaxRetry nor as a
// failure in the queue statistics; without them asynq retries on its own
// back-off and counts each busy attempt. Either way no task is dropped
// silently. Skip, Revoke and Archive drop, delete or archive the duplicate
// instead; WaitFor waits for the key first, and starts the moment it is
// released (under Limit the Retry policy waits by default, see above). An asynq.ErrorHandler sees busy errors too: filter them with
// errors.Is(err, asynqguard.ErrBusy).
//
// Busy retries of one key are logged at Info once a minute, not at every
// attempt (the line carries lock_key, held_for and "repeated", the attempts
// not logged since); the middleware remembers the last 1024 busy keys for
// this. The tasks Skip, Revoke and Archive drop, and those DoneTTL skips,
// are logged the same way: at Info the first time for a key and then at
// most once a minute, at Debug otherwise.
//
// An acquisition that fails for any other reason (Redis unreachable, the
// Locker closed, the task's context done) is not a busy key: the error is
// returned as it is, asynq counts it as a failure and retries it on its own
// back-off.
//
// # Choosing a TTL
//
// The lease TTL (TTL, or the Locker's guard.WithTTL, default 30s) is how
// long a server that crashes mid-task keeps that task's key busy: its
// duplicates and its own retry wait that long. A live handler renews its
// lease, so a handler may run far longer than the TTL; the TTL only has to
// outlast a pause of the process or a Redis hiccup. Shorter TTLs free a
// crashed key sooner and cost more renewals: 10-30s suits most tasks.
//
// # Cancellation
//
// A lost lease cancels the handler's context; the task fails and asynq
// retries it. When asynq cancels the handler (Timeout, Deadline, shutdown
// past ShutdownTimeout) it requeues or retries the task at once, without
// waiting for the handler: the lease is kept until the handler returns, so
// the new copy finds the key busy. Close the Locker only after the handlers
// have returned, or their keys are freed while they still run.
//
// # Wiring mistakes
//
// Middleware panics, with an error matching guard.ErrInvalid, on a nil
// Locker or an invalid option, and the middleware it returns panics when
// applied to a nil handler: a wiring mistake stops the server when it is
// set up. New returns the error instead.
//
// # Done records
//
// DoneTTL records each key whose handler succeeded, for a while, and skips a
// task with that key in that time: a duplicate enqueued after the work was
// done is dropped. This is best effort: the record is written after the
// handler returns, so a crash in between runs the work again.
package asynqguard
