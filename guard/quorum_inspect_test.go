package guard_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
)

// On a quorum, Inspect shows a hold a majority has (with one master down
// too), Scan lists each lock once, and ForceRelease ends the hold on a
// majority: the holder's job is told the lease is lost and the next token
// is still higher.
func TestQuorumInspectScanForceRelease(t *testing.T) {
	servers, addrs := startQuorum(t, 3)
	holder := newQuorumLocker(t, addrs, nil, guard.WithIdentity("holder"), guard.WithTTL(time.Second))
	operator := newQuorumLocker(t, addrs, nil, guard.WithIdentity("operator"))

	started := make(chan int64)
	jobErr := make(chan error, 1)
	go func() {
		jobErr <- holder.WithLock(context.Background(), "q-stuck", func(ctx context.Context) error {
			token, _ := guard.TokenFrom(ctx, "q-stuck")
			started <- token
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	token := <-started
	other := mustAcquire(t, t.Context(), operator, "q-other")
	defer mustRelease(t, other)

	st, err := operator.Inspect(t.Context(), "q-stuck")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || st.Holders[0].Identity != "holder" || st.Holders[0].Token != token || !st.Holders[0].Write || st.Fence < token {
		t.Fatalf("Inspect = %+v; want one write hold by %q with token %d", st, "holder", token)
	}
	if st.Holders[0].Left <= 0 || st.Holders[0].Left > time.Second {
		t.Errorf("time left %v, want within the 1s TTL", st.Holders[0].Left)
	}
	var names []string
	if err := operator.Scan(t.Context(), "q-*", func(st guard.LockState) error {
		names = append(names, st.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"q-other", "q-stuck"}) {
		t.Errorf("Scan = %q, want each lock once", names)
	}

	servers[2].Kill(t) // a minority down: the majority still answers
	if st, err := operator.Inspect(t.Context(), "q-stuck"); err != nil || len(st.Holders) != 1 {
		t.Fatalf("Inspect with a master down = %+v, %v", st, err)
	}
	released, err := operator.ForceRelease(t.Context(), "q-stuck")
	if err != nil {
		t.Fatal(err)
	}
	if len(released.Holders) != 1 || released.Holders[0].Token != token {
		t.Errorf("ForceRelease released %+v, want the hold with token %d", released, token)
	}
	select {
	case err := <-jobErr:
		if !errors.Is(err, guard.ErrLeaseLost) {
			t.Errorf("job ended with %v, want ErrLeaseLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the holder's job was not told its lease was lost")
	}
	le := mustAcquire(t, t.Context(), operator, "q-stuck", guard.Wait(2*time.Second))
	defer mustRelease(t, le)
	if le.Token() <= token {
		t.Errorf("token after a forced release %d, want above %d", le.Token(), token)
	}
}
