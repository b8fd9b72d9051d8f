package charts

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/jobguard/jobguard/bench/internal/locks"
	"github.com/jobguard/jobguard/bench/internal/results"
)

// Handoff draws chart (b): hand-off latency p50 and server calls per
// acquisition against the number of waiters, one line per library and
// hold time (solid: 1 ms hold, dashed: no hold).
func Handoff(run results.Run, path string) error {
	lat := plot.New()
	lat.Title.Text = "Hand-off latency p50: unlock to another goroutine's lock"
	lat.Y.Label.Text = "µs (log scale)"
	lat.Y.Scale, lat.Y.Tick.Marker = plot.LogScale{}, ticks125{}
	calls := plot.New()
	calls.Title.Text = "Server calls per acquisition (incl. scripts' own)"
	calls.Y.Label.Text = "calls (log scale)"
	calls.Y.Scale, calls.Y.Tick.Marker = plot.LogScale{}, ticks125{}
	var waiters []float64
	for _, h := range run.Handoff {
		if !slices.Contains(waiters, float64(h.Waiters)) {
			waiters = append(waiters, float64(h.Waiters))
		}
	}
	for _, p := range []*plot.Plot{lat, calls} {
		p.X.Label.Text = "waiting goroutines (log scale)"
		p.X.Scale = plot.LogScale{}
		ticks := make(plot.ConstantTicks, len(waiters))
		for i, w := range waiters {
			ticks[i] = plot.Tick{Value: w, Label: fmt.Sprint(w)}
		}
		p.X.Tick.Marker = ticks
		p.X.Min, p.X.Max = slices.Min(waiters)*0.8, slices.Max(waiters)*1.25
	}
	legend := plot.NewLegend()
	for _, lib := range locks.Names() {
		for _, hold := range run.Sizes.HandoffHolds {
			holdMs := float64(hold.Microseconds()) / 1000
			var latXY, callXY plotter.XYs
			for _, h := range run.Handoff {
				if h.Lib == lib && h.HoldMs == holdMs && h.Latency.N > 0 {
					latXY = append(latXY, plotter.XY{X: float64(h.Waiters), Y: h.Latency.P50us})
					callXY = append(callXY, plotter.XY{X: float64(h.Waiters), Y: h.Cost.ServerCalls})
				}
			}
			if len(latXY) == 0 {
				continue
			}
			name := fmt.Sprintf("%s, hold %g ms", lib, holdMs)
			l, pts, err := line(lib, holdMs, latXY)
			if err != nil {
				return err
			}
			lat.Add(l, pts)
			legend.Add(name, l, pts)
			if l, pts, err = line(lib, holdMs, callXY); err != nil {
				return err
			}
			calls.Add(l, pts)
		}
	}
	return save(path, &legend, lat, calls)
}

// line returns a line with points in lib's color, dashed with square
// points when there is no hold.
func line(lib string, holdMs float64, xys plotter.XYs) (*plotter.Line, *plotter.Scatter, error) {
	l, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return nil, nil, err
	}
	l.Color, pts.Color = libColor(lib), libColor(lib)
	l.Width = vg.Points(1.5)
	pts.Shape = draw.CircleGlyph{}
	if holdMs == 0 {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		pts.Shape = draw.BoxGlyph{}
	}
	return l, pts, nil
}

// ticks125 marks a log axis at 1, 2 and 5 times each power of ten, so
// that a range of less than a decade still gets labels.
type ticks125 struct{}

// Ticks implements plot.Ticker.
func (ticks125) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for p := math.Pow(10, math.Floor(math.Log10(lo))); p <= hi; p *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := m * p; v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
			}
		}
	}
	return ts
}
