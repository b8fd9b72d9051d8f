package chaos_test

import (
	"errors"
	"testing"

	"github.com/jobguard/jobguard/fence"
	"github.com/jobguard/jobguard/internal/chaos"
	"github.com/jobguard/jobguard/internal/redistest"
)

// The counter is fenced on both sides: a read with a token shuts out every
// lower token's write, and a write shuts out lower tokens' reads.
func TestResourceFencesBothSides(t *testing.T) {
	c := redistest.Start(t).Client(t)
	r, err := chaos.NewResource(c, "chaos:{counter}")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if v, err := r.Read(ctx, 10); err != nil || v != 0 {
		t.Fatalf("Read(10) = %d, %v; want 0, nil", v, err)
	}
	if err := r.Write(ctx, 9, 1); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Write(9) after Read(10) = %v, want ErrStale", err)
	}
	if err := r.Write(ctx, 10, 1); err != nil {
		t.Fatalf("Write(10) = %v", err)
	}
	if err := fence.NewRedis(c).Set(ctx, "chaos:{counter}", 5, 12, 0); err != nil {
		t.Fatal(err)
	}
	var stale *fence.StaleError
	if _, err := r.Read(ctx, 11); !errors.As(err, &stale) || stale.Newer != 12 {
		t.Fatalf("Read(11) after a Set with 12 = %v, want a StaleError naming 12", err)
	}
	if v, err := r.Read(ctx, 12); err != nil || v != 5 {
		t.Fatalf("Read(12) = %d, %v; want 5, nil", v, err)
	}
	if v, err := r.Value(ctx); err != nil || v != 5 {
		t.Fatalf("Value = %d, %v", v, err)
	}
	if _, err := chaos.NewResource(c, ""); err == nil {
		t.Error("NewResource accepted an empty key")
	}
}
