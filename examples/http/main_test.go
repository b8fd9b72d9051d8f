package main

import (
	"strings"
	"testing"

	"github.com/jobguard/jobguard/examples/internal/exampleenv"
	"github.com/jobguard/jobguard/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
}

// TestRun runs the whole story on the embedded Redis and checks that each
// request got the answer the story tells.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_URL", "") // the embedded server, whatever the environment says
	var out strings.Builder
	if err := run(t.Context(), &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")

	// The answers, in the order they were printed.
	var answers []string
	for _, l := range lines {
		if _, after, ok := strings.Cut(l, "<- "); ok {
			answers = append(answers, after)
		}
	}
	want := []string{
		"409 Conflict [Retry-After: 5, Cache-Control: no-store] problem \"Request in progress\"",
		"201 Created [Location: /orders/1] {\"id\":1,\"item\":\"book\"}",
		"201 Created [Location: /orders/1, Idempotent-Replayed: true] {\"id\":1,\"item\":\"book\"}",
		"422 Unprocessable Entity [Cache-Control: no-store] problem \"Idempotency-Key reused\"",
		"201 Created [Location: /orders/2] {\"id\":2,\"item\":\"pen\"}",
		"400 Bad Request [Cache-Control: no-store] problem \"Invalid Idempotency-Key\"",
		"201 Created [Location: /orders/3] {\"id\":3,\"item\":\"book\"}",
	}
	if len(answers) != len(want) {
		t.Fatalf("%d answers, want %d", len(answers), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(answers[i], w) {
			t.Errorf("answer %d: %q, want it to start with %q", i+1, answers[i], w)
		}
	}
	if !strings.Contains(lines[len(lines)-1], "the handler ran 3 times for 7 requests; orders: book, pen, book") {
		t.Errorf("last line %q", lines[len(lines)-1])
	}
}

// TestRunWithTrace runs the story as -trace does: the run spans in the tree
// carry the route httpguard adds to every lease.
func TestRunWithTrace(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	traced, err := exampleenv.RunTree(t.Context(), run)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	t.Logf("output:\n%s", traced)
	runs := 0
	for _, l := range strings.Split(traced, "\n") {
		if strings.HasPrefix(l, "jobguard.run  ") {
			runs++
			if !strings.Contains(l, `http.route="POST /orders"`) {
				t.Errorf("run span without the route: %s", l)
			}
		}
	}
	if runs == 0 {
		t.Errorf("no jobguard.run span in the tree")
	}
}

// TestRunWithTraceJSON runs the story as -trace=json does.
func TestRunWithTraceJSON(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	traced, err := exampleenv.RunTraced(t.Context(), run)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, want := range []string{`"Name":"jobguard.run"`, `"Key":"http.route"`} {
		if !strings.Contains(traced, want) {
			t.Errorf("trace output lacks %s", want)
		}
	}
}
