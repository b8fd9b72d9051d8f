package tracing_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tracing"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
}

// rig is a Locker reporting to an in-memory span recorder and metric reader.
type rig struct {
	locker *guard.Locker
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
	addr   string
}

func newRig(t *testing.T, opts ...guard.Option) *rig {
	t.Helper()
	r := &rig{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), addr: redistest.Start(t).Addr()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	obs := tracing.New(tracing.WithTracerProvider(r.tp), tracing.WithMeterProvider(mp))
	r.locker = newLocker(t, r.addr, append(opts, guard.WithObserver(obs))...)
	t.Cleanup(func() {
		_ = r.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return r
}

// newLocker returns a Locker on its own client, both closed when the test ends.
func newLocker(t testing.TB, addr string, opts ...guard.Option) *guard.Locker {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr})
	l, err := guard.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(); _ = client.Close() })
	return l
}

func (r *rig) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func TestSpanTreeOfARun(t *testing.T) {
	r := newRig(t)
	tracer := r.tp.Tracer("job")
	err := r.locker.WithLock(t.Context(), "report", func(ctx context.Context) error {
		_, span := tracer.Start(ctx, "job.work")
		span.End()
		return nil
	}, guard.Name("report"), guard.Attrs(slog.String("http.route", "POST /reports")))
	if err != nil {
		t.Fatal(err)
	}
	runs, acquires, releases, work := r.ended("jobguard.run"), r.ended("jobguard.lock.acquire"), r.ended("jobguard.lock.release"), r.ended("job.work")
	if len(runs) != 1 || len(acquires) != 1 || len(releases) != 1 || len(work) != 1 {
		t.Fatalf("spans: %d run, %d acquire, %d release, %d job; want 1 each", len(runs), len(acquires), len(releases), len(work))
	}
	run := runs[0]
	for _, child := range []sdktrace.ReadOnlySpan{acquires[0], releases[0], work[0]} {
		if child.Parent().SpanID() != run.SpanContext().SpanID() {
			t.Errorf("%s is not a child of jobguard.run", child.Name())
		}
	}
	if v, _ := attr(run, "jobguard.lock.key"); v.AsString() != "report" {
		t.Errorf("run key attribute = %q", v.AsString())
	}
	if v, _ := attr(run, "http.route"); v.AsString() != "POST /reports" {
		t.Errorf("adapter attribute http.route = %q, want it on the run span", v.AsString())
	}
	if v, _ := attr(acquires[0], "jobguard.lock.acquire.result"); v.AsString() != "acquired" {
		t.Errorf("acquire result = %q", v.AsString())
	}
	if v, ok := attr(acquires[0], "jobguard.lock.fencing_token"); !ok || v.AsInt64() < 1 {
		t.Errorf("acquire span has no fencing token")
	}
	if run.Status().Code != codes.Unset {
		t.Errorf("run status = %v, want Unset", run.Status())
	}
}

