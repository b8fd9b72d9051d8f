package guard_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkQuorumAcquireRelease is one uncontended Acquire and Release on
// NewQuorum over 3 masters, and the same on New over one server, in the same
// run and interleaved op by op, so that both see the same load:
//
//	go test -run '^$' -bench QuorumAcquireRelease -benchtime 3s ./guard/
//
// It reports each one's time per operation, their ratio, and the commands
// the servers processed per operation (all masters together for the quorum).
func BenchmarkQuorumAcquireRelease(b *testing.B) {
	servers := redistest.StartMasters(b, 4)
	single, _ := benchLocker(b, servers[3].Addr())
	addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
	quorum := newQuorumLocker(b, addrs, nil)
	ctx := b.Context()
	op := func(l *guard.Locker) time.Duration {
		start := time.Now()
		le, err := l.Acquire(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := le.Release(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for range 100 { // load the scripts, open the connections
		op(single)
		op(quorum)
	}
	time.Sleep(50 * time.Millisecond) // let write-backs not waited for land
	before := commandCounts(b, servers)
	var tSingle, tQuorum time.Duration
	for b.Loop() {
		tSingle += op(single)
		tQuorum += op(quorum)
	}
	time.Sleep(50 * time.Millisecond)
	after := commandCounts(b, servers)
	n := float64(b.N)
	b.ReportMetric(micros(tSingle)/n, "new1-µs/op")
	b.ReportMetric(micros(tQuorum)/n, "quorum3-µs/op")
	b.ReportMetric(float64(tQuorum)/float64(tSingle), "ratio")
	b.ReportMetric(float64(after[3]-before[3])/n, "new1-cmds/op")
	b.ReportMetric(float64(after[0]+after[1]+after[2]-before[0]-before[1]-before[2])/n, "quorum3-cmds/op")
}

// commandCounts returns each server's total_commands_processed, less the
// INFO calls of this function.
func commandCounts(b *testing.B, servers []*redistest.Server) []int64 {
	b.Helper()
	counts := make([]int64, len(servers))
	for i, s := range servers {
		c := s.Client(b, func(o *redis.Options) { o.Protocol = 2 })
		info, err := c.Info(context.Background(), "stats").Result()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
				counts[i], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return counts
}
