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
			d := new(deadlineCtx)
			d.start(context.WithoutCancel(parent), tc.timeout)
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
