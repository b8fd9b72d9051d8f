package main

import (
	"strings"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
}

// TestRun runs the story on three embedded servers and checks what it says.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_URLS", "")
	var out strings.Builder
	if err := run(t.Context(), &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	for _, want := range []string{
		"instance-1: holds ledger-close on a majority",
		"instance-2: is turned away",
		"master 1 is gone",
		"instance-1: still holds it after 3s",
		"instance-2: is still turned away",
		"instance-2: holds ledger-close, token",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
