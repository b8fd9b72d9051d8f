package exampleenv

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
}

// TestTracing runs one locked job on the embedded Redis and checks that its
// spans reach the writer, indented or not as asked.
func TestTracing(t *testing.T) {
	t.Setenv("REDIS_URL", "") // the embedded server, whatever the environment says
	for _, tc := range []struct {
		name   string
		pretty bool
		want   string
	}{
		{name: "compact", pretty: false, want: `"Name":"jobguard.run"`},
		{name: "pretty", pretty: true, want: `"Name": "jobguard.run"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dial, stop, err := Connect()
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			out := &Writer{}
			opts, shutdown, err := Tracing(out, tc.pretty)
			if err != nil {
				t.Fatal(err)
			}
			defer shutdown()
			c := dial()
			defer c.Close()
			l, err := guard.New(c, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := l.WithLock(t.Context(), "job", func(context.Context) error { return nil }); err != nil {
				t.Fatalf("WithLock: %v", err)
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("output lacks %s:\n%s", tc.want, out.String())
			}
		})
	}
}

// TestWriter writes from many goroutines at once; run it with -race.
func TestWriter(t *testing.T) {
	var w Writer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = w.Write([]byte("ab"))
				_ = w.String()
			}
		})
	}
	wg.Wait()
	if got := len(w.String()); got != 8*100*2 {
		t.Errorf("%d bytes, want %d", got, 8*100*2)
	}
}
