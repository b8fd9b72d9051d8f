package asynqguard

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
)

// ErrBusy is wrapped by the error a task returns when another task with the
// same key holds the lock (with guard.ErrNotAcquired, and asynq.RevokeTask
// or asynq.SkipRetry under Revoke or Archive). Match it with errors.Is, for
// example to keep busy tasks out of an asynq.ErrorHandler that reports
// errors.
var ErrBusy = errors.New("asynqguard: key busy")

// Bounds of the delay RetryDelay gives a busy task.
const (
	busyDelayMin    = 500 * time.Millisecond
	busyDelayJitter = time.Second
)

// IsFailure reports whether err is a failure for asynq: any non-nil error
// but a busy one. Set it as asynq.Config.IsFailure, so that a task retried
// because its key was busy keeps its retry count and is not counted as
// failed in the queue's statistics. A different predicate composes as
//
//	IsFailure: func(err error) bool { return asynqguard.IsFailure(err) && mine(err) }
func IsFailure(err error) bool {
	return err != nil && !errors.Is(err, ErrBusy)
}

// RetryDelay is an asynq.RetryDelayFunc: for a busy task a random delay in
// [500ms, 1.5s), so duplicates spread out rather than retry in step, and
// asynq.DefaultRetryDelayFunc for any other error. Set it as
// asynq.Config.RetryDelayFunc. Asynq rounds retry times down to whole
// seconds and moves due retries to pending every
// Config.DelayedTaskCheckInterval (default 5s), so a busy task runs again
// within about a second plus that interval.
func RetryDelay(n int, err error, t *asynq.Task) time.Duration {
	if errors.Is(err, ErrBusy) {
		return busyDelayMin + rand.N(busyDelayJitter)
	}
	return asynq.DefaultRetryDelayFunc(n, err, t)
}
