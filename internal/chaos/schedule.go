package chaos

import (
	"hash/fnv"
	"math/rand/v2"
	"time"
)

// Step is one fault of a schedule: wait Gap, then inject Kind for
// Duration (how long a process stays stopped, a link stays cut or slow, a
// server stays down; ignored by faults that are one action).
type Step struct {
	Kind     string
	Gap      time.Duration
	Duration time.Duration
}

// Plan returns the schedule of one scenario: each of kinds times each,
// in an order and with gaps and durations drawn from seed and the
// scenario's name, so that a seed gives every scenario the same schedule
// on every run. Gaps are drawn from [gapMin, gapMax), durations from
// [durMin, durMax).
func Plan(seed uint64, scenario string, kinds []string, each int, gapMin, gapMax, durMin, durMax time.Duration) []Step {
	h := fnv.New64a()
	h.Write([]byte(scenario))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	var steps []Step
	for range each {
		for _, k := range kinds {
			steps = append(steps, Step{Kind: k})
		}
	}
	rng.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	for i := range steps {
		steps[i].Gap = between(gapMin, gapMax)
		steps[i].Duration = between(durMin, durMax)
	}
	return steps
}
