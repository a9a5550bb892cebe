package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/source/s3"
	"github.com/corgifs/corgifs/validator"
	"github.com/corgifs/corgifs/validator/validate"
)

// validateFlags are the training settings of validate (and demo).
type validateFlags struct {
	data, test      string
	model           string
	strategies      listFlag
	epochs, batch   int
	lr, decay, l2   float64
	label, features string
	via             string
	jsonOut, plot   string
	plotZoom        bool
	workers         int // parts read in lock-step per epoch (data-parallel workers)
	syncEvery       int // 0: synchronous SGD; H: local SGD, models averaged every H steps
	sketchDim       int // feedback strategies: the largest dimension of a feedback vector

	// The format of --data and --test, and where its records keep the
	// label and the features. "" means the format's default.
	format                  string
	noHeader                bool // csv --header=false
	recordSize, headerBytes int64
	labelColumn             string
	ignoreColumns           listFlag
	ignoreSet               bool // --ignore-columns was given
	feedbackDimGiven        bool // --feedback-dim was given (validate sets it)
	divide                  float64

	// progress, if set, gets the name of each strategy as its run starts
	// (the demo's progress line).
	progress io.Writer
}

func (v *validateFlags) register(fs *flag.FlagSet) {
	v.strategies = listFlag{"none", "window", "block", "corgipile", "once", "full", "mrs"}
	fs.StringVar(&v.data, "data", "", "`dir`ectory of training TFRecord files (required)")
	fs.StringVar(&v.test, "test", "", "`dir`ectory of test TFRecord files (required)")
	fs.StringVar(&v.model, "model", "softmax", "`model`: "+strings.Join(validator.ModelNames(), ", "))
	fs.Var(&v.strategies, "strategies", "comma separated order `strategies` to train with, side by side; pls:Q is pls with\n--exchange Q (such as pls:0.1,pls:0.3 to compare exchange fractions)")
	fs.IntVar(&v.workers, "workers", 1, "read the `K` parts of every epoch in lock-step, as K data-parallel workers (DDP ranks):\nevery step takes --batch/K records of each part, and every record is trained on: a part\nthat runs short gives what it has left, an ended one a zero gradient, until the longest\nends, each record weighing 1/--batch (DDP's Join)")
	fs.IntVar(&v.syncEvery, "sync-every", 0, "with --workers K > 1: 0 averages the K gradients of every step into one update\n(synchronous SGD); `H` ≥ 1 gives each worker its own model, updated by its own\nmini-batches, and averages the K models every H steps and at the end of every\nepoch (local SGD)")
	fs.IntVar(&v.sketchDim, "sketch-dim", 64, "grab, cdgrab, corgipile-balance: after every epoch each part's per-example gradients\n(at the model that trained on the record) are written to the mount's feedback files,\nexactly for logistic regression and SVM whatever the feature count (features+1 values);\nfor softmax exactly when its gradient has at most `N` values (classes × (features+1)), else\nas a seeded random projection (CountSketch) to N values. validate sets the mount's\n--feedback-dim to the vectors' dimension and refuses, with the numbers, a run whose\nvectors (records × (4 × dim + 12) bytes) do not fit in --max-memory")
	fs.IntVar(&v.epochs, "epochs", 10, "training epochs per strategy")
	fs.IntVar(&v.batch, "batch", 64, "mini-batch size (1: plain SGD, one record per update)")
	fs.Float64Var(&v.lr, "lr", 0.05, "learning rate of epoch 0")
	fs.Float64Var(&v.decay, "decay", validator.DefaultDecay, "learning rate decay per epoch: lr * decay^epoch")
	fs.Float64Var(&v.l2, "l2", 0, "L2 regularisation strength")
	fs.StringVar(&v.label, "label", "", "`name` of the label: tfrecord: the int64_list feature (default label);\njsonl: the key (default label); wds: the member extension (default cls)")
	fs.StringVar(&v.features, "features", "", "the features: tfrecord: the `name` of a float_list, or of a bytes_list of uint8\npixels (default features); jsonl: the key of a number array (default features,\nor pixels); wds: the member extension, float32 little-endian, or uint8 if \"pixels\" (default: bin\nor pixels); libsvm: the number of features (default: the largest index in --data and --test)")
	fs.StringVar(&v.via, "via", "mount", "how epochs are read: mount (through a real corgifs mount), direct (the same bytes,\nin-process) or files (the --data files in their order, each epoch; --strategies none)")
	fs.StringVar(&v.format, "format", "", "`format` of --data and --test: "+strings.Join(formats.Names(), ", ")+"\n(default: chosen from the file extensions)")
	fs.BoolFunc("header", "csv: the first row of every file is the header (default true; --header=false: none)", func(s string) error {
		b, err := strconv.ParseBool(s)
		v.noHeader = !b
		return err
	})
	fs.Int64Var(&v.recordSize, "record-size", 0, "fixed: `bytes` per record (little-endian float32 values)")
	fs.Int64Var(&v.headerBytes, "header-bytes", 0, "fixed: `bytes` of header before the records of every file")
	fs.StringVar(&v.labelColumn, "label-column", "", "csv: the label `column`, a header name or a number from 0 (default label);\nnpy, fixed: its number from 0 (default 0)")
	fs.Float64Var(&v.divide, "divide", 0, "csv, jsonl, libsvm: divide every feature by `N` (255 for the 0-255 pixels of\n`corgifs gen fashion-mnist`, to match the uint8 formats, which are always scaled to [0, 1])")
	fs.Func("ignore-columns", "comma separated `columns` that are not features: csv: names or numbers (default id);\nnpy, fixed: numbers (default none; 1 for `corgifs gen synthetic --format npy`, whose\ncolumns are label, id, features)", func(s string) error {
		v.ignoreSet = true
		return v.ignoreColumns.Set(s)
	})
	fs.StringVar(&v.jsonOut, "json", "", "write the results as JSON to `file`")
	fs.StringVar(&v.plot, "plot", "", "draw test accuracy and training loss per epoch to `file` (.svg or .png)")
	fs.BoolVar(&v.plotZoom, "plot-zoom", true, "let the plot's axes span the measured values, so that small differences show; false: accuracy on 0 to 1 and loss from 0")
}

