package asynqguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/throttle"
)

// doneTimeout bounds storing the done record after the handler succeeded,
// also when the handler's context is already done.
const doneTimeout = 5 * time.Second

// New returns asynq middleware that runs each task's handler while holding
// a write lease on the task's key (see KeyFunc) from l, so that tasks with
// equal keys never run at the same time on any server using the same Redis
// (or, with Limit(n), at most n of them).
// A task whose key is busy is handled as the busy policy says (Retry by
// default); under Limit it first waits for a permit, 10s at most by
// default (WaitFor). It validates every option and returns an error matching
// guard.ErrInvalid when one does not fit.
//
// The handler's context is canceled when the lease is lost (cause matching
// guard.ErrLeaseLost) and the task then fails with the handler's error
// joined with that cause, so asynq retries it. When asynq cancels the
// context (Timeout, Deadline, shutdown), the lease is kept and renewed until
// the handler returns, so a copy that asynq requeues meanwhile finds the key
// busy. Errors matching asynq.SkipRetry or asynq.RevokeTask from the handler
// are returned unchanged.
func New(l *guard.Locker, opts ...Option) (asynq.MiddlewareFunc, error) {
	if l == nil {
		return nil, invalid("nil Locker")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.ttlSet {
		if err := l.ValidateLockOptions(guard.TTL(cfg.ttl)); err != nil {
			return nil, fmt.Errorf("asynqguard: %w", err)
		}
	}
	m := &middleware{l: l, cfg: cfg, busy: throttle.New(throttle.Every, throttle.Keys)}
	return m.wrap, nil
}

// Middleware is New for options fixed in code, in the shape asynq's
// ServeMux.Use takes:
//
//	mux.Use(asynqguard.Middleware(locker))
//
// Like regexp.MustCompile it panics, with an error matching
// guard.ErrInvalid, when l is nil or an option is invalid: that is a
// programming error, found when the server is set up rather than by
// failing every task. Use New to get the error instead. The middleware it
// returns panics when applied to a nil handler.
func Middleware(l *guard.Locker, opts ...Option) asynq.MiddlewareFunc {
	mw, err := New(l, opts...)
	if err != nil {
		panic(err)
	}
	return mw
}

type middleware struct {
	l    *guard.Locker
	cfg  config
	busy *throttle.Throttle // busy attempts to log, per key
}

// wrap panics on a nil handler: that is a wiring mistake, found when the
// middleware is applied rather than by failing every task.
func (m *middleware) wrap(next asynq.Handler) asynq.Handler {
	if next == nil || isNilPointer(next) {
		panic(invalid("nil asynq.Handler"))
	}
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		return m.process(ctx, t, next)
	})
}

// process runs one task: it takes the lease on the task's key and runs the
// handler under it (run), or turns the failure to take it into the task's
// result (notRun).
func (m *middleware) process(ctx context.Context, t *asynq.Task, next asynq.Handler) error {
	key, err := m.cfg.key(ctx, t)
	if err != nil {
		return fmt.Errorf("asynqguard: key of %q task: %w", t.Type(), err)
	}
	id, _ := asynq.GetTaskID(ctx)
	queue, _ := asynq.GetQueueName(ctx)
	attrs := []slog.Attr{slog.String("task_type", t.Type()), slog.String("task_id", id), slog.String("queue", queue)}
	// The lock's name for observers (a metric attribute): the handler's
	// pattern when it is known, so that the types one handler runs
	// ("report:export:1", "report:export:2") do not each make a series.
	name := t.Type()
	if m.cfg.pattern != "" {
		name = m.cfg.pattern
	}
	opts := []guard.LockOption{
		guard.Name(name),
		guard.Attrs(
			slog.String("messaging.system", "asynq"),
			slog.String("messaging.destination.name", queue),
			slog.String("messaging.message.id", id),
		),
	}
	if m.cfg.ttlSet {
		opts = append(opts, guard.TTL(m.cfg.ttl))
	}
	if m.cfg.fenceTTL > 0 {
		opts = append(opts, guard.FenceTTL(m.cfg.fenceTTL))
	}
	if m.cfg.limit > 1 {
		opts = append(opts, guard.Permits(m.cfg.limit))
	}
	// Asynq archives a task with no retry left whatever the error, so under
	// Retry such a task waits for the key (until its context ends) instead.
	if m.cfg.policy != policyRetry || !lastAttempt(ctx) {
		opts = append(opts, guard.Wait(m.waitBefore(ctx)))
	}
	ran := false
	err = m.l.WithLock(throttle.CallerLogs(ctx, key), key, func(ctx context.Context) error {
		ran = true
		return m.run(ctx, t, key, id, next, attrs)
	}, opts...)
	if ran {
		switch {
		case errors.Is(err, guard.ErrLeaseLost):
			m.log(ctx, slog.LevelWarn, "asynqguard: lease lost while the handler ran; the task fails", attrs, "err", err)
		case err == nil:
			m.log(ctx, slog.LevelDebug, "asynqguard: ran", attrs)
		}
		return err
	}
	return m.notRun(ctx, key, err, attrs)
}

