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

// panel is one of the hand-off chart's panels: a value of a case against
// its number of waiters.
type panel struct {
	title, ylabel string
	value         func(results.Handoff) float64
}

// Handoff draws chart (b): hand-off latency p50, client commands and
// server calls per acquisition against the number of waiters, one line per
// library and hold time (solid: 1 ms hold, dashed: no hold).
func Handoff(run results.Run, path string) error {
	panels := []panel{
		{"Hand-off latency p50\n(unlock to another goroutine's lock)", "µs (log scale)",
			func(h results.Handoff) float64 { return h.Latency.P50us }},
		{"Client commands per acquisition\n(sent by the client, failed tries included)", "commands (log scale)",
			func(h results.Handoff) float64 { return h.Cost.ClientCommands }},
		{"Server calls per acquisition\n(commandstats, scripts' own calls included)", "calls (log scale)",
			func(h results.Handoff) float64 { return h.Cost.ServerCalls }},
	}
	var waiters []float64
	for _, h := range run.Handoff {
		if !slices.Contains(waiters, float64(h.Waiters)) {
			waiters = append(waiters, float64(h.Waiters))
		}
	}
	if len(waiters) == 0 {
		return fmt.Errorf("charts: no hand-off cases")
	}
	plots := make([]*plot.Plot, len(panels))
	for i, pn := range panels {
		plots[i] = logPlot(pn.title, pn.ylabel, waiters)
	}
	legend := plot.NewLegend()
	for _, lib := range locks.Names() {
		for _, hold := range run.Sizes.HandoffHolds {
			holdMs := float64(hold.Microseconds()) / 1000
			var cases []results.Handoff
			for _, h := range run.Handoff {
				if h.Lib == lib && h.HoldMs == holdMs && h.Latency.N > 0 {
					cases = append(cases, h)
				}
			}
			if len(cases) == 0 {
				continue
			}
			for i, pn := range panels {
				xys := make(plotter.XYs, len(cases))
				for j, h := range cases {
					xys[j] = plotter.XY{X: float64(h.Waiters), Y: pn.value(h)}
				}
				l, pts, err := line(lib, holdMs, xys)
				if err != nil {
					return err
				}
				plots[i].Add(l, pts)
				if i == 0 {
					legend.Add(fmt.Sprintf("%s, hold %g ms", lib, holdMs), l, pts)
				}
			}
		}
	}
	for _, p := range plots { // start each y axis at a power of ten, so its foot is labelled
		p.Y.Min = math.Pow(10, math.Floor(math.Log10(p.Y.Min)))
	}
	return save(path, &legend, plots...)
}

// logPlot returns a plot with log axes, x marked at each number of waiters.
func logPlot(title, ylabel string, waiters []float64) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, ticks125{}
	p.X.Label.Text = "waiting goroutines (log scale)"
	p.X.Scale = plot.LogScale{}
	ticks := make(plot.ConstantTicks, len(waiters))
	for i, w := range waiters {
		ticks[i] = plot.Tick{Value: w, Label: fmt.Sprint(w)}
	}
	p.X.Tick.Marker = ticks
	p.X.Min, p.X.Max = slices.Min(waiters)*0.8, slices.Max(waiters)*1.25
	return p
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
