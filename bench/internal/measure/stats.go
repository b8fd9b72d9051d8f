// Package measure holds the harness's instruments: latency summaries,
// process CPU time and heap allocations, a command-counting go-redis hook and a check for load
// from other processes.
package measure

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Summary describes a sample of durations, in microseconds.
type Summary struct {
	N      int     `json:"n"`
	P50us  float64 `json:"p50_us"`
	P90us  float64 `json:"p90_us"`
	P99us  float64 `json:"p99_us"`
	MaxUs  float64 `json:"max_us"`
	MeanUs float64 `json:"mean_us"`
}

// Summarize sorts ds in place and summarizes it.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	slices.Sort(ds)
	var total time.Duration
	for _, d := range ds {
		total += d
	}
	return Summary{
		N:      len(ds),
		P50us:  Micros(Percentile(ds, 0.50)),
		P90us:  Micros(Percentile(ds, 0.90)),
		P99us:  Micros(Percentile(ds, 0.99)),
		MaxUs:  Micros(ds[len(ds)-1]),
		MeanUs: Micros(total / time.Duration(len(ds))),
	}
}

// Percentile returns the nearest-rank p-quantile (0 < p <= 1) of sorted.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Micros returns d in microseconds.
func Micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Ratio returns a / b, or 0 when b is 0.
func Ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Join formats each of xs with format and joins them with sep: a row of
// per-round figures.
func Join(xs []float64, format, sep string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, sep)
}
