package guard_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
)

// BenchmarkWithClaim is one uncontended WithClaim on a fresh key whose job
// returns a result to store (two requests, as BenchmarkWithLock's), and one
// answered from a stored result (one request). Target: x2ping <= 1.15.
func BenchmarkWithClaim(b *testing.B) {
	bind := []byte("0123456789abcdef0123456789abcdef") // a SHA-256's length
	job := func(context.Context) ([]byte, time.Duration, error) { return []byte("result"), time.Minute, nil }
	var n atomic.Int64
	b.Run("fresh", func(b *testing.B) {
		benchSequential(b, 0, func(ctx context.Context, l *guard.Locker) error {
			_, err := l.WithClaim(ctx, "bench-"+strconv.FormatInt(n.Add(1), 10), bind, time.Minute, job)
			return err
		})
	})
	b.Run("stored", func(b *testing.B) {
		benchSequential(b, 0, func(ctx context.Context, l *guard.Locker) error {
			_, err := l.WithClaim(ctx, "bench-stored", bind, time.Minute, job)
			return err
		})
	})
}
