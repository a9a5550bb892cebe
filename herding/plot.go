package herding

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	// As validator/report.go: gonum/plot draws real axes, legends and both
	// SVG and PNG from one drawing.
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Plot draws the bounds per round, one line per method, on a log scale
// (D-RR's bound is orders of magnitude above CD-GraB's), into path: SVG or
// PNG by its extension.
func Plot(r Result, path string) (err error) {
	const w, h = 8 * vg.Inch, 5 * vg.Inch
	var c vg.CanvasWriterTo
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg":
		c = vgsvg.New(w, h)
	case ".png":
		c = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	default:
		return fmt.Errorf("herding: plot: %s: unsupported extension %q, want .svg or .png", path, ext)
	}
	p := plot.New()
	cfg := r.Config
	p.Title.Text = fmt.Sprintf("Parallel herding bound (n=%d per worker, m=%d, d=%d)", cfg.N, cfg.Workers, cfg.Dim)
	p.X.Label.Text = "round"
	p.Y.Label.Text = "max prefix ‖Σ z‖∞ (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = ticks125{}
	p.Add(plotter.NewGrid())
	// Bottom left is where the bounds have not fallen yet: no line there.
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = vg.Points(8)
	for mi, m := range Methods {
		pts := make(plotter.XYs, len(r.Bounds[mi]))
		for round, b := range r.Bounds[mi] {
			// A log scale cannot show 0; a bound of 0 happens only for
			// degenerate inputs.
			pts[round] = plotter.XY{X: float64(round), Y: math.Max(b, 1e-3)}
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("herding: plot: %s: %w", m, err)
		}
		line.Color = plotutil.Color(mi)
		line.Dashes = plotutil.Dashes(mi)
		line.Width = vg.Points(1.5)
		points.Color = plotutil.Color(mi)
		points.Shape = plotutil.Shape(mi)
		p.Add(line, points)
		p.Legend.Add(m, line, points)
	}
	// Start the axis at a labelled tick.
	if lo := p.Y.Min; lo > 0 {
		e := math.Pow(10, math.Floor(math.Log10(lo)))
		p.Y.Min = e
		for _, m := range []float64{5, 2} {
			if m*e <= lo {
				p.Y.Min = m * e
				break
			}
		}
	}
	p.Draw(draw.New(c))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("herding: plot: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("herding: plot: %w", cerr)
		}
	}()
	if _, err := c.WriteTo(f); err != nil {
		return fmt.Errorf("herding: plot: writing %s: %w", path, err)
	}
	return nil
}

// ticks125 labels 1, 2, 5, 10, 20, 50, … on a log axis: LogTicks labels
// powers of ten only, too few for a range of one or two decades.
type ticks125 struct{}

func (ticks125) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for _, m := range []float64{1, 2, 5} {
			if v := m * math.Pow(10, e); v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	return ts
}
