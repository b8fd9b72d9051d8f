// Package soak holds many guard leases for a while through a faulty link
// and checks that every lease that ended was reported, that a lease
// reported alive is held in Redis, and that goroutines and heap do not grow.
// The test in this package runs it; this file has what the test records
// and the Markdown section it writes for the reliability report.
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/guard/observe"
)

// Recorder is a guard.Observer that counts renewals and keeps the fencing
// token of every lease reported lost (LeaseLost), so the soak can tell
// reported losses from unreported ones.
type Recorder struct {
	RenewBatches       atomic.Int64 // renewal pipelines sent
	RenewBatchesFailed atomic.Int64 // of which failed as a whole
	RenewalsFailed     atomic.Int64 // per-lease renewals that failed (RenewFailed events)
	Acquired           atomic.Int64 // Held +1 events
	Released           atomic.Int64 // Held -1 "released" events

	mu   sync.Mutex
	lost map[int64]struct{} // token of each lease reported lost
	dup  int                // LeaseLost events for a token already reported
}

var _ guard.Observer = (*Recorder)(nil)

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{lost: make(map[int64]struct{})} }

// Begin implements guard.Observer.
func (r *Recorder) Begin(ctx context.Context, _ observe.Phase, _ observe.Info) context.Context {
	return ctx
}

// End implements guard.Observer.
func (r *Recorder) End(context.Context, observe.Phase, observe.Info) {}

// Event implements guard.Observer.
func (r *Recorder) Event(_ context.Context, ev observe.Event, info observe.Info) {
	switch ev {
	case observe.RoundTrip:
		if info.Op == "renew" {
			r.RenewBatches.Add(1)
			if info.Err != nil {
				r.RenewBatchesFailed.Add(1)
			}
		}
	case observe.RenewFailed:
		r.RenewalsFailed.Add(1)
	case observe.LeaseLost:
		r.mu.Lock()
		if _, ok := r.lost[info.Token]; ok {
			r.dup++
		}
		r.lost[info.Token] = struct{}{}
		r.mu.Unlock()
	case observe.Held:
		switch {
		case info.Delta > 0:
			r.Acquired.Add(1)
		case info.Result == "released":
			r.Released.Add(1)
		}
	}
}

// LostTokens returns the tokens of every lease reported lost, and how many
// losses were reported twice.
func (r *Recorder) LostTokens() (map[int64]bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[int64]bool, len(r.lost))
	for tok := range r.lost {
		m[tok] = true
	}
	return m, r.dup
}

// Forget drops the recorded losses, so that they weigh nothing in the last
// heap sample.
func (r *Recorder) Forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = make(map[int64]struct{})
}

// CheckEnded checks a lease whose context is done during the soak, in which
// nothing releases: its cause must match guard.ErrLeaseLost.
func CheckEnded(le *guard.Lease) error {
	cause := context.Cause(le.Context())
	if !errors.Is(cause, guard.ErrLeaseLost) {
		return fmt.Errorf("lease %q (token %d) ended with cause %v, want one matching ErrLeaseLost", le.Key(), le.Token(), cause)
	}
	return nil
}

// Fault is one change of the link, at an offset from the soak's start.
type Fault struct {
	At   time.Duration
	What string
}

// Sample is the process's goroutines and heap at one instant.
type Sample struct {
	At         time.Duration
	Goroutines int // all goroutines
	// Own counts the goroutines outside the fault proxy, which runs five
	// per proxied connection in this process: the Locker's and the
	// client's, and the test's own.
	Own       int
	HeapBytes uint64 // heap objects in use, after a GC
	Held      int    // leases held (context alive) when the sample was taken
}

// TakeSample runs a GC and reads the goroutine count and the bytes of live
// heap objects.
func TakeSample(at time.Duration) Sample {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	var heap uint64
	if s[0].Value.Kind() == metrics.KindUint64 {
		heap = s[0].Value.Uint64()
	}
	return Sample{At: at, Goroutines: runtime.NumGoroutine(), Own: ownGoroutines(), HeapBytes: heap}
}

// ownGoroutines counts the goroutines whose stacks do not run in the fault
// proxy.
func ownGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		if len(buf) >= 64<<20 {
			break // a count from a truncated dump; never expected here
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.TrimSpace(g) != "" && !strings.Contains(g, "internal/faultproxy.") {
			n++
		}
	}
	return n
}

