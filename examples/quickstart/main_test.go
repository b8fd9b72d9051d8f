package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/examples/internal/exampleenv"
	"github.com/jobguard/jobguard/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
}

// TestRun runs the whole story on the embedded Redis and checks its output.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_URL", "") // the embedded server, whatever the environment says
	var out strings.Builder
	if err := run(t.Context(), &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	t.Logf("output:\n%s", out.String())

	// Each round: exactly one instance runs, the other two skip.
	type tally struct{ runs, skips int }
	var rounds []tally
	inRounds := false
	for _, l := range lines {
		switch {
		case strings.Contains(l, "fleet: --- round"):
			rounds, inRounds = append(rounds, tally{}), true
		case strings.Contains(l, "fleet: ---"):
			inRounds = false
		case inRounds && strings.Contains(l, ": runs nightly-report"):
			rounds[len(rounds)-1].runs++
		case inRounds && strings.Contains(l, ": skipped nightly-report"):
			rounds[len(rounds)-1].skips++
		}
	}
	if len(rounds) != 3 {
		t.Errorf("%d rounds, want 3", len(rounds))
	}
	for i, r := range rounds {
		if r != (tally{runs: 1, skips: 2}) {
			t.Errorf("round %d: %d runs and %d skips, want 1 and 2", i+1, r.runs, r.skips)
		}
	}

	// Fencing tokens, in order of appearance, strictly increase.
	last := int64(0)
	for _, m := range regexp.MustCompile(`fencing token (\d+)`).FindAllStringSubmatch(out.String(), -1) {
		tok, _ := strconv.ParseInt(m[1], 10, 64)
		if tok <= last {
			t.Errorf("fencing token %d after %d", tok, last)
		}
		last = tok
	}

	// The holder cut off from Redis is told to stop before another instance
	// takes over.
	told := index(lines, "instance-1: was told to stop: guard: lease lost")
	took := index(lines, "instance-2: took over nightly-report")
	if told < 0 || took < 0 || told > took {
		t.Errorf("want instance-1 told to stop (line %d) before instance-2 takes over (line %d)", told, took)
	}

	// The deleted lease cancels the job's context and fails WithLock.
	for _, want := range []string{
		"instance-3: job context canceled: guard: lease lost",
		"instance-3: WithLock returned: guard: lease lost",
	} {
		if index(lines, want) < 0 {
			t.Errorf("no line contains %q", want)
		}
	}
}

// TestRunLeavesNothingForever runs the story on a real redis-server, as
// REDIS_URL makes it do, and checks that every key it leaves behind expires.
func TestRunLeavesNothingForever(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("REDIS_URL", "redis://"+srv.Addr())
	var out strings.Builder
	if err := run(t.Context(), &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	admin := srv.Client(t)
	keys, err := admin.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		ttl, err := admin.PTTL(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < 0 { // -1: no expiry; -2: gone meanwhile, which is fine
			if ttl == -1 {
				t.Errorf("%s is left with no expiry", k)
			}
			continue
		}
		t.Logf("%s expires in %v", k, ttl)
	}
}

// index returns the number of the first line containing s, or -1.
func index(lines []string, s string) int {
	for i, l := range lines {
		if strings.Contains(l, s) {
			return i
		}
	}
	return -1
}

// TestRunWithTrace runs the story as -trace does and checks the span tree
// printed after it.
func TestRunWithTrace(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	traced, err := exampleenv.RunTree(t.Context(), run)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	t.Logf("output:\n%s", traced)
	_, tree, ok := strings.Cut(traced, "\n--- ")
	if !ok {
		t.Fatalf("no span tree after the story")
	}
	for _, want := range []string{
		"\njobguard.run  ",
		"\n├─ jobguard.lock.acquire  ",
		"\n└─ jobguard.lock.release  ",
		"─ * event jobguard.lock.lost  ", // the lease deleted under instance-3's job; reported off the heartbeat, so before or after the release
		"error.type=lease_lost",
		"acquire.result=busy",
	} {
		if !strings.Contains(tree, want) {
			t.Errorf("span tree lacks %q", want)
		}
	}
	if strings.Contains(traced, `"Name"`) {
		t.Errorf("JSON in the output of -trace")
	}
}

// TestRunWithTraceJSON runs the story as -trace=json does.
func TestRunWithTraceJSON(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	traced, err := exampleenv.RunTraced(t.Context(), run)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, want := range []string{`"Name":"jobguard.run"`, `"Name":"jobguard.lock.acquire"`, `"Name":"jobguard.lock.release"`, `"Name":"jobguard.lock.lost"`} {
		if !strings.Contains(traced, want) {
			t.Errorf("trace output lacks %s", want)
		}
	}
}
