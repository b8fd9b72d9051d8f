package locks

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAwaitReturnsWhenItsContextEnds checks the promise redislock-await
// stands for: a call whose context ends returns at once with the
// context's error while the work goes on, and what the abandoned work
// got is handed to abandoned; a call that ends first returns its result.
func TestAwaitReturnsWhenItsContextEnds(t *testing.T) {
	var w Workers
	defer w.Stop()

	errWork := errors.New("work's own error")
	if err := w.Await(t.Context(), func(context.Context) error { return errWork }, nil); !errors.Is(err, errWork) {
		t.Fatalf("completed call: %v, want the work's error", err)
	}

	release, started := make(chan struct{}), make(chan struct{})
	abandoned := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	returned := make(chan error, 1)
	go func() {
		returned <- w.Await(ctx, func(ctx context.Context) error {
			close(started)
			<-release
			if ctx.Err() != nil {
				t.Error("the work's context was canceled with its caller's")
			}
			return nil
		}, func() { close(abandoned) })
	}()
	<-started
	cancel()
	select {
	case err := <-returned:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled call: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a canceled call did not return while its work was blocked")
	}
	close(release)
	select {
	case <-abandoned:
	case <-time.After(5 * time.Second):
		t.Fatal("the abandoned work's result was not handed to abandoned")
	}

	done, cancelDone := context.WithCancel(t.Context())
	cancelDone()
	ran := false
	if err := w.Await(done, func(context.Context) error { ran = true; return nil }, nil); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("call under an ended context: err %v, ran %v; want context.Canceled and nothing run", err, ran)
	}
}
