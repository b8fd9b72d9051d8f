package locks

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAwait checks the promise redislock-await stands for: a call whose
// context ends returns at once with the context's cause while the work
// goes on, and each result goes either to the caller or to abandoned,
// exactly once.
func TestAwait(t *testing.T) {
	t.Run("a finished call returns its error and abandons nothing", func(t *testing.T) {
		var w Workers
		defer w.Stop()
		errWork := errors.New("work's own error")
		err := w.Await(t.Context(), func(context.Context) error { return errWork }, func() { t.Error("abandoned after the caller took the result") })
		if !errors.Is(err, errWork) {
			t.Fatalf("Await: %v, want the work's error", err)
		}
	})

	t.Run("a canceled call returns while its work is blocked", func(t *testing.T) {
		var w Workers
		defer w.Stop()
		release, started, abandoned := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var once sync.Once
		unblock := func() { once.Do(func() { close(release) }) }
		defer unblock() // before Stop waits for the work
		cause := errors.New("the caller's cause")
		ctx, cancel := context.WithCancelCause(t.Context())
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
		cancel(cause)
		select {
		case err := <-returned:
			if !errors.Is(err, cause) {
				t.Fatalf("canceled call: %v, want the context's cause", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a canceled call did not return while its work was blocked")
		}
		unblock()
		select {
		case <-abandoned:
		case <-time.After(5 * time.Second):
			t.Fatal("the abandoned work's result was not handed to abandoned")
		}
	})

	t.Run("each result goes to the caller or to abandoned, once", func(t *testing.T) {
		var w Workers
		defer w.Stop()
		const calls = 2000
		var ran, delivered [calls]atomic.Int32
		var taken, canceled atomic.Int64
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				ctx, cancel := context.WithCancel(t.Context())
				go func() {
					time.Sleep(time.Duration(i%7) * time.Microsecond)
					cancel()
				}()
				err := w.Await(ctx, func(context.Context) error { ran[i].Add(1); return nil }, func() { delivered[i].Add(1) })
				switch {
				case err == nil:
					delivered[i].Add(1)
					taken.Add(1)
				case errors.Is(err, context.Canceled):
					canceled.Add(1)
				default:
					t.Errorf("Await: %v", err)
				}
			})
		}
		wg.Wait()
		w.Stop() // every abandoned call has run
		for i := range calls {
			// A call canceled before it was handed over runs nothing.
			if r, d := ran[i].Load(), delivered[i].Load(); r > 1 || d != r {
				t.Fatalf("call %d ran %d times and its result went out %d times", i, r, d)
			}
		}
		t.Logf("%d results taken by their callers, %d calls canceled", taken.Load(), canceled.Load())
	})

	t.Run("a context that cannot end runs on the caller's goroutine", func(t *testing.T) {
		var w Workers
		defer w.Stop()
		ran := false
		if err := w.Await(context.WithoutCancel(t.Context()), func(context.Context) error { ran = true; return nil }, nil); err != nil || !ran {
			t.Fatalf("Await: err %v, ran %v", err, ran)
		}
	})

	t.Run("an ended context or stopped workers run nothing", func(t *testing.T) {
		var w Workers
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		fn := func(context.Context) error { t.Error("ran"); return nil }
		if err := w.Await(ctx, fn, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("ended context: %v, want context.Canceled", err)
		}
		w.Stop()
		if err := w.Await(t.Context(), fn, nil); !errors.Is(err, ErrStopped) {
			t.Fatalf("after Stop: %v, want ErrStopped", err)
		}
	})
}
