package childproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testHelpers are the helpers that the tests below run in children.
var testHelpers = map[string]func(args []string) error{
	// ready announces itself and sleeps, like a lock holder.
	"ready": func(args []string) error {
		fmt.Printf("ready %d\n", os.Getpid())
		time.Sleep(time.Minute)
		return nil
	},
	// echo prints its arguments, one per line, and exits.
	"echo": func(args []string) error {
		fmt.Println("noise")
		for _, a := range args {
			fmt.Println("arg " + a)
		}
		fmt.Println("done")
		return nil
	},
	// tick prints an increasing count every 10ms for up to a minute.
	"tick": func(args []string) error {
		for i := range 6000 {
			fmt.Printf("tick %d\n", i)
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	},
	// fail writes to stderr and returns an error.
	"fail": func(args []string) error {
		fmt.Fprintln(os.Stderr, "about to fail")
		return errors.New("boom")
	},
}

func TestReadyKill(t *testing.T) {
	c := Start(t, "ready")
	pid, err := strconv.Atoi(c.WaitLine(t, "ready ", 10*time.Second))
	if err != nil {
		t.Fatalf("ready line: %v", err)
	}
	if pid != c.Pid() || pid == os.Getpid() {
		t.Fatalf("child says pid %d; Pid() = %d, test pid %d", pid, c.Pid(), os.Getpid())
	}

	c.Kill(t)
	// Reaped, so the pid no longer names a process (not even a zombie).
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("kill(%d, 0) after Kill: %v, want ESRCH", pid, err)
	}
	c.Kill(t) // killing a dead child is a no-op
}

func TestArgs(t *testing.T) {
	args := []string{"a", "b c", "-test.run=x", "--", ""}
	c := Start(t, "echo", args...)
	for _, want := range args {
		if got := c.WaitLine(t, "arg ", 10*time.Second); got != want {
			t.Fatalf("arg = %q, want %q", got, want)
		}
	}
	c.WaitLine(t, "done", 10*time.Second)
}

func TestStopCont(t *testing.T) {
	c := Start(t, "tick")
	c.WaitLine(t, "tick ", 10*time.Second)

	c.Stop(t)
	waitState(t, c.Pid(), "T")
	c.Cont(t)
	waitState(t, c.Pid(), "RS")
	c.WaitLine(t, "tick ", 10*time.Second)
}

func TestDispatchExitStatus(t *testing.T) {
	tests := []struct {
		helper     string
		wantCode   int
		wantStderr string
	}{
		{"echo", 0, ""},
		{"fail", 1, `helper "fail": boom`},
		{"missing", 2, `no helper "missing"`},
	}
	for _, tt := range tests {
		t.Run(tt.helper, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
			// GORACE: a race-enabled binary otherwise idles 1s before exit 0.
			cmd.Env = append(os.Environ(), helperEnv+"="+tt.helper, "GORACE=atexit_sleep_ms=0")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("run: %v", err)
			}
			if code != tt.wantCode || !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Fatalf("exit %d, stderr %q; want exit %d, stderr containing %q", code, stderr.String(), tt.wantCode, tt.wantStderr)
			}
		})
	}
}

func TestWaitLineFailures(t *testing.T) {
	tests := []struct {
		name, helper string
		timeout      time.Duration
		want         []string
	}{
		{"exit", "fail", 10 * time.Second, []string{"ended its output", "exit status 1", "about to fail"}},
		{"timeout", "ready", 100 * time.Millisecond, []string{"no line starting with", "within 100ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Start(t, tt.helper)
			ft := &fakeTB{TB: t}
			ft.run(func() { c.WaitLine(ft, "never ", tt.timeout) })
			if !ft.failed {
				t.Fatal("WaitLine did not fail the test")
			}
			for _, w := range tt.want {
				if !strings.Contains(ft.msg, w) {
					t.Errorf("failure message lacks %q:\n%s", w, ft.msg)
				}
			}
		})
	}
}

// waitState polls /proc until the process state is one of states.
func waitState(t *testing.T, pid int, states string) {
	t.Helper()
	path := fmt.Sprintf("/proc/%d/stat", pid)
	if _, err := os.Stat(path); err != nil {
		// Linux always has /proc, and CI must prove SIGSTOP/SIGCONT: only
		// elsewhere is there nothing to read the state from.
		if runtime.GOOS == "linux" || os.Getenv("CI") == "true" {
			t.Fatalf("no /proc to read the state of process %d: %v", pid, err)
		}
		t.Skipf("no /proc on %s: %v", runtime.GOOS, err)
	}
	var state string
	for range 500 {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		// The state follows the parenthesized command name.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
			state = string(b[i+2])
		}
		if strings.Contains(states, state) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d is in state %q, want one of %q", pid, state, states)
}

// fakeTB records Fatalf instead of acting on it. Cleanups still go to the
// real test.
type fakeTB struct {
	testing.TB
	failed bool
	msg    string
}

// run calls fn in a goroutine, so that Fatalf can end it, and waits for it.
func (f *fakeTB) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
