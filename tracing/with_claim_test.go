package tracing_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
)

// A WithClaim that runs is a run like WithLock's, with acquire and release
// children; one answered from its claim is a run skipped with result
// "claimed", status Unset, and nothing released.
func TestWithClaimSpans(t *testing.T) {
	r := newRig(t)
	job := func(context.Context) ([]byte, time.Duration, error) { return []byte("done"), time.Minute, nil }
	for range 2 {
		if _, err := r.locker.WithClaim(t.Context(), "order", []byte("A"), time.Minute, job); err != nil {
			t.Fatal(err)
		}
	}
	runs, acquires, releases := r.ended("jobguard.run"), r.ended("jobguard.lock.acquire"), r.ended("jobguard.lock.release")
	if len(runs) != 2 || len(acquires) != 2 || len(releases) != 1 {
		t.Fatalf("spans: %d run, %d acquire, %d release; want 2, 2, 1", len(runs), len(acquires), len(releases))
	}
	if releases[0].Parent().SpanID() != runs[0].SpanContext().SpanID() {
		t.Error("the release is not a child of the first run")
	}
	for i, want := range []string{"acquired", "claimed"} {
		if v, _ := attr(acquires[i], "jobguard.lock.acquire.result"); v.AsString() != want {
			t.Errorf("acquire %d result = %q, want %q", i+1, v.AsString(), want)
		}
		if runs[i].Status().Code != codes.Unset {
			t.Errorf("run %d status = %v, want Unset", i+1, runs[i].Status())
		}
	}
	if v, _ := attr(runs[1], "jobguard.lock.acquire.result"); v.AsString() != "claimed" {
		t.Errorf("claimed run result = %q", v.AsString())
	}
}
