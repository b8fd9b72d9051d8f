package report

import (
	"strings"
	"testing"

	"github.com/jobguard/jobguard/bench/internal/measure"
	"github.com/jobguard/jobguard/bench/internal/results"
)

func TestPerTurn(t *testing.T) {
	rounds := func(ops ...float64) results.Throughput {
		var tp results.Throughput
		for _, v := range ops {
			tp.Rounds = append(tp.Rounds, results.ThroughputRound{OpsPerSec: v})
		}
		return tp
	}
	ops := func(r results.ThroughputRound) float64 { return r.OpsPerSec }
	tests := []struct {
		name        string
		lib, anchor results.Throughput
		want        float64
	}{
		{"median of each turn's ratio", rounds(50, 40, 90), rounds(100, 200, 100), 0.5}, // 0.5, 0.2, 0.9
		{"anchor 0 left out", rounds(50, 40), rounds(0, 100), 0.4},
		{"fewer anchor rounds", rounds(50, 40, 90), rounds(100), 0.5},
		{"no rounds", rounds(), rounds(), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := perTurn(tt.lib, tt.anchor, ops); got != tt.want {
				t.Errorf("perTurn = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSummaryNamesEachPart(t *testing.T) {
	lib := func(name string, p50, cpu float64) results.Sequential {
		return results.Sequential{Lib: name, Op: measure.Summary{P50us: p50}, Cost: results.Cost{ClientCPUUs: cpu}}
	}
	run := results.Run{
		Machine:    results.Machine{Date: "2026-11-26T00:00:00Z", Guard: "abc", GOMAXPROCS: 2, CPUs: 2, ClientCPU: -1, ServerCPU: -1},
		Sequential: []results.Sequential{lib("guard", 150, 30), lib("redislock", 100, 20)},
	}
	pinnedRun := run
	pinnedRun.Machine.GOMAXPROCS, pinnedRun.Machine.ClientCPU, pinnedRun.Machine.ServerCPU = 1, 0, 1
	run.Pinned = &pinnedRun
	var b strings.Builder
	summary(&b, run)
	for _, want := range []string{
		"GOMAXPROCS 2 of 2 CPUs, not pinned",
		"GOMAXPROCS 1 of 2 CPUs, pinned (client on CPU 0, each redis-server on CPU 1)",
		"| sequential, p50 µs | 150.0 (1.50×) | — | — | 100.0 (1.00×) | — |",
		"| sequential, client CPU µs/op | 30.0 (1.50×) |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}
