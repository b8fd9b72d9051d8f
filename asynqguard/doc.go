// Package asynqguard runs github.com/hibiken/asynq task handlers under a
// guard lease, so that at most one handler per key runs at a time across
// every server of a fleet.
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
// # Busy keys
//
// By default a task whose key is held elsewhere fails with an error
// matching ErrBusy, and asynq retries it. With IsFailure and RetryDelay in
// asynq.Config, the retry comes within about a second (plus the
// DelayedTaskCheckInterval) and does not count against MaxRetry nor as a
// failure in the queue statistics; without them asynq retries on its own
// back-off and counts each busy attempt. Either way no task is dropped
// silently. Skip, Revoke and Archive drop, delete or archive the duplicate
// instead; WaitFor waits for the key first. An asynq.ErrorHandler sees busy
// errors too: filter them with errors.Is(err, asynqguard.ErrBusy).
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
// # Done records
//
// DoneTTL records each key whose handler succeeded, for a while, and skips a
// task with that key in that time: a duplicate enqueued after the work was
// done is dropped. This is best effort: the record is written after the
// handler returns, so a crash in between runs the work again.
package asynqguard