// waitBefore is the task's wait budget for a busy key (config.waitBudget).
func (m *middleware) waitBefore(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	return m.cfg.waitBudget(time.Now(), dl, ok)
}

// lastAttempt reports whether asynq would archive the task on any error.
func lastAttempt(ctx context.Context) bool {
	retried, ok1 := asynq.GetRetryCount(ctx)
	maxRetry, ok2 := asynq.GetMaxRetry(ctx)
	return ok1 && ok2 && retried >= maxRetry
}

// run runs the handler under the lease, with the done record around it.
func (m *middleware) run(ctx context.Context, t *asynq.Task, key, id string, next asynq.Handler, attrs []slog.Attr) error {
	if m.cfg.doneSet {
		by, done, err := m.l.Claimed(ctx, key)
		if err != nil {
			return fmt.Errorf("asynqguard: read done record: %w", err)
		}
		if done {
			m.logRepeated(ctx, key, "asynqguard: skipped duplicate: already done", attrs, "done_by", string(by))
			return nil
		}
	}
	if err := next.ProcessTask(ctx, t); err != nil || !m.cfg.doneSet {
		return err
	}
	if ctx.Err() != nil {
		// The handler returned nil after its context ended (lease lost,
		// asynq's timeout): it may have stopped half way, so the task is not
		// recorded as done and a retry runs it.
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), doneTimeout)
	defer cancel()
	if _, err := m.l.Claim(cctx, key, []byte(id), m.cfg.doneTTL); err != nil {
		m.log(ctx, slog.LevelWarn, "asynqguard: done record not stored; a duplicate may run again", attrs, "err", err)
	}
	return nil
}

// notRun turns the error of an acquisition that failed into the task's
// result.
func (m *middleware) notRun(ctx context.Context, key string, err error, attrs []slog.Attr) error {
	switch {
	case errors.Is(err, guard.ErrInvalid):
		// A bad key or TTL: retrying cannot help; archive the task.
		return fmt.Errorf("asynqguard: %w: %w", err, asynq.SkipRetry)
	case ctx.Err() != nil || !errors.Is(err, guard.ErrNotAcquired):
		return err // Redis unreachable, Locker closed, task canceled: asynq retries
	}
	busy := &busyError{err}
	switch m.cfg.policy {
	case policySkip:
		m.logRepeated(ctx, key, "asynqguard: skipped duplicate: key busy", attrs)
		return nil
	case policyRevoke:
		m.logRepeated(ctx, key, "asynqguard: revoked duplicate: key busy", attrs)
		return fmt.Errorf("%w: %w", busy, asynq.RevokeTask)
	case policyArchive:
		m.logRepeated(ctx, key, "asynqguard: archived duplicate: key busy", attrs)
		return fmt.Errorf("%w: %w", busy, asynq.SkipRetry)
	default:
		var args []any
		if held, ok := guard.HeldFor(err); ok {
			args = append(args, "held_for", held)
		}
		m.logRepeated(ctx, key, "asynqguard: key busy; retry later", attrs, args...)
		return busy
	}
}

// logRepeated logs a task not run because its key is busy or done: the
// duplicates of a task, and the retries of one, repeat it, so it is logged
// at Info the first time for key and then at most once a minute, with the
// count of those not logged, at Debug otherwise.
func (m *middleware) logRepeated(ctx context.Context, key, msg string, attrs []slog.Attr, args ...any) {
	ok, repeated := m.busy.Allow(key, time.Now())
	if !ok {
		m.log(ctx, slog.LevelDebug, msg, attrs, append(args, "lock_key", key)...)
		return
	}
	args = append(args, "lock_key", key)
	if repeated > 0 {
		args = append(args, "repeated", repeated)
	}
	m.log(ctx, slog.LevelInfo, msg, attrs, args...)
}

func (m *middleware) log(ctx context.Context, level slog.Level, msg string, attrs []slog.Attr, args ...any) {
	if !m.cfg.logger.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.AddAttrs(attrs...)
	r.Add(args...)
	_ = m.cfg.logger.Handler().Handle(ctx, r)
}

// isNilPointer reports whether v is an interface holding a nil pointer or
// func, such as a nil asynq.HandlerFunc.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