func TestManyRenewalsStillThreeSpans(t *testing.T) {
	r := newRig(t, guard.WithTTL(300*time.Millisecond), guard.WithRenewInterval(30*time.Millisecond))
	err := r.locker.WithLock(t.Context(), "long", func(ctx context.Context) error {
		time.Sleep(1700 * time.Millisecond) // about 55 renewals
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.spans.Ended()); n != 3 {
		t.Fatalf("%d spans after a long run, want 3 (run, acquire, release)", n)
	}
	renewals, _ := attr(r.ended("jobguard.run")[0], "jobguard.lock.renewals")
	if renewals.AsInt64() < 50 {
		t.Fatalf("renewals attribute = %d, want >= 50", renewals.AsInt64())
	}
}

func TestLostLeaseIsAnErrorWithAnEvent(t *testing.T) {
	r := newRig(t, guard.WithTTL(600*time.Millisecond))
	admin := redis.NewClient(&redis.Options{Addr: r.addr})
	defer admin.Close()
	err := r.locker.WithLock(t.Context(), "lost", func(ctx context.Context) error {
		if err := admin.Del(ctx, "guard:{lost}").Err(); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, guard.ErrLeaseLost) {
		t.Fatalf("err = %v", err)
	}
	run := r.ended("jobguard.run")[0]
	if run.Status().Code != codes.Error {
		t.Errorf("run status = %v, want Error", run.Status())
	}
	if v, _ := attr(run, "error.type"); v.AsString() != "lease_lost" {
		t.Errorf("error.type = %q, want lease_lost", v.AsString())
	}
	var lostEvent bool
	for _, e := range run.Events() {
		lostEvent = lostEvent || e.Name == "jobguard.lock.lost"
	}
	if !lostEvent {
		t.Errorf("run span events %v: want jobguard.lock.lost", run.Events())
	}
}

func TestSkippedRunLeavesStatusUnset(t *testing.T) {
	r := newRig(t)
	other := newLocker(t, r.addr)
	held, err := other.Acquire(t.Context(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	err = r.locker.WithLock(t.Context(), "busy", func(context.Context) error { return nil }, guard.Wait(0))
	if !errors.Is(err, guard.ErrNotAcquired) {
		t.Fatalf("err = %v", err)
	}
	run := r.ended("jobguard.run")[0]
	if run.Status().Code != codes.Unset {
		t.Errorf("skipped run status = %v, want Unset", run.Status())
	}
	if v, _ := attr(r.ended("jobguard.lock.acquire")[0], "jobguard.lock.acquire.result"); v.AsString() != "busy" {
		t.Errorf("acquire result = %q, want busy", v.AsString())
	}
}

func TestJobErrorMarksTheRun(t *testing.T) {
	r := newRig(t)
	err := r.locker.WithLock(t.Context(), "failing", func(context.Context) error { return errors.New("disk full") })
	if err == nil {
		t.Fatal("want the job's error")
	}
	run := r.ended("jobguard.run")[0]
	if v, _ := attr(run, "error.type"); run.Status().Code != codes.Error || v.AsString() != "_OTHER" {
		t.Errorf("run status %v, error.type %q; want Error, _OTHER", run.Status(), v.AsString())
	}
}

func TestMetrics(t *testing.T) {
	r := newRig(t)
	for range 3 {
		if err := r.locker.WithLock(t.Context(), "tenant-42/report", func(context.Context) error { return nil }, guard.Name("report")); err != nil {
			t.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != tracing.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, tracing.ScopeName)
		}
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	for name, unit := range map[string]string{
		"jobguard.lock.acquire.duration":   "s",
		"jobguard.lock.hold.duration":      "s",
		"jobguard.lock.operation.duration": "s",
		"jobguard.lock.count":              "{lock}",
	} {
		m, ok := got[name]
		if !ok {
			t.Errorf("no instrument %s", name)
			continue
		}
		if m.Unit != unit {
			t.Errorf("%s unit %q, want %q", name, m.Unit, unit)
		}
	}
	acquire := got["jobguard.lock.acquire.duration"].Data.(metricdata.Histogram[float64])
	if len(acquire.DataPoints) != 1 || acquire.DataPoints[0].Count != 3 {
		t.Fatalf("acquire duration points %+v, want one series with 3", acquire.DataPoints)
	}
	attrs := acquire.DataPoints[0].Attributes
	if v, _ := attrs.Value("jobguard.lock.name"); v.AsString() != "report" {
		t.Errorf("metric name attribute %q, want report", v.AsString())
	}
	if v, _ := attrs.Value("jobguard.lock.acquire.result"); v.AsString() != "acquired" {
		t.Errorf("metric result attribute %q", v.AsString())
	}
	hold := got["jobguard.lock.hold.duration"].Data.(metricdata.Histogram[float64])
	if v, _ := hold.DataPoints[0].Attributes.Value("jobguard.lock.hold.result"); v.AsString() != "released" {
		t.Errorf("hold result %q, want released", v.AsString())
	}
	ops := got["jobguard.lock.operation.duration"].Data.(metricdata.Histogram[float64])
	seen := map[string]uint64{}
	for _, dp := range ops.DataPoints {
		op, _ := dp.Attributes.Value("jobguard.lock.operation")
		seen[op.AsString()] += dp.Count
	}
	if seen["acquire"] < 3 || seen["release"] < 3 {
		t.Errorf("operation round trips %v, want >= 3 acquire and release", seen)
	}
	count := got["jobguard.lock.count"].Data.(metricdata.Sum[int64])
	for _, dp := range count.DataPoints {
		if dp.Value != 0 {
			t.Errorf("lock count %v = %d after every run ended, want 0", dp.Attributes.ToSlice(), dp.Value)
		}
	}
	// No key (which may carry ids) on any metric.
	for name, m := range got {
		for _, set := range attributeSets(m) {
			if _, ok := set.Value("jobguard.lock.key"); ok {
				t.Errorf("%s carries the lock key", name)
			}
		}
	}
}

func attributeSets(m metricdata.Metrics) []attribute.Set {
	var out []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	}
	return out
}

func TestErrorType(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{guard.ErrLeaseLost, "lease_lost"},
		{errors.Join(guard.ErrNotAcquired, context.Canceled), "not_acquired"},
		{context.DeadlineExceeded, "deadline_exceeded"},
		{errors.New("other"), "_OTHER"},
	} {
		if got := tracing.ErrorType(tc.err); got != tc.want {
			t.Errorf("ErrorType(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// An operation on another key inside a job names its key.
func TestNestedOperationOnAnotherKey(t *testing.T) {
	r := newRig(t)
	err := r.locker.WithLock(t.Context(), "outer", func(ctx context.Context) error {
		le, err := r.locker.Acquire(ctx, "inner")
		if err != nil {
			return err
		}
		return le.Release(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]int{}
	for _, s := range r.spans.Ended() {
		if s.Name() == "jobguard.lock.acquire" || s.Name() == "jobguard.lock.release" {
			v, _ := attr(s, "jobguard.lock.key")
			keys[v.AsString()]++
		}
	}
	// The outer run's own children inherit its key; the inner ones carry theirs.
	if keys["inner"] != 2 || keys[""] != 2 {
		t.Fatalf("acquire/release spans by key attribute %v, want inner:2 and 2 children of the outer run", keys)
	}
}

// A run that could not acquire because Redis refused is an Error, not a skip.
func TestFailedAcquisitionMarksTheRun(t *testing.T) {
	r := newRig(t)
	admin := redis.NewClient(&redis.Options{Addr: r.addr})
	defer admin.Close()
	if err := admin.Set(t.Context(), "guard:{str}", "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := r.locker.WithLock(t.Context(), "str", func(context.Context) error { return nil })
	if !errors.Is(err, guard.ErrWrongType) {
		t.Fatalf("err = %v", err)
	}
	run := r.ended("jobguard.run")[0]
	if v, _ := attr(run, "error.type"); run.Status().Code != codes.Error || v.AsString() != "wrong_type" {
		t.Errorf("run status %v, error.type %q; want Error, wrong_type", run.Status(), v.AsString())
	}
	if _, ok := attr(run, "jobguard.lock.fencing_token"); ok {
		t.Error("a run that never acquired carries a fencing token")
	}
}

// A release that finds the lease gone marks its own span.
func TestFailedReleaseMarksTheReleaseSpan(t *testing.T) {
	r := newRig(t)
	admin := redis.NewClient(&redis.Options{Addr: r.addr})
	defer admin.Close()
	le, err := r.locker.Acquire(t.Context(), "gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Del(t.Context(), "guard:{gone}").Err(); err != nil {
		t.Fatal(err)
	}
	if err := le.Release(t.Context()); !errors.Is(err, guard.ErrNotHeld) {
		t.Fatalf("release err = %v, want ErrNotHeld", err)
	}
	rel := r.ended("jobguard.lock.release")
	if len(rel) != 1 {
		t.Fatalf("%d release spans, want 1", len(rel))
	}
	if v, _ := attr(rel[0], "error.type"); rel[0].Status().Code != codes.Error || v.AsString() != "not_held" {
		t.Errorf("release status %v, error.type %q; want Error, not_held", rel[0].Status(), v.AsString())
	}
	if v, _ := attr(rel[0], "jobguard.lock.key"); v.AsString() != "gone" {
		t.Errorf("release key attribute = %q, want gone (not inside a run)", v.AsString())
	}
}

// Every attribute given with guard.Attrs reaches the run span, however many.
func TestManyAttrsReachTheRunSpan(t *testing.T) {
	r := newRig(t)
	var given []slog.Attr
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		given = append(given, slog.String("test."+k, k))
	}
	if err := r.locker.WithLock(t.Context(), "attrs", func(context.Context) error { return nil }, guard.Attrs(given...)); err != nil {
		t.Fatal(err)
	}
	run := r.ended("jobguard.run")[0]
	for _, a := range given {
		if v, _ := attr(run, a.Key); v.AsString() != a.Value.String() {
			t.Errorf("%s = %q, want %q", a.Key, v.AsString(), a.Value.String())
		}
	}
	if v, _ := attr(run, "jobguard.lock.key"); v.AsString() != "attrs" {
		t.Errorf("key attribute = %q", v.AsString())
	}
}
