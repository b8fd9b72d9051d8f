package cronguard

import (
	"context"
	"time"
)

type runKey struct{}

// runInfo is what a run's context tells the job.
type runInfo struct {
	name string
	tick time.Time
}

func infoFrom(ctx context.Context) *runInfo {
	ri, _ := ctx.Value(runKey{}).(*runInfo)
	return ri
}

// JobName returns the name of the guarded job whose run ctx belongs to (the
// context passed to a Func, or one derived from it), or "" if none.
// guard.TokenFrom(ctx, JobName(ctx)) returns the run's fencing token.
func JobName(ctx context.Context) string {
	if ri := infoFrom(ctx); ri != nil {
		return ri.name
	}
	return ""
}

// Tick returns the tick of the run ctx belongs to: the schedule activation
// the run was claimed for (see Spec), the same on every instance. The
// second result is false when ctx is not a run's context.
func Tick(ctx context.Context) (time.Time, bool) {
	if ri := infoFrom(ctx); ri != nil {
		return ri.tick, true
	}
	return time.Time{}, false
}
