package guard_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkQuorumAcquireRelease is one uncontended Acquire and Release of a
// free key on NewQuorum over 3 masters, and the same on New over one server,
// in the same run and interleaved op by op, so that both see the same load:
//
//	go test -run '^$' -bench QuorumAcquireRelease -benchtime 3s ./guard/
//
// It reports each one's time per operation and their ratio, and per
// operation the script calls the client sent and the commands the servers
// ran (inside scripts too; all masters together for the quorum).
func BenchmarkQuorumAcquireRelease(b *testing.B) {
	servers := redistest.StartMasters(b, 4)
	single, _ := benchLocker(b, servers[3].Addr())
	addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
	quorum := newQuorumLocker(b, addrs, nil)
	op := func(l *guard.Locker, key string) time.Duration { return timedAcquireRelease(b, l, key) }
	for i := range 100 { // load the scripts, open the connections
		op(single, fmt.Sprint("warm-", i))
		op(quorum, fmt.Sprint("warm-", i))
	}
	time.Sleep(50 * time.Millisecond) // let the requests not waited for land
	before := commandStats(b, servers)
	var tSingle, tQuorum time.Duration
	for i := 0; b.Loop(); i++ {
		key := "bench-" + strconv.Itoa(i) // a free key each time
		tSingle += op(single, key)
		tQuorum += op(quorum, key)
	}
	time.Sleep(50 * time.Millisecond)
	after := commandStats(b, servers)
	n := float64(b.N)
	b.ReportMetric(micros(tSingle)/n, "new1-µs/op")
	b.ReportMetric(micros(tQuorum)/n, "quorum3-µs/op")
	b.ReportMetric(float64(tQuorum)/float64(tSingle), "ratio")
	per := func(servers []int, stat int) float64 {
		var d int64
		for _, s := range servers {
			d += after[s][stat] - before[s][stat]
		}
		return float64(d) / n
	}
	b.ReportMetric(per([]int{3}, 0), "new1-cmds/op")
	b.ReportMetric(per([]int{3}, 1), "new1-scripts/op")
	b.ReportMetric(per([]int{0, 1, 2}, 0), "quorum3-cmds/op")
	b.ReportMetric(per([]int{0, 1, 2}, 1), "quorum3-scripts/op")
}

// commandStats returns, per server, the commands it ran (INFO
// commandstats, less INFO itself) and the script calls it was sent (FCALL,
// EVALSHA, EVAL).
func commandStats(b *testing.B, servers []*redistest.Server) [][2]int64 {
	b.Helper()
	out := make([][2]int64, len(servers))
	for i, s := range servers {
		c := s.Client(b, func(o *redis.Options) { o.Protocol = 2 })
		info, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
			if !ok || name == "info" {
				continue
			}
			calls, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			out[i][0] += calls
			if name == "fcall" || name == "evalsha" || name == "eval" {
				out[i][1] += calls
			}
		}
	}
	return out
}
