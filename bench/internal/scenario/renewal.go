package scenario

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/bench/internal/locks"
	"github.com/jobguard/jobguard/bench/internal/measure"
	"github.com/jobguard/jobguard/bench/internal/results"
)

// holdTimeout bounds taking (and, apart, releasing) all of the renewal
// scenario's locks.
const holdTimeout = 60 * time.Second

// parallel is how many goroutines take and release the renewal scenario's
// locks.
const parallel = 64

// Renewal is scenario 5: RenewLocks locks on distinct keys are taken, then
// held for RenewWindow while the library keeps them alive: guard on its
// heartbeat (TTL RenewTTL, so every RenewTTL/3), redsync and redislock with
// one goroutine per lock that extends it every RenewEvery. The raw
// baseline takes its locks with a TTL longer than the window and never
// renews; it has no owner check, so "lost" does not apply to it. Only the
// window is measured, not taking or releasing the locks.
func Renewal(r *Runner, lib string, out *results.Renewal) *Case {
	s := r.Sizes
	cfg := locks.Config{TTL: s.RenewTTL, RenewEvery: s.RenewEvery}
	if lib == "raw" {
		cfg = locks.Config{TTL: s.RenewWindow + holdTimeout}
	}
	q := func(rn *results.Renewal) *results.Quality { return &rn.Quality }
	return newCase("renewal "+lib, out, q, func(ctx context.Context, env *Env) (results.Renewal, error) {
		c, counter := env.Client()
		// Open the connections the locks will be taken on before the
		// baseline, so that the heap figures count the locks, not the pool.
		if err := warmPool(ctx, c, parallel); err != nil {
			return results.Renewal{}, err
		}
		l, err := locks.New(lib, c, cfg)
		if err != nil {
			return results.Renewal{}, err
		}
		res, err := holdAndRenew(ctx, s, env, counter, l)
		if cerr := l.Close(); err == nil {
			err = cerr
		}
		// The goroutines added while holding, less those still running once
		// every lock is released and the library closed.
		res.Goroutines -= runtime.NumGoroutine()
		res.Lib, res.Renews, res.TTLms = lib, lib != "raw", float64(cfg.TTL)/float64(time.Millisecond)
		return res, err
	})
}

// holdAndRenew takes the locks, measures the window while they are held
// and releases them. Its Goroutines are those running during the window.
func holdAndRenew(ctx context.Context, s results.Sizes, env *Env, counter *measure.Counter, l locks.Lib) (results.Renewal, error) {
	base := heap()
	start := time.Now()
	leases, err := holdAll(ctx, l, s.RenewLocks)
	if err != nil {
		return results.Renewal{}, err
	}
	res := results.Renewal{Locks: len(leases), AcquireSec: time.Since(start).Seconds()}
	m, err := startMeter(ctx, env, counter)
	if err != nil {
		return res, err
	}
	start = time.Now()
	select {
	case <-ctx.Done():
		_, _ = releaseAll(ctx, leases)
		return res, ctx.Err()
	case <-time.After(s.RenewWindow):
	}
	res.Seconds = time.Since(start).Seconds()
	res.Goroutines = runtime.NumGoroutine()
	u, err := m.stop(ctx)
	if err != nil {
		_, _ = releaseAll(ctx, leases)
		return res, err
	}
	held := heap()
	n := float64(max(len(leases), 1))
	res.HeapInuseMiB = float64(int64(held.HeapInuse)-int64(base.HeapInuse)) / (1 << 20)
	res.HeapPerLockB = float64(int64(held.HeapInuse)-int64(base.HeapInuse)) / n
	res.StackInuseMiB = float64(int64(held.StackInuse)-int64(base.StackInuse)) / (1 << 20)
	res.ServerCalls, res.ServerCPUSec = u.stats.Calls(), u.stats.CPUSeconds
	res.ClientCmds, res.RoundTrips = u.counts.Commands, u.counts.RoundTrips
	res.ClientCPUSec = u.clientCPU.Seconds()
	res.Commands = commands(u.stats, n)
	res.Lost, err = releaseAll(ctx, leases)
	return res, err
}

// heap returns the memory statistics after two garbage collections (the
// second frees what finalizers released).
func heap() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms
}

// forEach runs fn(i) for i in [0, n) on parallel goroutines, within
// holdTimeout, and returns the first error.
func forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range min(parallel, n) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d failed, first: %w", len(errs), n, errs[0])
	}
	return ctx.Err()
}

// holdAll takes n locks on distinct keys.
func holdAll(ctx context.Context, l locks.Lib, n int) ([]locks.Lease, error) {
	leases := make([]locks.Lease, n)
	err := forEach(ctx, n, func(ctx context.Context, i int) error {
		var err error
		leases[i], err = l.Lock(ctx, fmt.Sprintf("renew:%d", i))
		return err
	})
	if err != nil {
		_, _ = releaseAll(ctx, leases)
		return nil, err
	}
	return leases, nil
}

// releaseAll releases every lease and returns how many were lost: reported
// lost by the library while held, or found gone at release.
func releaseAll(ctx context.Context, leases []locks.Lease) (int, error) {
	var lost atomic.Int64
	err := forEach(ctx, len(leases), func(ctx context.Context, i int) error {
		le := leases[i]
		if le == nil {
			return nil
		}
		wasLost := le.Lost()
		err := le.Unlock(ctx)
		if wasLost || errors.Is(err, locks.ErrNotHeld) {
			lost.Add(1)
			return nil
		}
		return err
	})
	return int(lost.Load()), err
}