// Report is what one soak run did and saw.
type Report struct {
	Leases   int
	Duration time.Duration
	Elapsed  time.Duration // from the first acquisition to the last release
	Config   string        // the Locker's options, as text
	Faults   []Fault

	Acquisitions       int64 // fresh leases taken, initial ones and refills
	RenewBatches       int64
	RenewBatchesFailed int64
	RenewalsFailed     int64
	Checks             int // server-side checks of every live lease
	LostReported       int // leases that ended, each with an ErrLeaseLost cause and a LeaseLost event
	LostUnreported     int // leases gone in Redis whose context did not end as lost within a TTL, or not released at the end
	// LateStops are leases found gone in Redis while their context was
	// still alive, whose context then ended as lost: told late, because the
	// process ran the heartbeat late. WorstLate is the longest such context
	// lived after the read, MaxLate the bound, and WorstTimer the worst
	// lateness of a 20ms timer in the process during the soak.
	LateStops                      int
	WorstLate, MaxLate, WorstTimer time.Duration
	HeldAtEnd                      int // leases alive and held at the end, then released

	Start, Peak, End Sample   // Peak: the most goroutines, and the most heap, seen
	Samples          []Sample // taken during the soak, every few seconds
	GoroutineBound   int
	HeapBound        uint64
	Failures         []string
}

// Markdown writes the report as a section of the reliability report.
func (r *Report) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## Soak: %d leases for %v through a faulty link\n\n", r.Leases, r.Duration)
	fmt.Fprintf(&b, "Locker: %s. Leases held by one Locker whose client reaches redis-server through the fault proxy; "+
		"a lease that ends is re-acquired once its key is free.\n\n", r.Config)
	result := "PASS"
	if len(r.Failures) > 0 {
		result = fmt.Sprintf("FAIL (%d problems)", len(r.Failures))
	}
	fmt.Fprintf(&b, "| measure | value |\n| --- | --- |\n")
	rows := [][2]string{
		{"result", result},
		{"keys, each held by one lease (re-acquired after a loss)", fmt.Sprint(r.Leases)},
		{"soak duration (faults), whole run", fmt.Sprintf("%v, %v", r.Duration, r.Elapsed.Round(time.Millisecond))},
		{"fresh acquisitions (initial + re-acquired)", fmt.Sprint(r.Acquisitions)},
		{"renewal pipelines sent (failed)", fmt.Sprintf("%d (%d)", r.RenewBatches, r.RenewBatchesFailed)},
		{"lease renewals failed (retried)", fmt.Sprint(r.RenewalsFailed)},
		{"server-side checks of every live lease", fmt.Sprint(r.Checks)},
		{"leases lost, reported (context cause ErrLeaseLost + LeaseLost event)", fmt.Sprint(r.LostReported)},
		{"leases lost, unreported", fmt.Sprint(r.LostUnreported)},
		{"leases told late (context alive after Redis had dropped the hold, then ended as lost)", fmt.Sprintf("%d, worst %v after the read (bound %v)", r.LateStops, r.WorstLate.Round(time.Millisecond), r.MaxLate)},
		{"worst lateness of a 20ms timer in the test process", r.WorstTimer.Round(time.Millisecond).String()},
		{"leases held at the end, released", fmt.Sprint(r.HeldAtEnd)},
		{"goroutines start / peak / end (outside the proxy)", fmt.Sprintf("%d / %d / %d (%d / %d / %d)",
			r.Start.Goroutines, r.Peak.Goroutines, r.End.Goroutines, r.Start.Own, r.Peak.Own, r.End.Own)},
		{"heap objects start / peak / end (after GC)", fmt.Sprintf("%s / %s / %s", mib(r.Start.HeapBytes), mib(r.Peak.HeapBytes), mib(r.End.HeapBytes))},
		{"bounds at the end", fmt.Sprintf("goroutines outside the proxy ≤ start + %d; heap ≤ start + %s", r.GoroutineBound, mib(r.HeapBound))},
	}
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s | %s |\n", row[0], row[1])
	}
	b.WriteString("\nSamples during the soak (time: leases held, goroutines, outside the proxy, heap objects after GC): ")
	for i, s := range r.Samples {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%.0fs: %d, %d, %d, %s", s.At.Seconds(), s.Held, s.Goroutines, s.Own, mib(s.HeapBytes))
	}
	b.WriteString("\n")
	b.WriteString("\nFaults applied (time from the start of the soak):\n\n")
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "- %7.3fs %s\n", f.At.Seconds(), f.What)
	}
	if len(r.Failures) > 0 {
		b.WriteString("\nProblems:\n\n")
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