func runValidate(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("validate", "", `Trains one model per order strategy, from the same initial weights, on the
records of --data in that strategy's order (epoch e reads epoch-e's single part,
or its --workers K parts in lock-step), and prints per epoch and strategy:
training loss and accuracy over the epoch, the loss and accuracy of the model at
the end of the epoch on the full training set, test accuracy on --test, and
seconds. It shows whether an order trains like a full shuffle. The dataset flags
mean what they mean for mount; --partition applies to local, pls, grab and
cdgrab, --exchange to pls, --equal-parts to every strategy. With grab, cdgrab and
corgipile-balance each epoch's per-example gradients (see --sketch-dim) are
written to the mount's feedback files before the next epoch is read, which the
mount orders by them (--balance-rule, --feedback-timeout as for mount).`, stderr)
	var d datasetFlags
	d.register(fset, mount.CmdValidate)
	d.c.ListsRecords = true // it trains with every strategy, full and once too
	var v validateFlags
	v.register(fset)
	if _, err := d.parse(fset, args, 0); err != nil {
		return err
	}
	var strategyGiven bool
	fset.Visit(func(f *flag.Flag) {
		strategyGiven = strategyGiven || f.Name == "strategy"
		v.feedbackDimGiven = v.feedbackDimGiven || f.Name == "feedback-dim"
	})
	if strategyGiven {
		// The dataset flags include mount's --strategy; validate trains
		// on each of --strategies, so a --strategy would be ignored.
		return fmt.Errorf("validate has no --strategy: it trains on each order of --strategies (for example --strategies %s)", d.c.Strategy)
	}
	if v.feedbackDimGiven {
		return errors.New("validate gives its mounts --feedback-dim itself (the dimension of the vectors it writes): set that with --sketch-dim")
	}
	if v.data == "" || v.test == "" {
		return fmt.Errorf("--data and --test are required")
	}
	if err := d.checkCacheDir(); err != nil {
		return err
	}
	if v.plot != "" {
		if err := checkPlotPath(v.plot); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A reader that goes away (validate 2>&1 | head) must not leave the
	// work directory and its mounts behind, as the default SIGPIPE exit
	// would: with SIGPIPE ignored the write fails with EPIPE, which ends
	// the run as SIGINT does, through the deferred cleanups.
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stdout, stderr = &epipeCancels{w: stdout, cancel: cancel}, &epipeCancels{w: stderr, cancel: cancel}
	log := newLogger(stderr, d.debug)
	c, err := v.config(&d, log)
	if err != nil {
		return err
	}
	res, err := validate.Run(ctx, c, log)
	if err != nil {
		return flagError(err)
	}
	return writeReport(ctx, stdout, res.Report, &v)
}

// config is the flags as the validate.Config of the run, with the seed
// chosen (and logged) when none was given.
func (v *validateFlags) config(d *datasetFlags, log *slog.Logger) (validate.Config, error) {
	seed, chosen := d.parseSeed()
	if chosen {
		log.Info("no --seed given; chose one (pass it to reproduce these orders)", "seed", seed)
	}
	m := d.config(v.data)
	m.Seed, m.SeedGiven = seed, true
	m.Progress = progressFunc(os.Stderr, "indexing")
	return validate.Config{
		Mount: m, Data: v.data, Test: v.test, Model: v.model, Strategies: v.strategies,
		Epochs: v.epochs, Batch: v.batch, LR: v.lr, Decay: v.decay, L2: v.l2,
		Workers: v.workers, SyncEvery: v.syncEvery, SketchDim: v.sketchDim, Via: v.via,
		Decode: validate.Decode{Format: v.format, NoHeader: v.noHeader, RecordSize: v.recordSize, HeaderBytes: v.headerBytes,
			Label: v.label, Features: v.features, LabelColumn: v.labelColumn, IgnoreColumns: v.ignoreColumns,
			IgnoreGiven: v.ignoreSet, Divide: v.divide},
		Mounter:  mountChild,
		Progress: v.progress,
	}, nil
}

// mountChild serves the mount of c as `corgifs mount` in a child process.
func mountChild(_ context.Context, c mount.Config, work string) (*validate.Mounted, error) {
	m, err := startChildMount(c.Source, work, mountArgs(c)...)
	if err != nil {
		return nil, err
	}
	return &validate.Mounted{Dir: m.Dir, Ext: m.ext, Config: m.config, Warnings: m.warnings, Stop: m.stop}, nil
}

// mountArgs are the flags of `corgifs mount` that give c: what c leaves
// zero (the block size, the buffer) the child chooses as any mount does,
// and says so in its config.json.
func mountArgs(c mount.Config) []string {
	flags := []string{"--strategy", c.Strategy, "--seed", fmt.Sprint(c.Seed),
		"--max-memory", fmt.Sprint(c.MaxMemory), "--cache-dir", c.CacheDir,
		"--include", strings.Join(c.Include, ","), "--epochs", fmt.Sprint(c.Epochs), "--parts", fmt.Sprint(c.Parts)}
	if c.BlockSize != 0 {
		flags = append(flags, "--block-size", fmt.Sprint(c.BlockSize))
	}
	if c.Buffer != (shuffler.BufferSize{}) {
		flags = append(flags, "--buffer", c.Buffer.String())
	}
	if c.SkipCorrupt {
		flags = append(flags, "--skip-corrupt")
	}
	if c.EqualParts {
		flags = append(flags, "--equal-parts")
	}
	if c.Partition != "" {
		flags = append(flags, "--partition", c.Partition)
	}
	if c.Strategy == "pls" {
		flags = append(flags, "--exchange", strconv.FormatFloat(c.Exchange, 'g', -1, 64))
	}
	if shuffler.IsFeedback(c.Strategy) {
		flags = append(flags, "--feedback-dim", fmt.Sprint(c.FeedbackDim))
		flags = append(flags, optionArgs(&c, "balance-rule", "feedback-timeout")...)
	}
	flags = append(flags, optionArgs(&c, "prefetch")...)
	if c.Format != nil && c.Format.Name() != "tfrecord" {
		flags = append(flags, "--format", c.Format.Name(), "--header="+strconv.FormatBool(!c.FormatOptions.NoHeader))
		if c.Format.Name() == "fixed" {
			flags = append(flags, "--record-size", fmt.Sprint(c.FormatOptions.RecordSize), "--header-bytes", fmt.Sprint(c.FormatOptions.HeaderBytes))
		}
	}
	if s3.IsURL(c.Source) {
		flags = append(flags, optionArgs(&c, "s3-endpoint", "s3-region", "s3-path-style", "s3-concurrency", "s3-timeout")...)
	}
	return flags
}

// epipeCancels writes to w, and cancels the run when w's reader has gone
// away.
type epipeCancels struct {
	w      io.Writer
	cancel context.CancelFunc
}

func (e *epipeCancels) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if errors.Is(err, syscall.EPIPE) {
		e.cancel()
	}
	return n, err
}

func writeReport(ctx context.Context, stdout io.Writer, report validator.Report, v *validateFlags) error {
	if err := validator.WriteTable(stdout, report); err != nil {
		return err
	}
	if v.jsonOut != "" {
		b, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(v.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if v.plot != "" {
		if err := drawPlot(ctx, "validate", report, v.plot, fmt.Sprintf("--zoom=%t", v.plotZoom)); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "plot written to %s\n", v.plot)
	}
	return nil
}
