package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/examples/internal/exampleenv"
	"github.com/jobguard/jobguard/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
}

// TestRun runs the whole story on a redis-server of its own and checks its
// output. Without redis-server it skips, unless CI is "true".
func TestRun(t *testing.T) {
	redistest.RequireBinary(t)
	t.Setenv("REDIS_URL", "") // the example's own server, whatever the environment says
	var out strings.Builder
	if err := run(t.Context(), &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	text := out.String()

	// Every task is sent once, each with retry count 0, by one of the servers.
	sends := regexp.MustCompile(`(server-[AB]): sends the welcome email to user (\d+) \(task (\w+), retry count (\d+)\)`).
		FindAllStringSubmatch(text, -1)
	if len(sends) != 4 {
		t.Fatalf("%d sends, want 4", len(sends))
	}
	tasks, users := map[string]bool{}, map[string]int{}
	for _, m := range sends {
		if tasks[m[3]] {
			t.Errorf("task %s sent twice", m[3])
		}
		tasks[m[3]] = true
		users[m[2]]++
		if m[4] != "0" {
			t.Errorf("task %s sent with retry count %s, want 0", m[3], m[4])
		}
	}
	if users["42"] != 3 || users["7"] != 1 {
		t.Errorf("sends per user %v, want 42:3 7:1", users)
	}
	if !regexp.MustCompile(`user 42 is busy elsewhere: retry soon \(task \w+, retry count stays 0\)`).MatchString(text) {
		t.Error("no busy retry shown")
	}
	for _, want := range []string{
		"4 tasks enqueued, 4 runs: every task ran exactly once",
		"(0 overlaps); user 7's ran beside them",
		"retries spent: 0; asynq counted 0 failures",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestRunWithTrace runs the story with spans printed, as -trace does.
func TestRunWithTrace(t *testing.T) {
	redistest.RequireBinary(t)
	t.Setenv("REDIS_URL", "")
	traced, err := exampleenv.RunTraced(t.Context(), run)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	// The run spans carry the attribute asynqguard adds to every lease.
	for _, want := range []string{`"Name":"jobguard.run"`, `"Key":"messaging.system"`} {
		if !strings.Contains(traced, want) {
			t.Errorf("trace output lacks %s", want)
		}
	}
}
