package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/corgifs/corgifs/datagen"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/sizing"
	"github.com/corgifs/corgifs/validator"
	"github.com/corgifs/corgifs/validator/validate"
	"github.com/dustin/go-humanize"
)

func runDemo(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("demo", "", `Shows the whole idea in a few minutes (1.5 min of CPU, measured): makes a
label-clustered dataset in a temporary directory (Fashion-MNIST when the Debian
package dataset-fashion-mnist is installed, a synthetic set otherwise), trains
softmax regression on it through real corgifs mounts at the mount's defaults
(no --block-size or --buffer) with the orders none, window, corgipile and full,
for --seeds seeds, prints the results with a verdict on the mean over the seeds,
writes the plot of the first seed and cleans up.`, stderr)
	epochs := fset.Int("epochs", 5, "training epochs per strategy")
	seed := fset.Uint64("seed", 1, "the first `seed`: the runs use seed, seed+1, ...")
	seeds := fset.Int("seeds", 3, "`runs` of different seeds the verdict averages over")
	plot := fset.String("plot", "corgifs-demo.svg", "where to write the plot of the first seed (.svg or .png; empty: none)")
	synthetic := fset.Bool("synthetic", false, "use the synthetic dataset even when Fashion-MNIST is installed")
	verbose := fset.Bool("v", false, "log every epoch")
	if _, err := parse(fset, args, 0); err != nil {
		return err
	}
	if *seeds < 1 || *epochs < 1 {
		return fmt.Errorf("--seeds and --epochs must be at least 1")
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(flagHandler{slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *plot != "" {
		if err := checkPlotPath(*plot); errors.Is(err, errNoPlotter) {
			// The demo's plot is a default, not a request: without
			// corgifs-plot the demo still shows its table and verdict.
			fmt.Fprintf(stdout, "No plot: %v\n\n", err)
			*plot = ""
		} else if err != nil {
			return err
		}
	}
	work, err := os.MkdirTemp("", "corgifs-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	d := datasetFlags{c: mount.Defaults()}
	d.c.CacheDir = filepath.Join(work, "cache")
	v := validateFlags{model: validator.Softmax, strategies: listFlag{"none", "window", "corgipile", "full"},
		epochs: *epochs, batch: 64, lr: 0.05, decay: validator.DefaultDecay, label: "label", via: "mount", plot: *plot, plotZoom: true, progress: stdout}
	v.data, v.test = filepath.Join(work, "train"), filepath.Join(work, "test")

	fashion := datagen.FashionMNIST{From: datagen.DefaultFashionDir, Clustered: true, Files: 8, Seed: 1}
	if !*synthetic {
		// With --synthetic, Fashion-MNIST's files would be left beside
		// the synthetic set's and mixed into its test set.
		_, _, err = fashion.Write(ctx, work, nil)
	}
	switch {
	case err == nil && !*synthetic:
		fmt.Fprintf(stdout, "Dataset: Fashion-MNIST, 60000 training images sorted by label (10 classes), in 8 TFRecord files.\n")
		v.features = datagen.ImageFeature
	case err == nil || errors.Is(err, fs.ErrNotExist):
		if err != nil {
			fmt.Fprintf(stdout, "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist); using a synthetic set.\n")
		}
		if err := syntheticSplit(ctx, work); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Dataset: synthetic, 100000 training records of 32 features in 4 Gaussian classes, sorted by label, in 8 TFRecord files.\n")
		v.features = datagen.ValueFeature
	default:
		return err
	}
	fmt.Fprintf(stdout, "Training softmax regression for %d epochs on each order, reading every epoch through a corgifs mount\n"+
		"at the mount's defaults (batch 64, lr 0.05, decay 0.95), seeds %d to %d...\n", *epochs, *seed, *seed+uint64(*seeds)-1)
	var reports []validator.Report
	for i := range *seeds {
		s := *seed + uint64(i)
		d.c.Seed, d.c.SeedGiven = s, true
		vs := v
		if i > 0 {
			vs.plot = ""
		}
		fmt.Fprintf(stdout, "seed %d:", s)
		c, err := vs.config(&d, log)
		if err != nil {
			return err
		}
		res, err := validate.Run(ctx, c, log)
		fmt.Fprintln(stdout)
		if err != nil {
			return flagError(err)
		}
		report := res.Report
		if i == 0 {
			fmt.Fprintf(stdout, "\n%s\n\n", sizesLine(res.Sizes))
			if err := writeReport(ctx, stdout, report, &vs); err != nil {
				return err
			}
			fmt.Fprintln(stdout)
		}
		reports = append(reports, report)
	}
	fmt.Fprintln(stdout, "\n"+noneNote)
	fmt.Fprintln(stdout, verdict(reports))
	return nil
}

// noneNote says why none trains well and tests badly.
const noneNote = "Why none shows a high training accuracy next to a low test accuracy: in source order every batch holds the class of the batches before it, so the model predicts that class and is right while training, and forgets the others (test accuracy is the measure)."

// sizesLine says which block size and buffer the mount's defaults chose.
func sizesLine(sizes *sizing.Choice) string {
	if sizes == nil {
		return ""
	}
	return fmt.Sprintf("The mount's defaults: --block-size %s, --buffer %s (%s).", humanize.IBytes(uint64(sizes.BlockSize)), sizes.Buffer, sizes.Reason)
}

// verdict says in one line how corgipile compares with full and none:
// the mean over the seeds of the final epoch's test accuracy, and the
// worst gap of any epoch after the first.
func verdict(reports []validator.Report) string {
	mean := map[string]float64{}
	worst := 0.0
	for _, r := range reports {
		acc := map[string][]float64{}
		for _, run := range r.Runs {
			for _, e := range run.Epochs {
				acc[run.Strategy] = append(acc[run.Strategy], 100*e.TestAcc)
			}
			if n := len(run.Epochs); n > 0 {
				mean[run.Strategy] += 100 * run.Epochs[n-1].TestAcc / float64(len(reports))
			}
		}
		c, f := acc["corgipile"], acc["full"]
		for e := 1; e < min(len(c), len(f)); e++ {
			worst = min(worst, c[e]-f[e])
		}
	}
	c, f, n := mean["corgipile"], mean["full"], mean["none"]
	word := "matches"
	if c < f-0.5 {
		word = "falls short of"
	}
	return fmt.Sprintf("Verdict (final epoch, mean of %d seeds): corgipile (%.1f%%) %s a full shuffle (%.1f%%) while reading whole blocks (worst epoch after the first: %+.1f points); source order reaches %.1f%%.",
		len(reports), c, word, f, worst, n)
}

// syntheticSplit writes a clustered synthetic training set and a shuffled
// test set drawn from the same classes.
func syntheticSplit(ctx context.Context, work string) error {
	train := datagen.Synthetic{Records: 100000, Features: 32, Classes: 4, Clustered: true, Files: 8, Seed: 1}
	if _, err := train.Write(ctx, filepath.Join(work, "train"), nil); err != nil {
		return err
	}
	// The same seed gives the same class centers; ids past the training
	// set's give new points.
	test := datagen.Synthetic{Records: 20000, Features: 32, Classes: 4, Files: 2, Seed: 1, FirstID: train.Records}
	_, err := test.Write(ctx, filepath.Join(work, "test"), nil)
	return err
}
