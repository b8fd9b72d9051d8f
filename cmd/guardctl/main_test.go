package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
	"go.uber.org/goleak"
)

// bin is the guardctl binary the tests run, built once by TestMain into a
// temporary directory that it removes at the end.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "guardctl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bin = filepath.Join(dir, "guardctl")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build guardctl:", err)
		_ = os.RemoveAll(dir)
		os.Exit(2)
	}
	opts := append(redistest.LeakOptions(), goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
	goleak.VerifyTestMain(m, opts...)
}
