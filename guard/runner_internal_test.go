package guard

import (
	"context"
	"errors"
	"testing"
	"time"
)

type valueKey struct{}

// A deadlineCtx behaves as context.WithTimeout(context.WithoutCancel(ctx), d):
// the values of ctx, none of its cancellation, done at the deadline or
// when stopped, with the matching error, and contexts derived from it follow.
func TestDeadlineCtx(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		stop    bool
		want    error
	}{
		{"expires", 20 * time.Millisecond, false, context.DeadlineExceeded},
		{"stopped", time.Hour, true, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancelParent := context.WithCancel(context.WithValue(t.Context(), valueKey{}, "v"))
			cancelParent() // its cancellation does not carry over
			w := new(deadlines)
			t.Cleanup(w.stop)
			d := new(deadlineCtx)
			d.start(w, context.WithoutCancel(parent), tc.timeout)
			t.Cleanup(d.stop)
			if d.Value(valueKey{}) != "v" {
				t.Fatalf("Value = %v, want the parent's", d.Value(valueKey{}))
			}
			if dl, ok := d.Deadline(); !ok || time.Until(dl) > tc.timeout {
				t.Fatalf("Deadline = %v, %v", dl, ok)
			}
			if d.Err() != nil || context.Cause(d) != nil {
				t.Fatalf("done at once: Err %v, Cause %v", d.Err(), context.Cause(d))
			}
			child, cancelChild := context.WithCancel(d)
			defer cancelChild()
			if tc.stop {
				d.stop()
			}
			select {
			case <-d.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("not done")
			}
			<-child.Done()
			for name, err := range map[string]error{"Err": d.Err(), "Cause": context.Cause(d), "child's Err": child.Err()} {
				if !errors.Is(err, tc.want) {
					t.Errorf("%s = %v, want %v", name, err, tc.want)
				}
			}
			d.stop() // again: nothing changes
			if !errors.Is(d.Err(), tc.want) {
				t.Errorf("Err after a second stop = %v, want %v", d.Err(), tc.want)
			}
		})
	}
}

// The deadlineCtxs of a Locker share one timer: it is set for the earliest
// deadline pending, not again for a later one, not stopped when a request
// ends early; when it fires it ends what is due, never what is not, and is
// set for the earliest of the rest.
func TestDeadlinesShareOneTimer(t *testing.T) {
	w := new(deadlines)
	t.Cleanup(w.stop)
	armed := func() time.Time {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.armed
	}
	start := func(timeout time.Duration) *deadlineCtx {
		d := new(deadlineCtx)
		d.start(w, context.Background(), timeout)
		t.Cleanup(d.stop)
		return d
	}
	late := start(time.Hour)
	if armed() != late.deadline {
		t.Fatalf("armed %v, want the only deadline %v", armed(), late.deadline)
	}
	soon := start(200 * time.Millisecond)
	if armed() != soon.deadline {
		t.Fatalf("armed %v, want the earlier deadline %v", armed(), soon.deadline)
	}
	later := start(2 * time.Hour)
	ended := start(100 * time.Millisecond)
	ended.stop()
	if armed() != ended.deadline {
		t.Fatalf("armed %v after a start and a stop, want the earliest deadline ever pending %v", armed(), ended.deadline)
	}
	if !errors.Is(ended.Err(), context.Canceled) {
		t.Fatalf("stopped: Err = %v", ended.Err())
	}
	select {
	case <-soon.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the 200ms deadline did not end its context")
	}
	if now := time.Now(); now.Before(soon.deadline) {
		t.Fatalf("ended %v before its deadline", soon.deadline.Sub(now))
	}
	if !errors.Is(soon.Err(), context.DeadlineExceeded) {
		t.Fatalf("expired: Err = %v", soon.Err())
	}
	for _, d := range []*deadlineCtx{late, later} {
		if d.Err() != nil {
			t.Fatalf("a deadline %v away ended: %v", time.Until(d.deadline), d.Err())
		}
	}
	// Once the timer has fired it is set for the earliest pending deadline.
	for stop := time.Now().Add(10 * time.Second); armed() != late.deadline; time.Sleep(time.Millisecond) {
		if time.Now().After(stop) {
			t.Fatalf("armed %v after firing, want the earliest pending %v", armed(), late.deadline)
		}
	}
	again := start(30 * time.Millisecond)
	select {
	case <-again.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a deadline started after the timer fired did not end its context")
	}
	if !errors.Is(again.Err(), context.DeadlineExceeded) || time.Now().Before(again.deadline) {
		t.Fatalf("Err = %v, %v before its deadline", again.Err(), again.deadline.Sub(time.Now()))
	}
}
