package guard_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// BenchmarkPermits measures what a permit costs next to a plain lock, in
// the same run on the same client, so that the machine's load falls on both
// alike.
//
// free: one uncontended Acquire and Release of a free permit (Permits(4))
// and of a plain lock, alternating (which goes first alternates too), each
// timed on its own; permit/plain is the ratio of their median times, which
// a burst of load on a shared machine moves less than the means (reported
// too). Target: <= 1.1.
//
// handoff: 64 waiters on 4 Lockers loop Acquire → Release on one key with
// Permits(4), as BenchmarkHandOff does for a plain lock; cmds/acq counts the
// commands clients sent per acquisition. Target: <= 4.
func BenchmarkPermits(b *testing.B) {
	b.Run("free", benchFreePermit)
	for _, waiters := range []int{8, 64} {
		b.Run(fmt.Sprintf("handoff/lockers=4/waiters=%d/permits=4", waiters), func(b *testing.B) {
			benchHandOff(b, 4, waiters, guard.Permits(4))
		})
	}
}

func benchFreePermit(b *testing.B) {
	l, _ := benchLocker(b, redistest.Start(b).Addr())
	ctx := b.Context()
	permit := guard.Permits(4)
	round := func(key string, opts ...guard.LockOption) time.Duration {
		start := time.Now()
		le, err := l.Acquire(ctx, key, opts...)
		if err != nil {
			b.Fatal(err)
		}
		if err := le.Release(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for range 100 { // warm up: scripts loaded, connection open
		round("plain")
		round("permit", permit)
	}
	var plain, permits []time.Duration
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			plain = append(plain, round("plain"))
			permits = append(permits, round("permit", permit))
		} else {
			permits = append(permits, round("permit", permit))
			plain = append(plain, round("plain"))
		}
	}
	mean := func(ds []time.Duration) time.Duration {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return sum / time.Duration(len(ds))
	}
	b.ReportMetric(micros(mean(plain)), "plain-mean-µs")
	b.ReportMetric(micros(mean(permits)), "permit-mean-µs")
	slices.Sort(plain)
	slices.Sort(permits)
	p50plain, p50permit := percentile(plain, 0.5), percentile(permits, 0.5)
	b.ReportMetric(micros(p50plain), "plain-p50-µs")
	b.ReportMetric(micros(p50permit), "permit-p50-µs")
	b.ReportMetric(float64(p50permit)/float64(p50plain), "permit/plain")
}
