package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobguard/jobguard/bench/internal/results"
	"github.com/jobguard/jobguard/bench/internal/scenario"
)

// libraries are the modules whose versions the results record.
var libraries = []string{
	"github.com/go-redsync/redsync/v4",
	"github.com/bsm/redislock",
	"github.com/redis/go-redis/v9",
}

// machine describes this machine and the software the run used.
func machine(ctx context.Context, clientCPU, serverCPU int) (results.Machine, error) {
	m := results.Machine{
		Date:       time.Now().UTC().Format(time.RFC3339),
		CPUModel:   cpuModel(),
		GoVersion:  runtime.Version(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Libraries:  map[string]string{},
		ClientCPU:  clientCPU,
		ServerCPU:  serverCPU,
		Pinning:    pinning(clientCPU, serverCPU),
		OpContext:  scenario.OpContext,
		Guard:      guardCommit(ctx),
	}
	var err error
	if m.CPUs, err = onlineCPUs(); err != nil {
		return m, err
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
	}
	out, err := exec.CommandContext(ctx, "redis-server", "--version").Output()
	if err != nil {
		return m, fmt.Errorf("redis-server --version: %w", err)
	}
	m.RedisVersion = redisVersion(string(out))
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			for _, lib := range libraries {
				if dep.Path == lib {
					m.Libraries[lib] = dep.Version
				}
			}
		}
	}
	return m, nil
}

func pinning(clientCPU, serverCPU int) string {
	if clientCPU < 0 && serverCPU < 0 {
		return "not pinned: the client process and each redis-server run on whichever CPUs the kernel picks"
	}
	where := func(cpu int) string {
		if cpu < 0 {
			return "not pinned"
		}
		return fmt.Sprintf("pinned to CPU %d", cpu)
	}
	return fmt.Sprintf("client process %s (re-executed under taskset; GOMAXPROCS follows), each redis-server %s (started under taskset)",
		where(clientCPU), where(serverCPU))
}

// cpuModel returns the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// onlineCPUs counts the machine's CPUs (not this process's affinity).
func onlineCPUs() (int, error) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, _, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "processor" {
			n++
		}
	}
	return n, sc.Err()
}

// guardCommit names the commit guard was built from (bench/ replaces the
// module with ../), with "+dirty" when guard/ has uncommitted changes.
func guardCommit(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown (not a git work tree)"
	}
	commit := strings.TrimSpace(string(out))
	status, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--", "../guard").Output()
	if err == nil && len(strings.TrimSpace(string(status))) > 0 {
		commit += "+dirty"
	}
	return commit
}

// redisVersion returns the v= field of `redis-server --version`, or the
// whole line.
func redisVersion(out string) string {
	for f := range strings.FieldsSeq(out) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(out)
}
