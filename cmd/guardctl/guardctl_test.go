package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// result is one run of the binary.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// guardctl runs the binary with args and, unless env sets it, no REDIS_URL.
// It checks that standard error has at most one line.
func guardctl(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "REDIS_URL=") }), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("guardctl %q: %v", args, err)
	}
	// A note that a KEY given as a Redis key was read as the lock's name
	// may come before that one line.
	// A warning that the server may evict lock keys may come after it.
	rest := r.stderr
	if note, after, ok := strings.Cut(rest, "\n"); ok && strings.HasSuffix(note, "; using the lock name") {
		rest = after
	}
	if i := strings.Index(rest, "guardctl: warning: "); i >= 0 && strings.Count(rest[i:], "\n") == 1 {
		rest = rest[:i]
	}
	if n := strings.Count(rest, "\n"); n > 1 || (rest != "" && !strings.HasSuffix(rest, "\n")) {
		t.Errorf("guardctl %q: stderr is not one line:\n%s", args, r.stderr)
	}
	return r
}

// must runs guardctl and fails the test unless it exits with code.
func must(t *testing.T, code int, env []string, args ...string) result {
	t.Helper()
	r := guardctl(t, env, args...)
	if r.code != code {
		t.Fatalf("guardctl %q exited %d, want %d\nstdout:\n%s\nstderr:\n%s", args, r.code, code, r.stdout, r.stderr)
	}
	return r
}

