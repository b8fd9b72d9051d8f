package measure

import (
	"time"

	"golang.org/x/sys/unix"
)

// ProcessCPU returns the user plus system CPU time this process (every
// thread, no children) has used, from getrusage(RUSAGE_SELF).
func ProcessCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ThreadSleeps returns how many times this process's threads have given
// up their CPU voluntarily (getrusage's ru_nvcsw, every thread): each is a
// thread that went to sleep, on a lock, a futex or a read, and that
// something woke or will wake again. Go's scheduler wakes an idle thread
// for a goroutine made ready while a P is idle, so a goroutine hand-off
// shows here, where its CPU is spread over the runtime.
func ThreadSleeps() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw
}
