package scenario

import (
	"testing"

	"github.com/jobguard/jobguard/bench/internal/results"
)

func TestThroughputOfTakesMedians(t *testing.T) {
	round := func(ops float64) results.ThroughputRound {
		return results.ThroughputRound{OpsPerSec: ops, Cost: results.Cost{ServerCPUUs: ops / 1000}}
	}
	ceiling := []results.ThroughputRound{round(100), round(200), round(100)}
	lib := []results.ThroughputRound{round(50), round(40), round(90)} // ratios 0.5, 0.2, 0.9
	got := throughputOf("x", 64, lib, ceiling)
	if got.Median != 0 || got.OpsPerSec != 50 || got.Cost.ServerCPUUs != 0.05 {
		t.Errorf("median round %d, ops/s %v, cost %v; want round 0, 50, 0.05", got.Median, got.OpsPerSec, got.Cost.ServerCPUUs)
	}
	if got.RatioToCeiling != 0.5 {
		t.Errorf("ratio %v, want the median of 0.5, 0.2, 0.9", got.RatioToCeiling)
	}
	if got.Rounds[1].Ratio != 0.2 {
		t.Errorf("round 2 ratio %v, want 0.2 (to its own turn's ceiling)", got.Rounds[1].Ratio)
	}
}
