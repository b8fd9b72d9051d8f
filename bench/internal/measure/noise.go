package measure

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// slackTicks absorbs the rounding of the six tick counters a Watch reads,
// so that a short window does not look busy: 60ms of CPU, 0.02 cores over
// a 3s case.
const slackTicks = 6

// Watch tells how much CPU other processes used while a case ran: the
// machine's busy time (user, nice, system; not interrupts, which the case's
// own loopback traffic causes) less that of this process and of the case's
// redis-server. Steal time (a hypervisor running other guests) is reported
// on its own.
type Watch struct {
	pid          int
	start        time.Time
	busy, steal  int64
	self, server int64
}

// Noise is what a Watch saw, in cores: CPU seconds per wall-clock second.
type Noise struct {
	OthersCores float64 `json:"others_cores"` // CPU used by other processes
	StealCores  float64 `json:"steal_cores"`  // CPU taken by the hypervisor
	OwnCores    float64 `json:"own_cores"`    // CPU used by this process and the redis-server
}

// StartWatch starts watching; serverPid is the case's redis-server.
func StartWatch(serverPid int) *Watch {
	w := &Watch{pid: serverPid, start: time.Now()}
	w.busy, w.steal = machineTicks()
	w.self, w.server = procTicks("self"), procTicks(strconv.Itoa(serverPid))
	return w
}

// Stop returns what the watch saw since it started.
func (w *Watch) Stop() Noise {
	wall := time.Since(w.start).Seconds()
	busy, steal := machineTicks()
	self, server := procTicks("self"), procTicks(strconv.Itoa(w.pid))
	own := (self - w.self) + (server - w.server)
	others := (busy - w.busy) - own
	return Noise{
		OwnCores:    float64(own) / clockTicks / wall,
		OthersCores: float64(max(0, others-slackTicks)) / clockTicks / wall,
		StealCores:  float64(max(0, steal-w.steal-slackTicks)) / clockTicks / wall,
	}
}

// machineTicks returns the busy (user+nice+system) and steal ticks of the
// "cpu" line of /proc/stat, or zeros when it cannot be read.
func machineTicks() (busy, steal int64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	return n(1) + n(2) + n(3), n(8)
}

// procTicks returns utime+stime of /proc/<pid>/stat, or 0.
func procTicks(pid string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%s/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after ")" are fixed.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:])) // state is f[0], so utime (field 14) is f[11]
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}
