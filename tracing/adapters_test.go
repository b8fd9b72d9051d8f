package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/cronguard"
	"github.com/jobguard/jobguard/httpguard"
)

// The adapters' standard attributes reach the run span.
func TestAdapterAttributes(t *testing.T) {
	r := newRig(t)

	mux := http.NewServeMux()
	mux.Handle("POST /orders", httpguard.Middleware(r.locker, httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k-1")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		t.Fatalf("POST: %d %s", rec.Code, rec.Body)
	}

	handler := asynqguard.Middleware(r.locker)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	if err := handler.ProcessTask(t.Context(), asynq.NewTask("email:welcome", []byte("42"))); err != nil {
		t.Fatal(err)
	}

	cronguard.Func(r.locker, "nightly-report", func(context.Context) error { return nil }, cronguard.Spec("@daily")).Run()

	want := map[string]string{
		"http.route":        "POST /orders",
		"messaging.system":  "asynq",
		"jobguard.cron.job": "nightly-report",
	}
	runs := r.ended("jobguard.run")
	if len(runs) != 3 {
		t.Fatalf("%d run spans, want 3", len(runs))
	}
	for key, value := range want {
		found := false
		for _, s := range runs {
			if v, ok := attr(s, key); ok && v.AsString() == value {
				found = true
			}
		}
		if !found {
			t.Errorf("no run span with %s=%q", key, value)
		}
	}
}
