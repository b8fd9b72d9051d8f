package scenario

import (
	"context"
	"time"

	"github.com/jobguard/jobguard/bench/internal/locks"
	"github.com/jobguard/jobguard/bench/internal/results"
)

// DefaultSizes are the sizes of a full run: about two and a half minutes
// of cases when nothing needs a re-run.
func DefaultSizes() results.Sizes {
	return results.Sizes{
		FloorPings: 200,
		PingCount:  20000, PingWindow: 2 * time.Second,
		SeqOps: 5000, SeqWindow: 3 * time.Second,
		TPGoroutines: 64, TPOps: 2_000_000, TPWindow: 3 * time.Second,
		HandoffWaiters: []int{8, 64}, HandoffHolds: []time.Duration{0, time.Millisecond},
		HandoffAcq: 200_000, HandoffWindow: 3 * time.Second,
		RetryDelay: time.Millisecond, TTL: 10 * time.Second,
		RenewLocks: 10_000, RenewWindow: 10 * time.Second,
		RenewTTL: 3 * time.Second, RenewEvery: time.Second,
		PoolSize:         128,
		MaxAttempts:      3,
		OthersCoresLimit: 0.25,
		FloorDriftLimit:  2,
	}
}

// TinySizes run every scenario in a few seconds, to keep the harness
// working; their numbers mean nothing.
func TinySizes() results.Sizes {
	s := DefaultSizes()
	s.FloorPings = 20
	s.PingCount, s.SeqOps, s.TPOps, s.HandoffAcq, s.RenewLocks = 50, 50, 50, 50, 50
	s.PingWindow, s.SeqWindow, s.TPWindow, s.HandoffWindow = 2*time.Second, 2*time.Second, 2*time.Second, 2*time.Second
	s.TPGoroutines = 8
	s.RenewWindow = 2 * time.Second
	s.MaxAttempts = 1
	return s
}

// All runs every scenario for every library, in the order the report
// lists them, and fills in the ratios to the throughput ceiling.
func All(ctx context.Context, r *Runner) (results.Run, error) {
	run := results.Run{Sizes: r.Sizes}
	var err error
	if run.Ping, err = Ping(ctx, r); err != nil {
		return run, err
	}
	for _, lib := range locks.Names() {
		res, err := Sequential(ctx, r, lib)
		if err != nil {
			return run, err
		}
		run.Sequential = append(run.Sequential, res)
	}
	if run.Ceiling, err = Throughput(ctx, r, Ceiling); err != nil {
		return run, err
	}
	run.Ceiling.RatioToCeiling = 1
	for _, lib := range locks.Names() {
		res, err := Throughput(ctx, r, lib)
		if err != nil {
			return run, err
		}
		res.RatioToCeiling = res.OpsPerSec / run.Ceiling.OpsPerSec
		run.Throughput = append(run.Throughput, res)
	}
	for _, waiters := range r.Sizes.HandoffWaiters {
		for _, hold := range r.Sizes.HandoffHolds {
			for _, lib := range locks.Names() {
				res, err := Handoff(ctx, r, lib, waiters, hold)
				if err != nil {
					return run, err
				}
				run.Handoff = append(run.Handoff, res)
			}
		}
	}
	for _, lib := range locks.Names() {
		res, err := Renewal(ctx, r, lib)
		if err != nil {
			return run, err
		}
		run.Renewal = append(run.Renewal, res)
	}
	return run, nil
}
