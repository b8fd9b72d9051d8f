package gocronguard

import (
	"context"
	"time"
)

type runKey struct{}

// runInfo is what a Task's run context tells the job.
type runInfo struct {
	tick time.Time
}

// Tick returns the tick of the Task run ctx belongs to (the context passed
// to a Task's fn, or one derived from it): the start of the Window the run
// was claimed for, the same on every instance. The second result is false
// when ctx is not a Task run's context.
func Tick(ctx context.Context) (time.Time, bool) {
	if ri, ok := ctx.Value(runKey{}).(*runInfo); ok {
		return ri.tick, true
	}
	return time.Time{}, false
}
