package charts

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/jobguard/jobguard/bench/internal/results"
)

// Throughput draws chart (a): server CPU and client CPU per
// acquire+release and throughput per library, with the SET+DEL ceiling
// first. Bars are the median round; dots are every round. The titles say
// whether the run was pinned and its GOMAXPROCS.
func Throughput(run results.Run, path string) error {
	rows := append([]results.Throughput{run.Ceiling}, run.Throughput...)
	names := make([]string, len(rows))
	server, client, ops := make([]float64, len(rows)), make([]float64, len(rows)), make([]float64, len(rows))
	serverRounds, clientRounds, opsRounds := make([][]float64, len(rows)), make([][]float64, len(rows)), make([][]float64, len(rows))
	serverLabels, clientLabels, opsLabels := make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows))
	for i, r := range rows {
		names[i], server[i], client[i], ops[i] = r.Lib, r.Cost.ServerCPUUs, r.Cost.ClientCPUUs, r.OpsPerSec
		for _, rd := range r.Rounds {
			serverRounds[i] = append(serverRounds[i], rd.Cost.ServerCPUUs)
			clientRounds[i] = append(clientRounds[i], rd.Cost.ClientCPUUs)
			opsRounds[i] = append(opsRounds[i], rd.OpsPerSec)
		}
		serverLabels[i] = fmt.Sprintf("%.1f µs", r.Cost.ServerCPUUs)
		clientLabels[i] = fmt.Sprintf("%.1f µs", r.Cost.ClientCPUUs)
		opsLabels[i] = fmt.Sprintf("%s/s\n(%.2f×)", thousands(r.OpsPerSec), r.RatioToCeiling)
	}
	g, how := run.Ceiling.Goroutines, setting(run.Machine)
	serverPlot, err := bars(fmt.Sprintf("Server CPU per acquire+release\n%d goroutines, %s", g, how), "µs of redis-server CPU per op",
		names, server, serverRounds, serverLabels)
	if err != nil {
		return err
	}
	clientPlot, err := bars(fmt.Sprintf("Client CPU per acquire+release\n%d goroutines, %s", g, how), "µs of client process CPU per op",
		names, client, clientRounds, clientLabels)
	if err != nil {
		return err
	}
	opsPlot, err := bars(fmt.Sprintf("Throughput, %d goroutines on distinct keys\n%s", g, how), "acquire+release per second",
		names, ops, opsRounds, opsLabels)
	if err != nil {
		return err
	}
	return save(path, nil, serverPlot, clientPlot, opsPlot)
}

// setting names how a run was made, for a chart's title.
func setting(m results.Machine) string {
	if m.ClientCPU < 0 && m.ServerCPU < 0 {
		return fmt.Sprintf("not pinned, GOMAXPROCS %d", m.GOMAXPROCS)
	}
	return fmt.Sprintf("pinned, GOMAXPROCS %d", m.GOMAXPROCS)
}

// bars returns a bar chart of one bar per name, each in its library's
// color and labelled with its value, with a dot for each of its rounds.
func bars(title, ylabel string, names []string, values []float64, rounds [][]float64, labels []string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	top := 0.0
	var dots plotter.XYs
	for i, v := range values {
		b, err := plotter.NewBarChart(plotter.Values{v}, vg.Points(40))
		if err != nil {
			return nil, err
		}
		b.XMin = float64(i)
		b.Color = libColor(names[i])
		b.LineStyle.Width = 0
		p.Add(b)
		top = max(top, v)
		for _, r := range rounds[i] {
			dots = append(dots, plotter.XY{X: float64(i), Y: r})
			top = max(top, r)
		}
	}
	if len(dots) > 0 {
		sc, err := plotter.NewScatter(dots)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Shape: draw.CircleGlyph{}, Radius: vg.Points(2.5), Color: color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}}
		p.Add(sc)
		p.Legend.Add("each round", sc)
		p.Legend.Top = true
	}
	xys := make(plotter.XYs, len(values))
	for i, v := range values { // above the bar and its dots
		y := v
		for _, r := range rounds[i] {
			y = max(y, r)
		}
		xys[i] = plotter.XY{X: float64(i), Y: y + top*0.02}
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return nil, err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = -0.5 // centred over the bar
	}
	p.Add(l)
	p.Y.Max = top * 1.15
	p.NominalX(names...)
	return p, nil
}

// thousands formats v rounded to an integer, with thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
