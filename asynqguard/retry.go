package asynqguard

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/guard"
)

// ErrBusy is wrapped by the error a task returns when another task with the
// same key holds the lock (with guard.ErrNotAcquired, and asynq.RevokeTask
// or asynq.SkipRetry under Revoke or Archive). Match it with errors.Is, for
// example to keep busy tasks out of an asynq.ErrorHandler that reports
// errors.
var ErrBusy = errors.New("asynqguard: key busy")

// busyError is a task's busy error: guard's, which says the key, that it
// is busy and for how long, matching ErrBusy too.
type busyError struct{ err error }

func (e *busyError) Error() string   { return e.err.Error() }
func (e *busyError) Unwrap() []error { return []error{ErrBusy, e.err} }

// The delay RetryDelay gives a busy task: the holder's remaining lease
// time, at most busyWaitMax, plus a jitter in [busyDelayMin,
// busyDelayMin+busyDelayJitter).
const (
	busyDelayMin    = 500 * time.Millisecond
	busyDelayJitter = time.Second
	busyWaitMax     = 4 * time.Second
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

// RetryDelay is an asynq.RetryDelayFunc: for a busy task, a delay from
// what Redis said about the holder, and asynq.DefaultRetryDelayFunc for any
// other error. Set it as asynq.Config.RetryDelayFunc.
//
// The busy error carries the holder's remaining lease time (guard.HeldFor).
// A crashed holder frees the key exactly then; a live one renews and keeps
// it as long as its handler runs, which may be a second or an hour. So the
// delay is that remaining time, but at most 4s, plus a random 0.5-1.5s so
// that duplicates spread out rather than retry in step: a duplicate of a
// short live task runs within about 5.5s, and the key of a crashed holder
// (30s with guard's default TTL) is tried every 4.5-5.5s rather than every
// second, then once just after its lease ends. Without that answer the
// delay is 0.5-1.5s. Use WaitFor(d) instead when a duplicate must start
// the moment the key frees.
//
// Asynq rounds retry times down to whole seconds and moves due retries to
// pending every Config.DelayedTaskCheckInterval (default 5s), which adds
// to the delay; set that lower for a faster turnaround.
func RetryDelay(n int, err error, t *asynq.Task) time.Duration {
	if errors.Is(err, ErrBusy) {
		held, _ := guard.HeldFor(err) // 0 when Redis gave no answer
		return min(max(held, 0), busyWaitMax) + busyDelayMin + rand.N(busyDelayJitter)
	}
	return asynq.DefaultRetryDelayFunc(n, err, t)
}
