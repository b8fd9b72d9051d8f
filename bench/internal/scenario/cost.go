package scenario

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jobguard/jobguard/bench/internal/measure"
	"github.com/jobguard/jobguard/bench/internal/redisproc"
	"github.com/jobguard/jobguard/bench/internal/results"
)

// meter reads, around a measured window, what the server, the client
// process (CPU time and heap allocations) and a client's hook counted. The
// client's readings are taken inside the server's, so that the INFO
// commands the meter sends are not counted as the window's.
type meter struct {
	env     *Env
	counter *measure.Counter
	stats   redisproc.Stats
	cpu     time.Duration
	sleeps  int64
	allocs  measure.Allocs
	counts  measure.Counts
}

// startMeter takes the readings at the start of a window.
func startMeter(ctx context.Context, env *Env, counter *measure.Counter) (*meter, error) {
	m := &meter{env: env, counter: counter}
	var err error
	m.stats, err = env.Stats(ctx)
	m.allocs = measure.ReadAllocs()
	m.cpu, m.sleeps, m.counts = measure.ProcessCPU(), measure.ThreadSleeps(), counter.Read()
	return m, err
}

// usage is what a meter saw over its window.
type usage struct {
	stats     redisproc.Stats // delta, without the harness's own commands
	clientCPU time.Duration
	sleeps    int64 // the client process's threads', voluntary
	allocs    measure.Allocs
	counts    measure.Counts
}

// stop takes the readings at the end of the window.
func (m *meter) stop(ctx context.Context) (usage, error) {
	cpu, sleeps, counts := measure.ProcessCPU(), measure.ThreadSleeps(), m.counter.Read()
	allocs := measure.ReadAllocs()
	st, err := m.env.Stats(ctx)
	if err != nil {
		return usage{}, err
	}
	return usage{stats: st.Sub(m.stats, adminCommands...), clientCPU: cpu - m.cpu, sleeps: sleeps - m.sleeps,
		allocs: allocs.Sub(m.allocs), counts: counts.Sub(m.counts)}, nil
}

// perOp returns the usage divided over ops operations.
func (u usage) perOp(ops int64) results.Cost {
	n := float64(max(ops, 1))
	return results.Cost{
		ClientCPUUs:    measure.Micros(u.clientCPU) / n,
		ThreadSleeps:   float64(u.sleeps) / n,
		Allocs:         float64(u.allocs.Count) / n,
		AllocBytes:     float64(u.allocs.Bytes) / n,
		ServerCPUUs:    u.stats.CPUSeconds * 1e6 / n,
		ServerCalls:    float64(u.stats.Calls()) / n,
		ClientCommands: float64(u.counts.Commands) / n,
		RoundTrips:     float64(u.counts.RoundTrips) / n,
		Commands:       commands(u.stats, n),
	}
}

// commands lists the server's commands, most server time first.
func commands(st redisproc.Stats, ops float64) []results.Command {
	out := make([]results.Command, 0, len(st.Commands))
	for name, c := range st.Commands {
		out = append(out, results.Command{
			Name:        name,
			Calls:       c.Calls,
			Usec:        c.Usec,
			UsecPerCall: measure.Ratio(float64(c.Usec), float64(c.Calls)),
			CallsPerOp:  float64(c.Calls) / ops,
			UsecPerOp:   float64(c.Usec) / ops,
		})
	}
	slices.SortFunc(out, func(a, b results.Command) int {
		return cmp.Or(cmp.Compare(b.Usec, a.Usec), strings.Compare(a.Name, b.Name))
	})
	return out
}