// newLocker returns a Locker on its own client, closed when the test ends.
func newLocker(t *testing.T, client redis.UniversalClient, opts ...guard.Option) *guard.Locker {
	t.Helper()
	l, err := guard.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func acquire(t *testing.T, ctx context.Context, l *guard.Locker, key string, opts ...guard.LockOption) *guard.Lease {
	t.Helper()
	le, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return le
}

// waitFor polls cond every 10ms for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fleet holds locks in every state on srv: a write hold with a waiting
// writer, two readers, a hold released but kept for MinHold.
type fleet struct {
	report, catalogA, catalogB, nightly *guard.Lease
	waiter                              chan *guard.Lease
}

func startFleet(t *testing.T, srv *redistest.Server) *fleet {
	t.Helper()
	ctx := t.Context()
	ttl := guard.WithTTL(20 * time.Second)
	alpha := newLocker(t, srv.Client(t), guard.WithIdentity("alpha/1"), ttl)
	beta := newLocker(t, srv.Client(t), guard.WithIdentity("beta/2"), ttl)
	gamma := newLocker(t, srv.Client(t), guard.WithIdentity("gamma 3"), ttl)
	delta := newLocker(t, srv.Client(t), guard.WithIdentity("delta/4"), ttl)
	f := &fleet{waiter: make(chan *guard.Lease, 1)}
	f.report = acquire(t, ctx, alpha, "report")
	var err error
	if f.catalogA, err = beta.AcquireRead(ctx, "catalog"); err != nil {
		t.Fatal(err)
	}
	if f.catalogB, err = gamma.AcquireRead(ctx, "catalog"); err != nil {
		t.Fatal(err)
	}
	f.nightly = acquire(t, ctx, gamma, "nightly", guard.MinHold(time.Minute))
	if err := f.nightly.Release(ctx); err != nil {
		t.Fatal(err)
	}
	go func() {
		le, err := delta.Acquire(ctx, "report", guard.Wait(time.Minute))
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		f.waiter <- le
	}()
	waitFor(t, "the waiter to register", func() bool {
		st, err := alpha.Inspect(ctx, "report")
		return err == nil && len(st.Waiters) == 1
	})
	t.Cleanup(func() {
		for _, le := range []*guard.Lease{f.report, f.catalogA, f.catalogB} {
			_ = le.Release(context.Background())
		}
	})
	return f
}

// table splits a table's lines into fields.
func table(out string) [][]string {
	var rows [][]string
	for line := range strings.Lines(out) {
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

func TestList(t *testing.T) {
	srv := redistest.Start(t)
	f := startFleet(t, srv)
	url := "--url=redis://" + srv.Addr()

	r := must(t, 0, nil, url, "ls")
	rows := table(r.stdout)
	want := [][]string{
		{"KEY", "MODE", "HOLDERS", "LEFT", "TOKEN", "WAITERS"},
		{"catalog", "read", "beta/2", "+1", "", strconv.FormatInt(f.catalogB.Token(), 10), "0"},
		{"nightly", "minhold", "gamma", "3", "", strconv.FormatInt(f.nightly.Token(), 10), "0"},
		{"report", "write", "alpha/1", "", strconv.FormatInt(f.report.Token(), 10), "1"},
	}
	if len(rows) != len(want) {
		t.Fatalf("ls:\n%s", r.stdout)
	}
	for i, w := range want {
		got := rows[i]
		// LEFT varies: check it parses, then compare the rest.
		leftAt := slices.Index(w, "")
		if leftAt >= 0 {
			if d, err := time.ParseDuration(got[leftAt]); err != nil || d <= 0 || d > time.Minute {
				t.Errorf("row %d LEFT %q: %v", i, got[leftAt], err)
			}
			got = slices.Delete(slices.Clone(got), leftAt, leftAt+1)
			w = slices.Delete(slices.Clone(w), leftAt, leftAt+1)
		}
		if !slices.Equal(got, w) {
			t.Errorf("ls row %d = %q, want %q\n%s", i, rows[i], w, r.stdout)
		}
	}

	r = must(t, 0, nil, url, "ls", "rep*")
	if rows := table(r.stdout); len(rows) != 2 || rows[1][0] != "report" {
		t.Errorf("ls rep*:\n%s", r.stdout)
	}

	// Flags after the command, REDIS_URL from the environment.
	r = must(t, 0, []string{"REDIS_URL=redis://" + srv.Addr()}, "ls", "--json")
	var locks []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &locks); err != nil {
		t.Fatalf("ls --json: %v\n%s", err, r.stdout)
	}
	var keys []string
	for _, l := range locks {
		checkFields(t, l)
		keys = append(keys, l["key"].(string))
	}
	if !slices.Equal(keys, []string{"catalog", "nightly", "report"}) {
		t.Errorf("ls --json keys = %q", keys)
	}

	r = must(t, 1, nil, url, "ls", "nothing*")
	if r.stdout != "" || !strings.Contains(r.stderr, `no lock matches "nothing*"`) {
		t.Errorf("ls of nothing: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	r = must(t, 1, nil, url, "--json", "ls", "nothing*")
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("ls --json of nothing = %q, want []", r.stdout)
	}
}

// checkFields checks that a lock object of --json output has exactly the
// documented fields.
func checkFields(t *testing.T, lock map[string]any) {
	t.Helper()
	keysOf := func(m map[string]any) []string { return slices.Sorted(mapsKeys(m)) }
	if got := keysOf(lock); !slices.Equal(got, []string{"fence", "holders", "key", "waiters"}) {
		t.Errorf("lock fields %q", got)
	}
	for _, h := range lock["holders"].([]any) {
		want := []string{"identity", "left_ms", "lingering", "min_hold_ms", "mode", "owner", "reads", "token", "writes"}
		if got := keysOf(h.(map[string]any)); !slices.Equal(got, want) {
			t.Errorf("holder fields %q, want %q", got, want)
		}
	}
	for _, w := range lock["waiters"].([]any) {
		want := []string{"identity", "left_ms", "locker", "mode", "owner"}
		if got := keysOf(w.(map[string]any)); !slices.Equal(got, want) {
			t.Errorf("waiter fields %q, want %q", got, want)
		}
	}
}

func mapsKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestShow(t *testing.T) {
	srv := redistest.Start(t)
	f := startFleet(t, srv)
	url := "--url=redis://" + srv.Addr()

	r := must(t, 0, nil, url, "show", "report")
	for _, want := range []string{
		"lock             report", "redis key        guard:{report}",
		"fencing counter  " + strconv.FormatInt(f.report.Token(), 10),
		"holders: 1", "alpha/1", "write", "waiters: 1", "delta/4",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show report lacks %q:\n%s", want, r.stdout)
		}
	}

	r = must(t, 0, nil, "show", "report", url, "--json")
	var st lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	_ = json.Unmarshal([]byte(r.stdout), &raw)
	checkFields(t, raw)
	if len(st.Holders) != 1 || len(st.Waiters) != 1 {
		t.Fatalf("show --json: %+v", st)
	}
	h, w := st.Holders[0], st.Waiters[0]
	if h.Identity != "alpha/1" || h.Mode != "write" || h.Writes != 1 || h.Reads != 0 || h.Token != f.report.Token() ||
		h.LeftMS <= 0 || h.LeftMS > 20000 || h.MinHoldMS != 0 || h.Lingering || h.Owner == "" {
		t.Errorf("holder %+v", h)
	}
	if w.Identity != "delta/4" || w.Mode != "write" || w.Locker == "" || w.Owner == "" || w.LeftMS <= 0 {
		t.Errorf("waiter %+v", w)
	}
	if st.Key != "report" || st.Fence != f.report.Token() {
		t.Errorf("key %q fence %d", st.Key, st.Fence)
	}

	r = must(t, 0, nil, url, "--json", "show", "catalog")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 2 || st.Holders[0].Identity != "beta/2" || st.Holders[1].Identity != "gamma 3" ||
		st.Holders[0].Mode != "read" || st.Holders[1].Reads != 1 {
		t.Errorf("show catalog: %+v", st.Holders)
	}

	r = must(t, 0, nil, url, "--json", "show", "nightly")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || !st.Holders[0].Lingering || st.Holders[0].MinHoldMS <= 0 || st.Holders[0].Writes != 0 {
		t.Errorf("show nightly: %+v", st.Holders)
	}
	r = must(t, 0, nil, url, "show", "nightly")
	if !strings.Contains(r.stdout, "released, kept for MinHold") {
		t.Errorf("show nightly:\n%s", r.stdout)
	}

	// A free key, and one that never was a lock.
	r = must(t, 1, nil, url, "show", "free")
	if r.stdout != "" || !strings.Contains(r.stderr, `lock "free" is free`) {
		t.Errorf("show free: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	r = must(t, 1, nil, url, "--json", "show", "free")
	if strings.TrimSpace(r.stdout) != `{"key":"free","fence":0,"holders":[],"waiters":[]}` {
		t.Errorf("show --json free = %q", r.stdout)
	}
	if err := srv.Client(t).Set(t.Context(), "guard:{str}", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r = must(t, 1, nil, url, "show", "str")
	if !strings.Contains(r.stderr, `lock "str" is not a lock`) || !strings.Contains(r.stderr, "--prefix") {
		t.Errorf("show of a string key: %q", r.stderr)
	}

	// Another prefix.
	team := newLocker(t, srv.Client(t), guard.WithPrefix("team:"), guard.WithIdentity("team-a"))
	le := acquire(t, t.Context(), team, "report")
	defer func() { _ = le.Release(context.Background()) }()
	r = must(t, 0, nil, url, "--prefix", "team:", "ls")
	if rows := table(r.stdout); len(rows) != 2 || rows[1][0] != "report" || rows[1][2] != "team-a" {
		t.Errorf("ls --prefix team::\n%s", r.stdout)
	}
}

func TestRelease(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	url := "--url=redis://" + srv.Addr()
	holder := newLocker(t, client, guard.WithIdentity("stuck/9"), guard.WithTTL(time.Second))
	waiter := newLocker(t, client, guard.WithIdentity("next/10"), guard.WithTTL(20*time.Second))
	le := acquire(t, t.Context(), holder, "job")
	got := make(chan *guard.Lease, 1)
	go func() {
		w, err := waiter.Acquire(t.Context(), "job", guard.Wait(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	waitFor(t, "the waiter to register", func() bool {
		st, err := holder.Inspect(t.Context(), "job")
		return err == nil && len(st.Waiters) == 1
	})

	r := must(t, 1, nil, url, "release", "job")
	if r.stdout != "" || !strings.Contains(r.stderr, "without --force") {
		t.Errorf("release without --force: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	if st, err := holder.Inspect(t.Context(), "job"); err != nil || len(st.Holders) != 1 {
		t.Fatalf("after a refused release: %+v, %v", st, err)
	}

	r = must(t, 0, nil, url, "release", "job", "--force")
	ended, now := releaseParts(t, r.stdout)
	for _, want := range []string{`ended 1 hold of "job"`, "stuck/9", strconv.FormatInt(le.Token(), 10)} {
		if !strings.Contains(ended, want) {
			t.Errorf("release output lacks %q before now:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(now, "next/10") { // woken: waiting still, or holding already
		t.Errorf("release output lacks the waiter after now:\n%s", r.stdout)
	}
	select {
	case <-le.Context().Done():
		if !errors.Is(context.Cause(le.Context()), guard.ErrLeaseLost) {
			t.Errorf("holder's cause: %v", context.Cause(le.Context()))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder was not told")
	}
	next := <-got
	if next == nil {
		t.FailNow()
	}
	// Force-released below: its Locker learns it at its next renewal, or here.
	defer func() { _ = next.Release(context.Background()) }()
	if next.Token() <= le.Token() {
		t.Errorf("token after release %d <= %d", next.Token(), le.Token())
	}

	r = must(t, 0, nil, url, "--json", "--force", "release", "job")
	var st lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || st.Holders[0].Identity != "next/10" || st.Holders[0].Token != next.Token() {
		t.Errorf("release --json: %+v", st)
	}
	r = must(t, 1, nil, url, "release", "--force", "job")
	if !strings.Contains(r.stderr, "nothing released") {
		t.Errorf("release of a free key: %q", r.stderr)
	}
}

// releaseParts splits release's text output into the holds it ended, from
// the heading "ended N hold(s) of KEY" on, and the lock after the
// release, from the line "now:" on.
func releaseParts(t *testing.T, out string) (ended, now string) {
	t.Helper()
	if !strings.HasPrefix(out, "ended ") {
		t.Fatalf("release output does not start with the holds it ended:\n%s", out)
	}
	at := strings.Index(out, "\nnow:")
	if at < 0 {
		t.Fatalf("release output has no line now:\n%s", out)
	}
	return out[:at+1], out[at+1:]
}

// release --force labels the holds it ended as ended, and then shows the
// lock as a read after the release finds it: free, or taken by a waiter
// that the release woke, with the other waiter still queued; the ended
// holder is only in the first part, the waiters only in the second.
func TestReleaseEndedAndNow(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	url := "--url=redis://" + srv.Addr()
	// A short TTL, so that the holder learns of the release soon after.
	holder := newLocker(t, client, guard.WithIdentity("stuck/9"), guard.WithTTL(time.Second))

	t.Run("free", func(t *testing.T) {
		le := acquire(t, t.Context(), holder, "alone")
		t.Cleanup(func() { _ = le.Release(context.Background()) })
		r := must(t, 0, nil, url, "release", "--force", "alone")
		tok := strconv.FormatInt(le.Token(), 10)
		rows := table(r.stdout)
		want := [][]string{
			{"ended", "1", "hold", "of", `"alone";`, "each", "holder", "learns", "it", "at", "its", "next", "renewal:"},
			{"IDENTITY", "MODE", "WRITES", "READS", "LEFT", "TOKEN", "MINHOLD", "OWNER"},
			{"stuck/9", "write", "1", "0", "", tok, "-", ""},
			{"now:", "free", "(fencing", "counter", tok + ")"},
		}
		if len(rows) != len(want) || r.stderr != "" {
			t.Fatalf("release of a lock nobody waits for:\n%s\nstderr %q", r.stdout, r.stderr)
		}
		for i, w := range want {
			got := slices.Clone(rows[i])
			for j := range w {
				if w[j] == "" && j < len(got) { // LEFT and OWNER vary
					got[j] = ""
				}
			}
			if !slices.Equal(got, w) {
				t.Errorf("line %d = %q, want %q\n%s", i, rows[i], w, r.stdout)
			}
		}
	})

	t.Run("waiters", func(t *testing.T) {
		le := acquire(t, t.Context(), holder, "queued")
		t.Cleanup(func() { _ = le.Release(context.Background()) })
		got := make(chan *guard.Lease, 2)
		for _, id := range []string{"next/10", "then/11"} {
			l := newLocker(t, client, guard.WithIdentity(id), guard.WithTTL(20*time.Second))
			go func() {
				w, err := l.Acquire(t.Context(), "queued", guard.Wait(time.Minute))
				if err != nil {
					t.Error(err)
				}
				got <- w
			}()
		}
		waitFor(t, "both waiters to register", func() bool {
			st, err := holder.Inspect(t.Context(), "queued")
			return err == nil && len(st.Waiters) == 2
		})

		r := must(t, 0, nil, url, "release", "queued", "--force")
		ended, now := releaseParts(t, r.stdout)
		if first, _, _ := strings.Cut(ended, "\n"); first != `ended 1 hold of "queued"; each holder learns it at its next renewal:` {
			t.Errorf("release heading %q", first)
		}
		if !strings.Contains(ended, "stuck/9") || !strings.Contains(ended, strconv.FormatInt(le.Token(), 10)) {
			t.Errorf("the ended holds lack the holder:\n%s", r.stdout)
		}
		for _, unlabeled := range []string{"holders:", "waiters:", "next/10", "then/11"} {
			if strings.Contains(ended, unlabeled) {
				t.Errorf("the ended holds show %q:\n%s", unlabeled, r.stdout)
			}
		}
		// Read right after the release: a waiter may hold the lock already.
		if !strings.HasPrefix(now, "now:\nlock             queued\n") || strings.Contains(now, "stuck/9") ||
			!strings.Contains(now, "next/10") || !strings.Contains(now, "then/11") ||
			!strings.Contains(now, "waiters: ") {
			t.Errorf("the lock after the release:\n%s", r.stdout)
		}
		// Let both waiters through.
		for range 2 {
			select {
			case w := <-got:
				if w == nil {
					t.FailNow()
				}
				if w.Token() <= le.Token() {
					t.Errorf("token after release %d <= %d", w.Token(), le.Token())
				}
				_ = w.Release(context.Background())
			case <-time.After(10 * time.Second):
				t.Fatal("a waiter never got the lock")
			}
		}
	})
}

// A Redis key of a lock, pasted as redis-cli shows it ("guard:{name}", or
// one of its derived keys), is read as the lock's name by show, watch and
// release, with a note on standard error; a key under another prefix, or
// one that is not a lock's, is refused with the name to pass instead.
func TestPastedRedisKey(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	url := "--url=redis://" + srv.Addr()
	holder := newLocker(t, client, guard.WithIdentity("web-1/4242"), guard.WithTTL(time.Second))
	waiter := newLocker(t, client, guard.WithIdentity("web-3/91"), guard.WithTTL(20*time.Second))
	le := acquire(t, t.Context(), holder, "nightly-report")
	t.Cleanup(func() { _ = le.Release(context.Background()) })
	got := make(chan *guard.Lease, 1)
	go func() {
		w, err := waiter.Acquire(t.Context(), "nightly-report", guard.Wait(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	waitFor(t, "the waiter to register", func() bool {
		st, err := holder.Inspect(t.Context(), "nightly-report")
		return err == nil && len(st.Waiters) == 1
	})

	// The keys as redis-cli lists them: the lock, its fencing counter, its queue.
	keys, err := client.Keys(t.Context(), "guard:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	want := []string{"guard:{nightly-report}", "guard:{nightly-report}:fence", "guard:{nightly-report}:waiters"}
	if !slices.Equal(keys, want) {
		t.Fatalf("Redis keys %q, want %q: the key layout changed; update nameInKey", keys, want)
	}
	whats := []string{"the Redis key", "the fencing counter", "the queue of waiting acquisitions"}
	for i, key := range keys {
		r := must(t, 0, nil, url, "show", key)
		note := "guardctl: " + strconv.Quote(key) + " is " + whats[i] + ` of lock "nightly-report"; using the lock name` + "\n"
		if r.stderr != note {
			t.Errorf("show %s: stderr %q, want %q", key, r.stderr, note)
		}
		for _, want := range []string{"lock             nightly-report\n", "redis key        guard:{nightly-report}\n", "web-1/4242", "web-3/91"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("show %s lacks %q:\n%s", key, want, r.stdout)
			}
		}
	}

	// watch: its first snapshot is the lock's.
	watch := exec.Command(bin, url, "watch", "--json", "guard:{nightly-report}")
	var stderr bytes.Buffer
	watch.Stderr = &stderr
	out, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	_ = watch.Process.Signal(syscall.SIGINT)
	if werr := watch.Wait(); werr != nil {
		t.Errorf("watch after an interrupt: %v; stderr %s", werr, stderr.String())
	}
	var st lockJSON
	if err != nil || json.Unmarshal([]byte(line), &st) != nil || st.Key != "nightly-report" || len(st.Holders) != 1 {
		t.Errorf("watch guard:{nightly-report} printed %q (%v)", line, err)
	}
	if !strings.Contains(stderr.String(), `"guard:{nightly-report}" is the Redis key of lock "nightly-report"; using the lock name`) {
		t.Errorf("watch: stderr %q", stderr.String())
	}

	// release: refused without --force, naming the lock; then done.
	r := must(t, 1, nil, url, "release", "guard:{nightly-report}")
	if notes := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n"); len(notes) != 2 ||
		!strings.HasSuffix(notes[0], "using the lock name") || !strings.Contains(notes[1], `refusing to release "nightly-report" without --force`) {
		t.Errorf("release of a pasted key without --force: stderr %q", r.stderr)
	}
	r = must(t, 0, nil, url, "release", "--force", "guard:{nightly-report}")
	if !strings.HasPrefix(r.stdout, `ended 1 hold of "nightly-report"`) ||
		r.stderr != `guardctl: "guard:{nightly-report}" is the Redis key of lock "nightly-report"; using the lock name`+"\n" {
		t.Errorf("release of a pasted key:\n%s\nstderr %q", r.stdout, r.stderr)
	}
	select {
	case w := <-got:
		if w != nil {
			_ = w.Release(context.Background())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never got the released lock")
	}

	// Under --prefix, the key of that prefix.
	team := newLocker(t, client, guard.WithPrefix("team:"), guard.WithIdentity("team-a"))
	tl := acquire(t, t.Context(), team, "report")
	t.Cleanup(func() { _ = tl.Release(context.Background()) })
	r = must(t, 0, nil, url, "--prefix", "team:", "show", "team:{report}")
	if !strings.Contains(r.stdout, "team-a") || !strings.Contains(r.stderr, `lock "report"; using the lock name`) {
		t.Errorf("show team:{report} --prefix team::\n%s\nstderr %q", r.stdout, r.stderr)
	}

	// Keys that name no lock under the prefix: a usage error, before any request.
	for _, tc := range []struct{ arg, stderr string }{
		{"team:{report}", `under the prefix "team:", not under --prefix "guard:": pass --prefix "team:" and the name "report"`},
		{"guard:{report}:claim", `is the claim (guard.Claim) of "report", not a lock`},
		{"guard:{report}x", `pass the name "report"`},
		{"guard:{}", "nothing is between the braces"},
		{"report}", "(guard:{NAME})"},
	} {
		for _, cmd := range []string{"show", "watch", "release"} {
			r := must(t, 2, nil, url, cmd, tc.arg, "--force")
			if !strings.Contains(r.stderr, tc.stderr) || strings.Contains(r.stderr, "using the lock name") {
				t.Errorf("%s %s: stderr %q, want it to contain %q", cmd, tc.arg, r.stderr, tc.stderr)
			}
		}
	}
}

func TestWatch(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv.Client(t), guard.WithIdentity("watched"))
	cmd := exec.Command(bin, "--url=redis://"+srv.Addr(), "watch", "w", "--json", "--interval", "100ms")
	cmd.Env = os.Environ()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan lockJSON)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var st lockJSON
			if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
				t.Errorf("watch printed %q: %v", sc.Text(), err)
				return
			}
			lines <- st
		}
	}()
	next := func(what string) lockJSON {
		t.Helper()
		select {
		case st, ok := <-lines:
			if !ok {
				t.Fatalf("watch ended before %s; stderr: %s", what, stderr.String())
			}
			return st
		case <-time.After(10 * time.Second):
			t.Fatalf("watch printed nothing for %s", what)
		}
		return lockJSON{}
	}
	if st := next("the free key"); len(st.Holders) != 0 {
		t.Fatalf("first snapshot %+v; want free", st)
	}
	le := acquire(t, t.Context(), l, "w")
	if st := next("the acquisition"); len(st.Holders) != 1 || st.Holders[0].Identity != "watched" || st.Holders[0].Token != le.Token() {
		t.Fatalf("after acquire: %+v", st)
	}
	if err := le.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := next("the release"); len(st.Holders) != 0 || st.Fence != le.Token() {
		t.Fatalf("after release: %+v", st)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range lines { // unchanged until the end: nothing more
		t.Error("watch printed a snapshot of an unchanged lock")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch after an interrupt: %v; want exit 0; stderr: %s", err, stderr.String())
	}
}

func TestBadInput(t *testing.T) {
	srv := redistest.Start(t)
	if err := srv.Client(t).Set(t.Context(), "guard:{str}", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	url := "--url=redis://" + srv.Addr()
	closed := closedPort(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, 2, "no command given"},
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"show"}, 2, "show takes one lock key"},
		{[]string{"show", "a", "b"}, 2, "show takes one lock key"},
		{[]string{"ls", "a", "b"}, 2, "at most one pattern"},
		{[]string{"--bogus", "ls"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"ls", "--timeout", "soon"}, 2, "invalid value"},
		{[]string{"--timeout", "0", "ls"}, 2, "--timeout 0s must be above 0"},
		{[]string{"--interval", "1ms", "watch", "k"}, 2, "--interval 1ms must be between"},
		{[]string{"--prefix", "a{", "ls"}, 2, "must not contain"},
		{[]string{"--url", "localhost:6379", "show", "k"}, 2, "has no scheme"},
		{[]string{"--url", "http://localhost", "show", "k"}, 2, `unknown scheme "http"`},
		{[]string{"--url", "redis://localhost/x/y", "show", "k"}, 2, "bad Redis URL"},
		{[]string{"--url", "redis://:s3cret@localhost/?bogus=1", "show", "k"}, 2, "bad Redis URL"},
		{[]string{"--url", "redis-sentinel://localhost:26379", "show", "k"}, 2, "name the master"},
		{[]string{"--url", "redis-cluster://localhost:7000/3", "show", "k"}, 2, "no database"},
		{[]string{"--url", "redis://" + closed, "show", "k"}, 2, "connection refused"},
		{[]string{url, "show", "a}b"}, 2, "'}'"},
		{[]string{url, "ls", "a}"}, 2, "'}'"},
		{[]string{url, "show", "str"}, 1, "is not a lock"},
		{[]string{url, "release", "str", "--force"}, 1, "is not a lock"},
		{[]string{"release", "k"}, 1, "without --force"},
	} {
		r := must(t, tc.code, nil, tc.args...)
		if !strings.Contains(r.stderr, tc.stderr) || !strings.HasPrefix(r.stderr, "guardctl: ") {
			t.Errorf("guardctl %q: stderr %q, want it to contain %q", tc.args, r.stderr, tc.stderr)
		}
		if strings.Contains(r.stderr, "s3cret") {
			t.Errorf("guardctl %q: the password is in the message %q", tc.args, r.stderr)
		}
	}
	r := must(t, 0, nil, "help")
	if !strings.HasPrefix(r.stdout, "usage: guardctl") {
		t.Errorf("help: %q", r.stdout)
	}
	must(t, 0, nil, "ls", "-h")
}

// A server that accepts connections and never answers fails the command
// within its --timeout.
func TestUnreachableServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never answered
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for _, args := range [][]string{{"show", "k"}, {"ls"}, {"watch", "k"}, {"release", "k", "--force"}} {
		r := must(t, 2, nil, append([]string{"--url=redis://" + ln.Addr().String(), "--timeout=1s"}, args...)...)
		if !strings.Contains(r.stderr, "within --timeout 1s") {
			t.Errorf("%q: stderr %q", args, r.stderr)
		}
		if r.took > 10*time.Second {
			t.Errorf("%q took %v with --timeout 1s", args, r.took)
		}
	}
}

// closedPort returns an address on which nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	l := newLocker(t, cl.Client(t), guard.WithIdentity("on-cluster"))
	var names []string
	for i := range 12 {
		name := "job-" + strconv.Itoa(i)
		le := acquire(t, t.Context(), l, name)
		t.Cleanup(func() { _ = le.Release(context.Background()) })
		names = append(names, name)
	}
	url := "--url=redis-cluster://" + strings.Join(cl.Addrs(), ",")
	r := must(t, 0, nil, url, "ls", "--json")
	var locks []lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &locks); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range locks {
		got = append(got, st.Key)
	}
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("ls on Cluster = %q, want %q", got, names)
	}
	r = must(t, 0, nil, url, "show", "job-3")
	if !strings.Contains(r.stdout, "on-cluster") {
		t.Errorf("show on Cluster:\n%s", r.stdout)
	}
	// One address is enough to find the others.
	must(t, 0, nil, "--url=redis-cluster://"+cl.Addrs()[1], "show", "job-7")
}

// guardctl warns, on standard error after its answer, when the server may
// evict lock keys, naming the policy and what it evicts; it reads INFO,
// so a server whose CONFIG is renamed away is checked too. A server with
// noeviction gets no warning.
func TestEvictionWarning(t *testing.T) {
	for _, tc := range []struct {
		policy string
		args   []string
		evicts string // "" for no warning
	}{
		{"allkeys-lru", []string{"--rename-command", "CONFIG", ""}, "any key, a held lock and its fencing counter"},
		{"volatile-lru", nil, "keys with a TTL"},
		{"noeviction", nil, ""},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := redistest.Start(t, append([]string{"--maxmemory", "64mb", "--maxmemory-policy", tc.policy}, tc.args...)...)
			holder := newLocker(t, srv.Client(t), guard.WithIdentity("web-1/7"))
			le := acquire(t, t.Context(), holder, "job")
			defer func() { _ = le.Release(t.Context()) }()
			for _, args := range [][]string{{"show", "job"}, {"--json", "ls"}} {
				r := must(t, 0, nil, append([]string{"--url=redis://" + srv.Addr()}, args...)...)
				warned := strings.Contains(r.stderr, "guardctl: warning: ")
				if warned != (tc.evicts != "") {
					t.Fatalf("guardctl %q: warned %v, want %v; stderr:\n%s", args, warned, tc.evicts != "", r.stderr)
				}
				if warned && (!strings.Contains(r.stderr, "maxmemory-policy "+tc.policy+" evicts "+tc.evicts) || !strings.Contains(r.stderr, "noeviction")) {
					t.Errorf("guardctl %q: the warning does not name %s, what it evicts and the fix:\n%s", args, tc.policy, r.stderr)
				}
				if !strings.Contains(r.stdout, "web-1/7") { // the answer is on stdout all the same
					t.Errorf("guardctl %q: stdout lacks the holder:\n%s", args, r.stdout)
				}
			}
		})
	}
}
