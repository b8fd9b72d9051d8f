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

// TestRun tells the story on the embedded Redis and checks it.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_URL", "") // the embedded server, whatever the environment says
	var out strings.Builder
	if err := run(t.Context(), &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	check(t, out.String())
}

// TestRunOnRedis tells the story on a real redis-server, as REDIS_URL makes
// it do.
func TestRunOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("REDIS_URL", "redis://"+srv.Addr())
	var out strings.Builder
	if err := run(t.Context(), &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	check(t, out.String())
	admin := srv.Client(t)
	keys, err := admin.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if ttl, err := admin.PTTL(t.Context(), k).Result(); err == nil && ttl == -1 {
			t.Errorf("%s is left with no expiry", k)
		}
	}
}

// TestRunWithTrace tells the story as -trace does.
func TestRunWithTrace(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	traced, err := exampleenv.RunTree(t.Context(), run)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(traced, "\njobguard.run  ") {
		t.Errorf("no span tree after the story:\n%s", traced)
	}
}

// check reads the story: every export called once, never more than two
// calls at a time and both permits used, and the cut-off worker told to
// stop before its permit went to another, while the other holder kept its.
func check(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	exports := map[string]int{}
	most := 0
	for _, m := range regexp.MustCompile(`calls the API for export (\d+) \((\d) of 2 permits in use`).FindAllStringSubmatch(out, -1) {
		exports[m[1]]++
		most = max(most, int(m[2][0]-'0'))
	}
	if len(exports) != 12 {
		t.Errorf("%d exports called, want 12", len(exports))
	}
	for n, calls := range exports {
		if calls != 1 {
			t.Errorf("export %s called %d times", n, calls)
		}
	}
	if most != 2 {
		t.Errorf("at most %d calls in use at once, want 2", most)
	}
	if index(lines, "12 exports done by 9 goroutines, at most 2 calls at a time") < 0 {
		t.Errorf("no summary of 12 exports at most 2 at a time")
	}
	told := index(lines, "worker-1: was told to stop")
	took := index(lines, "worker-3: took the cut-off worker's permit")
	if told < 0 || took < 0 || told > took {
		t.Errorf("want worker-1 told to stop (line %d) before worker-3 takes its permit (line %d)", told, took)
	}
	if index(lines, "worker-2: kept its permit throughout") < 0 {
		t.Errorf("worker-2 did not keep its permit")
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
