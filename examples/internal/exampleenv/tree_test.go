package exampleenv

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestWriteTree checks the tree's layout on spans made up for it: nesting
// by parent span id, events and children in order of time, a span whose
// parent is missing printed as a root, and what attrs leaves out.
func TestWriteTree(t *testing.T) {
	origin := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return origin.Add(time.Duration(ms) * time.Millisecond) }
	sc := func(id byte) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{id}})
	}
	key := attribute.String("jobguard.lock.key", "report")
	stubs := tracetest.SpanStubs{
		{Name: "jobguard.lock.release", SpanContext: sc(3), Parent: sc(1), StartTime: at(1500), EndTime: at(1501)},
		{Name: "jobguard.run", SpanContext: sc(1), StartTime: at(0), EndTime: at(1502),
			Attributes: []attribute.KeyValue{
				attribute.Float64("jobguard.lock.ttl", 1), attribute.String("jobguard.lock.name", "report"),
				attribute.Bool("jobguard.lock.reentrant", false), key, attribute.String("http.route", "POST /orders"),
			},
			Events: []sdktrace.Event{{Name: "jobguard.lock.lost", Time: at(1200), Attributes: []attribute.KeyValue{attribute.String("error.type", "lease_lost")}}},
			Status: sdktrace.Status{Code: codes.Error, Description: "guard: lease lost"}},
		{Name: "jobguard.lock.acquire", SpanContext: sc(2), Parent: sc(1), StartTime: at(0), EndTime: at(2),
			Attributes: []attribute.KeyValue{attribute.Int64("jobguard.lock.fencing_token", 7)}},
		{Name: "job step", SpanContext: sc(4), Parent: sc(1), StartTime: at(10), EndTime: at(1100)},
		{Name: "orphan", SpanContext: sc(5), Parent: sc(9), StartTime: at(2000), EndTime: at(2000)},
	}
	var b strings.Builder
	writeTree(&b, origin, stubs.Snapshots())
	want := `--- 5 spans (start in seconds since tracing began, then duration)
jobguard.run  0.000s +1.502s  key=report http.route="POST /orders" ttl=1s  ERROR "guard: lease lost"
├─ jobguard.lock.acquire  0.000s +2ms  fencing_token=7
├─ job step  0.010s +1.09s
├─ * event jobguard.lock.lost  1.200s  error.type=lease_lost
└─ jobguard.lock.release  1.500s +1ms
orphan  2.000s +0s
`
	if got := b.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestSpanTree traces real lock operations, one nested in another's job,
// and checks the tree printed after them.
func TestSpanTree(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	dial, stop, err := Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	out := &Writer{}
	opts, print, err := SpanTree(out)
	if err != nil {
		t.Fatal(err)
	}
	c := dial()
	defer c.Close()
	l, err := guard.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	err = l.WithLock(t.Context(), "outer", func(ctx context.Context) error {
		return l.WithLock(ctx, "inner", func(context.Context) error { return nil })
	})
	if err != nil {
		t.Fatalf("WithLock: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	print()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	t.Logf("tree:\n%s", out.String())
	want := []string{
		"--- 6 spans ",
		"jobguard.run  ",
		"├─ jobguard.lock.acquire  ",
		"├─ jobguard.run  ",
		"│  ├─ jobguard.lock.acquire  ",
		"│  └─ jobguard.lock.release  ",
		"└─ jobguard.lock.release  ",
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d", len(lines), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q", i+1, lines[i], w)
		}
	}
	for i, k := range map[int]string{1: "key=outer", 3: "key=inner"} {
		if !strings.Contains(lines[i], k) {
			t.Errorf("line %d: %q lacks %s", i+1, lines[i], k)
		}
	}
}

// TestTraceFlag checks the values -trace takes.
func TestTraceFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want traceFlag
		bad  bool
	}{
		{args: nil, want: traceOff},
		{args: []string{"-trace"}, want: traceTree},
		{args: []string{"-trace=tree"}, want: traceTree},
		{args: []string{"-trace=json"}, want: traceJSON},
		{args: []string{"-trace=false"}, want: traceOff},
		{args: []string{"-trace=xml"}, bad: true},
	} {
		fs := flag.NewFlagSet("example", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f traceFlag
		fs.Var(&f, "trace", "")
		err := fs.Parse(tc.args)
		if (err != nil) != tc.bad || (!tc.bad && f != tc.want) {
			t.Errorf("%v: %q, %v; want %q, error %v", tc.args, f, err, tc.want, tc.bad)
		}
	}
}
