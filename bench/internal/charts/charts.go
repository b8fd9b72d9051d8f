// Package charts draws the benchmark's PNG charts from a run's results
// with gonum.org/v1/plot.
package charts

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Size of a chart's panel, and the resolution of every chart.
const (
	panelWidth = 5 * vg.Inch
	height     = 4.5 * vg.Inch
	dpi        = 110
)

// libColor gives each library the same color in every chart.
func libColor(lib string) color.Color {
	switch lib {
	case "guard":
		return color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	case "guard-nocancel":
		return color.RGBA{R: 0x9e, G: 0xc9, B: 0xe8, A: 0xff}
	case "redsync":
		return color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	case "redislock":
		return color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	case "redislock-await":
		return color.RGBA{R: 0x98, G: 0xdf, B: 0x8a, A: 0xff}
	case "raw":
		return color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
	}
	return color.Black
}

// legendWidth is the room on the right of a chart for a shared legend.
const legendWidth = 1.9 * vg.Inch

// save draws plots side by side into one PNG at path, with legend (if not
// nil) on their right.
func save(path string, legend *plot.Legend, plots ...*plot.Plot) error {
	width := vg.Length(len(plots)) * panelWidth
	if legend != nil {
		width += legendWidth
	}
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	if legend != nil {
		legend.Top, legend.Left = true, true
		legend.Draw(draw.Crop(dc, width-legendWidth, 0, 0, -vg.Inch))
		dc = draw.Crop(dc, 0, -legendWidth, 0, 0)
	}
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Centimeter, PadTop: vg.Millimeter * 3,
		PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("charts: %s: %w", path, err)
	}
	return f.Close()
}
