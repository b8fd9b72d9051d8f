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
