package charts

import (
	"errors"
	"fmt"

	"github.com/corgifs/corgifs/validator"

	// gonum/plot draws real axes (ticks chosen for the data range, labels),
	// legends, titles and line styles, and writes both SVG and PNG from one
	// drawing, which hand-written SVG would have to reinvent, badly.
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Plot size: two panels side by side.
const (
	plotWidth  = 12 * vg.Inch
	plotHeight = 4.5 * vg.Inch
)

// Validation draws the report into the image file path, SVG or PNG by its
// extension (.svg or .png): test accuracy per epoch on the left and
// training loss per epoch on the right (of the model at the end of the
// epoch on the full training set when measured, else the mean over the
// epoch), one line per strategy.
func Validation(r validator.Report, path string) error {
	return ValidationWith(r, path, ValidationOptions{})
}

// ValidationOptions change how Validation draws.
type ValidationOptions struct {
	// Zoom lets both panels span the measured values instead of starting
	// at 0 (accuracy: 0 to 1), for differences too small to see otherwise.
	Zoom bool
}

// ValidationWith is Validation with options.
func ValidationWith(r validator.Report, path string, o ValidationOptions) error {
	if len(r.Runs) == 0 {
		return errors.New("validator: plot: the report has no runs")
	}
	c, err := Canvas(path, plotWidth, plotHeight)
	if err != nil {
		return fmt.Errorf("validator: plot: %w", err)
	}

	title := "Test accuracy after each epoch"
	if k := r.Runs[0].Workers; k > 1 {
		if h := r.Runs[0].SyncEvery; h > 0 {
			title = fmt.Sprintf("Test accuracy, %d workers, models averaged every %d steps", k, h)
		} else {
			title = fmt.Sprintf("Test accuracy, %d workers, synchronous SGD", k)
		}
	}
	acc := newPanel(title, "test accuracy")
	if !o.Zoom {
		acc.Y.Min, acc.Y.Max = 0, 1
		acc.Y.Tick.Marker = accuracyTicks{}
	}
	loss := newPanel("Training loss per epoch", "training loss (mean over the epoch)")
	lossOf := func(e validator.Epoch) float64 { return e.TrainLoss }
	if fullTrain(r) {
		// The final model's loss on the whole training set is the measure
		// of the paper's tables; the running mean flatters skewed orders.
		loss = newPanel("Training loss after each epoch", "training loss (full training set)")
		lossOf = func(e validator.Epoch) float64 { return e.FullTrainLoss }
	}
	if !o.Zoom {
		loss.Y.Min = 0
	}
	// One legend for both panels, in a column on the right, where it cannot
	// hide a line.
	legend := plot.NewLegend()
	legend.Left, legend.Top = true, true
	legend.Padding = vg.Points(4)
	legend.ThumbnailWidth = vg.Points(30)
	for i, run := range r.Runs {
		accPts := make(plotter.XYs, len(run.Epochs))
		lossPts := make(plotter.XYs, len(run.Epochs))
		for j, e := range run.Epochs {
			accPts[j] = plotter.XY{X: float64(e.Epoch), Y: e.TestAcc}
			lossPts[j] = plotter.XY{X: float64(e.Epoch), Y: lossOf(e)}
		}
		for j, p := range []struct {
			plot *plot.Plot
			pts  plotter.XYs
		}{{acc, accPts}, {loss, lossPts}} {
			line, points, err := plotter.NewLinePoints(p.pts)
			if err != nil {
				return fmt.Errorf("validator: plot: %s: %w", run.Strategy, err)
			}
			line.Color = plotutil.Color(i)
			line.Dashes = plotutil.Dashes(i)
			line.Width = vg.Points(1.5)
			points.Color = plotutil.Color(i)
			points.Shape = plotutil.Shape(i)
			p.plot.Add(line, points)
			if j == 0 {
				legend.Add(run.Strategy, line, points)
			}
		}
	}

	dc := draw.New(c)
	const margin = vg.Length(12)
	lr := legend.Rectangle(dc)
	legendWidth := lr.Max.X - lr.Min.X + 2*margin
	legend.YOffs = -(dc.Max.Y - dc.Min.Y - (lr.Max.Y - lr.Min.Y)) / 2 // centred
	legend.Draw(draw.Crop(dc, dc.Max.X-dc.Min.X-legendWidth+margin, -margin, 0, 0))

	plots := [][]*plot.Plot{{acc, loss}}
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 2, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6)}
	canvases := plot.Align(plots, tiles, draw.Crop(dc, 0, -legendWidth, 0, 0))
	for i, p := range plots[0] {
		p.Draw(canvases[0][i])
	}

	if err := Write(path, c); err != nil {
		return fmt.Errorf("validator: plot: %w", err)
	}
	return nil
}

// newPanel returns an empty plot with the given title and y label, and
// epochs along x.
func newPanel(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "epoch"
	p.Y.Label.Text = ylabel
	p.X.Tick.Marker = epochTicks{}
	p.Add(plotter.NewGrid())
	return p
}

// accuracyTicks marks every tenth of [0, 1], labelled.
type accuracyTicks struct{}

func (accuracyTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for i := range 11 {
		if v := float64(i) / 10; v >= lo && v <= hi {
			ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprintf("%.1f", v)})
		}
	}
	return ts
}

// epochTicks marks whole epochs only, at most about ten of them.
type epochTicks struct{}

func (epochTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 1
	for span := int(hi - lo); span/step > 10; {
		step *= 2
	}
	var ts []plot.Tick
	for e := int(lo); float64(e) <= hi; e++ {
		if float64(e) < lo {
			continue
		}
		t := plot.Tick{Value: float64(e)}
		if e%step == 0 {
			t.Label = fmt.Sprint(e)
		}
		ts = append(ts, t)
	}
	return ts
}

// fullTrain reports whether any epoch was evaluated on the full training set.
func fullTrain(r validator.Report) bool {
	for _, run := range r.Runs {
		for _, e := range run.Epochs {
			if e.FullTrainLoss != 0 || e.FullTrainAcc != 0 {
				return true
			}
		}
	}
	return false
}
