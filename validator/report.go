package validator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/corgifs/corgifs/internal/plotfile"

	// gonum/plot draws real axes (ticks chosen for the data range, labels),
	// legends, titles and line styles, and writes both SVG and PNG from one
	// drawing, which hand-written SVG would have to reinvent, badly.
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// A Report holds the runs of one comparison, one per strategy.
type Report struct {
	Runs []Run `json:"runs"`
}

// A Run is the training of one model on the orders of one strategy, such
// as "corgipile", "shuffle" or "clustered".
type Run struct {
	Strategy string  `json:"strategy"`
	Epochs   []Epoch `json:"epochs"`
	// Workers is the number of parts read in lock-step per epoch, when
	// more than one; SyncEvery is then 0 for synchronous SGD or the local
	// steps between model averages (Trainer.SyncEvery).
	Workers   int `json:"workers,omitempty"`
	SyncEvery int `json:"sync_every,omitempty"`
	// Feedback says, for a strategy that orders epochs from the trainer's
	// per-example gradients, what was written to the order server.
	Feedback *FeedbackSummary `json:"feedback,omitempty"`
	// Warnings are those the run's mount logged (corgifs validate's child
	// mounts), and MountConfig its .corgifs/config.json.
	Warnings    []string        `json:"warnings,omitempty"`
	MountConfig json.RawMessage `json:"mount_config,omitempty"`
}

// FeedbackSummary is what a run gave the order server (Trainer.Feedback)
// and what the server did with it.
type FeedbackSummary struct {
	Dim   int  `json:"dim"`   // values per vector
	Exact bool `json:"exact"` // the gradients themselves, not a sketch
	// Feedback files accepted and refused, and epochs served as a random
	// reshuffle because their feedback did not arrive in time.
	Accepted  int64 `json:"accepted"`
	Refused   int64 `json:"refused"`
	Fallbacks int64 `json:"fallbacks"`
}

// An Epoch holds the measurements of one epoch of a Run.
type Epoch struct {
	Epoch     int     `json:"epoch"`      // from 0
	TrainLoss float64 `json:"train_loss"` // mean training loss over the epoch (EpochStats)
	TrainAcc  float64 `json:"train_acc"`  // training accuracy over the epoch (EpochStats)
	TestAcc   float64 `json:"test_acc"`   // test accuracy after the epoch
	Seconds   float64 `json:"seconds"`    // time of the training pass

	// The model at the end of the epoch on the full training set (a full
	// pass, Trainer.TrainSet), and its mean loss on the test set.
	FullTrainLoss float64 `json:"full_train_loss,omitempty"`
	FullTrainAcc  float64 `json:"full_train_acc,omitempty"`
	TestLoss      float64 `json:"test_loss,omitempty"`
	// Records trained on, updates, and records dropped by parts of
	// unequal length (EpochStats).
	Records int64 `json:"records,omitempty"`
	Steps   int64 `json:"steps,omitempty"`
	Dropped int64 `json:"dropped,omitempty"`
}

// epochs returns the epoch numbers that occur in any run, in order.
func (r Report) epochs() []int {
	var es []int
	for _, run := range r.Runs {
		for _, e := range run.Epochs {
			es = append(es, e.Epoch)
		}
	}
	slices.Sort(es)
	return slices.Compact(es)
}

// fullTrain reports whether any epoch was evaluated on the full training set.
func (r Report) fullTrain() bool {
	for _, run := range r.Runs {
		for _, e := range run.Epochs {
			if e.FullTrainLoss != 0 || e.FullTrainAcc != 0 {
				return true
			}
		}
	}
	return false
}

type measure struct {
	title  string
	format string
	value  func(Epoch) float64
}

// WriteTable writes the report as plain-text tables, one per measure (test
// accuracy, training loss, training accuracy, seconds, and when measured
// the final model's loss and accuracy on the full training set), each with
// a row per epoch and a column per strategy, so that strategies compare
// along a row.
func WriteTable(w io.Writer, r Report) error {
	measures := []measure{
		{"test accuracy (%)", "%.2f", func(e Epoch) float64 { return 100 * e.TestAcc }},
		{"training loss (mean over the epoch)", "%.4f", func(e Epoch) float64 { return e.TrainLoss }},
		{"training accuracy (%, over the epoch)", "%.2f", func(e Epoch) float64 { return 100 * e.TrainAcc }},
		{"seconds per epoch (training pass)", "%.2f", func(e Epoch) float64 { return e.Seconds }},
	}
	if r.fullTrain() {
		measures = append(measures,
			measure{"training loss (model at the end of the epoch, full training set)", "%.4f", func(e Epoch) float64 { return e.FullTrainLoss }},
			measure{"training accuracy (%, model at the end of the epoch, full training set)", "%.2f", func(e Epoch) float64 { return 100 * e.FullTrainAcc }})
	}
	epochs := r.epochs()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(r.Runs) > 0 && r.Runs[0].Workers > 1 {
		// Every run of one validate has the same workers.
		how := "synchronous SGD (gradients averaged every step)"
		if h := r.Runs[0].SyncEvery; h > 0 {
			how = fmt.Sprintf("local SGD (models averaged every %d steps and at the end of every epoch)", h)
		}
		fmt.Fprintf(tw, "%d workers reading their parts in lock-step, %s\n\n", r.Runs[0].Workers, how)
	}
	for i, m := range measures {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		// A title line without tabs is not part of the aligned columns.
		fmt.Fprintf(tw, "%s\n", m.title)
		fmt.Fprint(tw, "epoch\t")
		for _, run := range r.Runs {
			fmt.Fprintf(tw, "%s\t", run.Strategy)
		}
		fmt.Fprintln(tw)
		for _, e := range epochs {
			fmt.Fprintf(tw, "%d\t", e)
			for _, run := range r.Runs {
				i := slices.IndexFunc(run.Epochs, func(x Epoch) bool { return x.Epoch == e })
				if i < 0 {
					fmt.Fprint(tw, "-\t")
					continue
				}
				fmt.Fprintf(tw, m.format+"\t", m.value(run.Epochs[i]))
			}
			fmt.Fprintln(tw)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("validator: writing table: %w", err)
	}
	return nil
}

// Plot size: two panels side by side.
const (
	plotWidth  = 12 * vg.Inch
	plotHeight = 4.5 * vg.Inch
)

// Plot draws the report into the image file path, SVG or PNG by its
// extension (.svg or .png): test accuracy per epoch on the left and
// training loss per epoch on the right (of the model at the end of the
// epoch on the full training set when measured, else the mean over the
// epoch), one line per strategy.
func Plot(r Report, path string) error { return PlotWith(r, path, PlotOptions{}) }

// PlotOptions change how Plot draws.
type PlotOptions struct {
	// Zoom lets both panels span the measured values instead of starting
	// at 0 (accuracy: 0 to 1), for differences too small to see otherwise.
	Zoom bool
}

// PlotWith is Plot with options.
func PlotWith(r Report, path string, o PlotOptions) error {
	if len(r.Runs) == 0 {
		return errors.New("validator: plot: the report has no runs")
	}
	c, err := plotfile.Canvas(path, plotWidth, plotHeight)
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
	lossOf := func(e Epoch) float64 { return e.TrainLoss }
	if r.fullTrain() {
		// The final model's loss on the whole training set is the measure
		// of the paper's tables; the running mean flatters skewed orders.
		loss = newPanel("Training loss after each epoch", "training loss (full training set)")
		lossOf = func(e Epoch) float64 { return e.FullTrainLoss }
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

	if err := plotfile.Write(path, c); err != nil {
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
