// Package childproc runs test helpers in child processes, so that a test can
// SIGKILL or SIGSTOP a process holding a lock and watch what the others do.
//
// The child is the test binary itself, re-executed. TestMain calls Dispatch
// first, so that in the child the named helper runs instead of the tests:
//
//	func TestMain(m *testing.M) {
//		childproc.Dispatch(map[string]func(args []string) error{
//			"holder": runHolder,
//		})
//		goleak.VerifyTestMain(m)
//	}
//
// Helpers talk to the test by printing lines to stdout; see Child.WaitLine.
package childproc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// helperEnv names the helper a child runs; Start sets it for the child.
	helperEnv = "JOBGUARD_CHILDPROC_HELPER"
	// exitTimeout bounds how long a killed child may take to be reaped.
	exitTimeout = 10 * time.Second
	// stderrTail is how many bytes of the child's stderr failure messages
	// include.
	stderrTail = 4 << 10
)

// Dispatch runs a helper if this process was started by Start, and returns
// otherwise. In a child it runs the helper named by Start, with its args,
// and exits: with status 0 if the helper returns nil, 1 if it returns an
// error (printed to stderr) and 2 if helpers has no such name. Call it first
// in TestMain.
func Dispatch(helpers map[string]func(args []string) error) {
	name, ok := os.LookupEnv(helperEnv)
	if !ok {
		return
	}
	helper := helpers[name]
	if helper == nil {
		fmt.Fprintf(os.Stderr, "childproc: no helper %q\n", name)
		os.Exit(2)
	}
	var args []string
	if i := slices.Index(os.Args, "--"); i >= 0 {
		args = os.Args[i+1:]
	}
	if err := helper(args); err != nil {
		fmt.Fprintf(os.Stderr, "childproc: helper %q: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Child is a helper process started by Start. It is SIGKILLed and reaped
// when the test that started it ends.
type Child struct {
	name   string
	cmd    *exec.Cmd
	stderr string      // path of the file that collects the child's stderr
	lines  chan string // stdout lines; closed when stdout ends
	exited chan struct{}
	err    error // result of cmd.Wait; valid once exited is closed
}

// Start runs helper name with args in a child process: the test binary
// (os.Executable, falling back to os.Args[0]), re-executed with -test.run=^$ and an environment variable that makes
// Dispatch run the helper. The child's stdout is read line by line (see
// WaitLine) and its stderr is kept for failure messages. The child is
// SIGKILLed and reaped in t.Cleanup.
func Start(t testing.TB, name string, args ...string) *Child {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		bin = os.Args[0]
	}
	stderrPath := filepath.Join(t.TempDir(), "stderr")
	stderr, err := os.Create(stderrPath)
	if err != nil {
		t.Fatalf("childproc: %v", err)
	}
	defer stderr.Close() // the child has its own descriptor
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		t.Fatalf("childproc: %v", err)
	}

	cmd := exec.Command(bin, append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), helperEnv+"="+name)
	cmd.Stdout = stdoutW
	cmd.Stderr = stderr
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	_ = stdoutW.Close() // only the child writes
	if err != nil {
		_ = stdoutR.Close()
		t.Fatalf("childproc: start helper %q: %v", name, err)
	}

	c := &Child{
		name:   name,
		cmd:    cmd,
		stderr: stderrPath,
		lines:  make(chan string, 64),
		exited: make(chan struct{}),
	}
	stop := make(chan struct{})
	read := make(chan struct{})
	go func() { // reaper
		defer close(c.exited)
		c.err = cmd.Wait()
	}()
	go func() { // stdout reader
		defer close(read)
		defer close(c.lines)
		sc := bufio.NewScanner(stdoutR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() {
		if err := c.kill(); err != nil {
			t.Errorf("childproc: %v", err)
		}
		close(stop)
		_ = stdoutR.Close() // ends the read even if a grandchild holds stdout
		<-read
	})
	return c
}

// Pid returns the child's process id.
func (c *Child) Pid() int {
	return c.cmd.Process.Pid
}

// WaitLine waits up to timeout for the next stdout line that starts with
// prefix and returns the rest of the line, unchanged. Lines before it that
// do not match are discarded. If the timeout passes or the child's stdout
// ends first, WaitLine fails the test, including the child's stderr.
func (c *Child) WaitLine(t testing.TB, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				t.Fatalf("childproc: helper %q (pid %d) ended its output before a line starting with %q: %s\n%s",
					c.name, c.Pid(), prefix, c.exitStatus(), c.stderrTail())
			}
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				return rest
			}
		case <-deadline.C:
			t.Fatalf("childproc: helper %q (pid %d) printed no line starting with %q within %v\n%s",
				c.name, c.Pid(), prefix, timeout, c.stderrTail())
		}
	}
}

// Kill sends SIGKILL to the child and waits until it has exited and been
// reaped. Killing a child that has exited does nothing.
func (c *Child) Kill(t testing.TB) {
	t.Helper()
	if err := c.kill(); err != nil {
		t.Fatalf("childproc: %v", err)
	}
}

// Stop sends SIGSTOP to the child: it stays alive, holding what it holds,
// but runs no code until Cont.
func (c *Child) Stop(t testing.TB) {
	t.Helper()
	c.signal(t, syscall.SIGSTOP)
}

// Cont sends SIGCONT to a child stopped by Stop.
func (c *Child) Cont(t testing.TB) {
	t.Helper()
	c.signal(t, syscall.SIGCONT)
}

func (c *Child) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("childproc: %v helper %q (pid %d): %v", sig, c.name, c.Pid(), err)
	}
}

// kill sends SIGKILL and waits for the reaper.
func (c *Child) kill() error {
	// Signaling a reaped process fails harmlessly with os.ErrProcessDone.
	_ = c.cmd.Process.Kill()
	select {
	case <-c.exited:
		return nil
	case <-time.After(exitTimeout):
		return fmt.Errorf("helper %q (pid %d) did not exit within %v of SIGKILL", c.name, c.Pid(), exitTimeout)
	}
}

// exitStatus describes how the child ended, if it has, waiting briefly for
// the reaper since stdout ends just before the process is reaped.
func (c *Child) exitStatus() string {
	select {
	case <-c.exited:
		if c.err == nil {
			return "exit status 0"
		}
		return c.err.Error()
	case <-time.After(time.Second):
		return "still running"
	}
}

// stderrTail returns the end of the child's stderr.
func (c *Child) stderrTail() string {
	b, err := os.ReadFile(c.stderr)
	if err != nil {
		return fmt.Sprintf("(no stderr: %v)", err)
	}
	if len(b) > stderrTail {
		b = b[len(b)-stderrTail:]
	}
	return "stderr:\n" + string(b)
}
