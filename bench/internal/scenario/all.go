package scenario

import (
	"context"
	"slices"
	"time"

	"github.com/jobguard/jobguard/bench/internal/locks"
	"github.com/jobguard/jobguard/bench/internal/results"
)

// DefaultSizes are the sizes of a full run: about three minutes of cases
// when nothing needs a re-run.
func DefaultSizes() results.Sizes {
	return results.Sizes{
		FloorPings: 200,
		PingCount:  20000, PingWindow: 2 * time.Second,
		SeqOps: 5000, SeqWindow: 3 * time.Second,
		TPGoroutines: 64, TPOps: 2_000_000, TPWindow: 2 * time.Second, TPRounds: 3,
		HandoffWaiters: []int{8, 64}, HandoffHolds: []time.Duration{0, time.Millisecond},
		HandoffAcq: 200_000, HandoffWindow: 3 * time.Second,
		RetryDelay: time.Millisecond, TTL: 10 * time.Second,
		RenewLocks: 10_000, RenewWindow: 10 * time.Second,
		RenewTTL: 3 * time.Second, RenewEvery: time.Second,
		PoolSize:         128,
		MaxAttempts:      3,
		OthersCoresLimit: 0.1,
		FloorDriftLimit:  2,
	}
}

// QuickSizes run PING, sequential and throughput at about a third of the
// full size, and the hand-off at hold 1 ms only, for up to a second each; no
// renewal, and no re-runs: for working on the libraries, about 45 s
// on 2 cores with the pinned part. Their ratios are rougher than a full run's.
func QuickSizes() results.Sizes {
	s := DefaultSizes()
	s.FloorPings = 100
	s.PingCount, s.PingWindow = 5000, time.Second
	s.SeqOps, s.SeqWindow = 2000, time.Second
	s.TPWindow, s.TPRounds = time.Second, 2
	s.HandoffHolds, s.HandoffWindow = []time.Duration{time.Millisecond}, time.Second
	s.RenewLocks = 0
	s.MaxAttempts = 1
	return s
}

// CostsOnly returns s without the hand-off and renewal scenarios: what the
// pinned part of a run measures.
func CostsOnly(s results.Sizes) results.Sizes {
	s.HandoffWaiters, s.HandoffHolds, s.HandoffAcq = nil, nil, 0
	s.RenewLocks = 0
	return s
}

// TinySizes run every scenario in a few seconds, to keep the harness
// working; their numbers mean nothing.
func TinySizes() results.Sizes {
	s := DefaultSizes()
	s.FloorPings = 20
	s.PingCount, s.SeqOps, s.TPOps, s.HandoffAcq, s.RenewLocks = 50, 50, 50, 50, 50
	s.PingWindow, s.SeqWindow, s.TPWindow, s.HandoffWindow = 2*time.Second, 2*time.Second, 2*time.Second, 2*time.Second
	s.TPGoroutines, s.TPRounds = 8, 2
	s.RenewWindow = 2 * time.Second
	s.MaxAttempts = 1
	return s
}

// All runs every scenario for every library (see Runner.RunAll for
// re-runs) and combines the throughput rounds. Sizes without hand-off
// waiters or holds run no hand-off, and RenewLocks 0 runs no renewal.
func All(ctx context.Context, r *Runner) (results.Run, error) {
	libs := locks.Names()
	// A variant of a library is measured where it differs: one operation
	// at a time and many at once, not waiting or renewing.
	compared := slices.DeleteFunc(slices.Clone(libs), locks.IsVariant)
	s := r.Sizes
	run := results.Run{
		Sizes:      s,
		Sequential: make([]results.Sequential, len(libs)),
		Handoff:    make([]results.Handoff, len(s.HandoffWaiters)*len(s.HandoffHolds)*len(compared)),
	}
	if s.RenewLocks > 0 {
		run.Renewal = make([]results.Renewal, len(compared))
	}
	cases := []*Case{Ping(r, &run.Ping)}
	for i, lib := range libs {
		cases = append(cases, Sequential(r, lib, &run.Sequential[i]))
	}
	tpLibs := append([]string{Ceiling}, libs...)
	rounds := make([][]results.ThroughputRound, len(tpLibs)) // [lib][round]
	for i := range rounds {
		rounds[i] = make([]results.ThroughputRound, s.TPRounds)
	}
	for round := range s.TPRounds { // alternate the libraries, round by round
		for i, lib := range tpLibs {
			cases = append(cases, Throughput(r, lib, round, &rounds[i][round]))
		}
	}
	i := 0
	for _, waiters := range s.HandoffWaiters {
		for _, hold := range s.HandoffHolds {
			for _, lib := range compared {
				cases = append(cases, Handoff(r, lib, waiters, hold, &run.Handoff[i]))
				i++
			}
		}
	}
	for i := range run.Renewal {
		cases = append(cases, Renewal(r, compared[i], &run.Renewal[i]))
	}
	if err := r.RunAll(ctx, cases); err != nil {
		return run, err
	}
	run.Ceiling = throughputOf(Ceiling, s.TPGoroutines, rounds[0], rounds[0])
	for i, lib := range libs {
		run.Throughput = append(run.Throughput, throughputOf(lib, s.TPGoroutines, rounds[i+1], rounds[0]))
	}
	return run, nil
}
