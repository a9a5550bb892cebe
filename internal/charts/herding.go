package charts

import (
	"fmt"
	"math"
	"strconv"

	"github.com/corgifs/corgifs/herding"

	// As validation.go: gonum/plot draws real axes, legends and both
	// SVG and PNG from one drawing.
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Herding draws the bounds per round, one line per method, on a log scale
// (D-RR's bound is orders of magnitude above CD-GraB's), into path: SVG or
// PNG by its extension.
func Herding(r herding.Result, path string) error {
	c := r.Config
	return plotLines(path, fmt.Sprintf("Parallel herding bound (n=%d per worker, m=%d, d=%d)", c.N, c.Workers, c.Dim),
		"round", "max prefix ‖Σ z‖∞ (log scale)", herding.Methods, r.Bounds, true)
}

// HerdingTraining draws the training loss per epoch, one line per method.
func HerdingTraining(r herding.TrainResult, path string) error {
	c := r.Config
	return plotLines(path, fmt.Sprintf("Full-pass training loss (logistic regression, n=%d, d=%d, sorted by label)", c.N, c.Dim),
		"epoch", "training loss", herding.TrainMethods, r.Loss, false)
}

func plotLines(path, title, xlabel, ylabel string, names []string, values [][]float64, logY bool) error {
	const w, h = 8 * vg.Inch, 5 * vg.Inch
	c, err := Canvas(path, w, h)
	if err != nil {
		return fmt.Errorf("herding: plot: %w", err)
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = ticks125{}
	}
	p.Add(plotter.NewGrid())
	// On the left, where no line is: below the bounds, which start high
	// (log scale), or above the losses, which start low.
	p.Legend.Left = true
	p.Legend.Top = !logY
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = vg.Points(8)
	if !logY {
		p.Legend.YOffs = -vg.Points(8)
	}
	for mi, m := range names {
		pts := make(plotter.XYs, len(values[mi]))
		for x, v := range values[mi] {
			if logY {
				// A log scale cannot show 0; a bound of 0 happens only for
				// degenerate inputs.
				v = math.Max(v, 1e-3)
			}
			pts[x] = plotter.XY{X: float64(x), Y: v}
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
	// Start a log axis at a labelled tick.
	if lo := p.Y.Min; logY && lo > 0 {
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
	if err := Write(path, c); err != nil {
		return fmt.Errorf("herding: plot: %w", err)
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
