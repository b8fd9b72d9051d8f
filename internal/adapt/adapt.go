// Package adapt holds what guard's adapters (cronguard, gocronguard,
// asynqguard, httpguard) all do, once: configuration errors that match
// guard.ErrInvalid, and the epoch-aligned buckets scheduled runs are named
// by. Contention logging is package throttle's, which guard shares.
package adapt

import (
	"fmt"
	"time"

	"github.com/jobguard/jobguard/guard"
)

// InvalidError is an adapter's configuration error: it matches
// guard.ErrInvalid and its cause, if any.
type InvalidError struct {
	Pkg   string // the adapter, "cronguard" say
	What  string // what is wrong: the option or argument, as the caller wrote it
	Cause error  // why, if there is more to say; nil when What says it
}

// Invalid returns an InvalidError of package pkg.
func Invalid(pkg, what string, cause error) error {
	return &InvalidError{Pkg: pkg, What: what, Cause: cause}
}

// Invalidf returns an InvalidError of package pkg whose What is formatted.
func Invalidf(pkg, format string, args ...any) error {
	return &InvalidError{Pkg: pkg, What: fmt.Sprintf(format, args...)}
}

func (e *InvalidError) Error() string {
	if e.Cause == nil {
		return e.Pkg + ": invalid configuration: " + e.What
	}
	return e.Pkg + ": invalid configuration: " + e.What + ": " + e.Cause.Error()
}

// Unwrap returns guard.ErrInvalid and the cause.
func (e *InvalidError) Unwrap() []error {
	if e.Cause == nil {
		return []error{guard.ErrInvalid}
	}
	return []error{guard.ErrInvalid, e.Cause}
}

// Bucket returns the start of the d-long bucket, counted from the Unix
// epoch, that holds t. Instances that start a periodic job at different
// moments agree on buckets.
func Bucket(t time.Time, d time.Duration) time.Time {
	if d%time.Second == 0 { // whole seconds: no overflow in any year
		sec, ds := t.Unix(), int64(d/time.Second)
		return time.Unix(sec-mod(sec, ds), 0).In(t.Location())
	}
	ns := t.UnixNano()
	return time.Unix(0, ns-mod(ns, int64(d))).In(t.Location())
}

// mod is the non-negative remainder of a / b, for b > 0.
func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}
