package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/feedback/client"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/sizing"
	"github.com/corgifs/corgifs/validator"
	"github.com/dustin/go-humanize"
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
	fs.IntVar(&v.workers, "workers", 1, "read the `K` parts of every epoch in lock-step, as K data-parallel workers (DDP ranks):\nevery step takes --batch/K records of each part; an epoch ends at the shortest part's\nlast full step (see --equal-parts)")
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
	d.listsRecords = true // it trains with every strategy, full and once too
	d.register(fset, true)
	d.registerPrefetch(fset)
	var v validateFlags
	v.register(fset)
	if f := fset.Lookup("feedback-dim"); f != nil {
		// mount's flag, among the dataset flags: validate sets it for its
		// mounts, so its help says so and shows no default.
		f.Usage = "set by validate itself, not a validate flag: its mounts get the dimension of the\nvectors it writes (see --sketch-dim); giving it is an error"
		f.DefValue = "0"
	}
	if _, err := parse(fset, args, 0); err != nil {
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
		return fmt.Errorf("validate has no --strategy: it trains on each order of --strategies (for example --strategies %s)", d.strategy)
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
	// An s3:// --data is opened here, for the index and the epochs.
	cleanup, err := d.copyForValidate(ctx, &v, log)
	if err != nil {
		return err
	}
	defer cleanup()
	report, err := validate(ctx, &d, &v, log)
	if err != nil {
		return err
	}
	return writeReport(ctx, stdout, report, &v)
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

// validate trains one model per strategy and returns the results.
func validate(ctx context.Context, d *datasetFlags, v *validateFlags, log *slog.Logger) (validator.Report, error) {
	var report validator.Report
	if v.via != "mount" && v.via != "direct" && v.via != "files" {
		return report, fmt.Errorf("--via %q: want mount, direct or files", v.via)
	}
	runs, err := v.runs(d)
	if err != nil {
		return report, err
	}
	if err := v.checkWorkers(); err != nil {
		return report, err
	}
	if err := v.checkFeedbackFlags(d, runs, v.feedbackDimGiven); err != nil {
		return report, err
	}
	if v.via == "files" && !slices.Equal(v.strategies, []string{"none"}) {
		return report, fmt.Errorf("--via files reads the source files in their order: pass --strategies none (got %s)", v.strategies.String())
	}
	if v.via == "files" && v.workers > 1 {
		return report, fmt.Errorf("--via files reads the source files as one stream: --workers %d needs --via mount or direct, which serve K parts", v.workers)
	}
	f, dataFiles, err := v.dataFormat(d)
	if err != nil {
		return report, err
	}
	testFiles, err := formatFiles(v.test, f.Include())
	if err != nil {
		return report, err
	}
	dec, err := v.decoder(f, append(slices.Clone(dataFiles), testFiles...))
	if err != nil {
		return report, err
	}
	test, err := validator.LoadTestSet(dec, testFiles...)
	if err != nil {
		return report, err
	}
	classes := test.Classes()
	if v.model != validator.Softmax {
		classes = 2
	}
	if v.via == "files" {
		return validateFiles(ctx, v, dec, test, classes, dataFiles, log)
	}
	// Index once, so every strategy (and every child mount) uses the sidecar.
	seed, chosen, err := d.parseSeed()
	if err != nil {
		return report, err
	}
	if chosen {
		log.Info("no --seed given; chose one (pass it to reproduce these orders)", "seed", seed)
		d.seed = fmt.Sprint(seed)
	}
	// The block size and buffers a mount of --workers parts chooses
	// (package sizing): the child mounts choose them again, from the same
	// listing, and find this index in the cache.
	d.parts = v.workers
	d.chooseSizes(ctx, v.data, false, log)
	ix, _, err := index.Open(ctx, v.data, d.indexOptions(v.data, log, os.Stderr))
	if err != nil {
		return report, err
	}
	// The final model of every epoch is also measured on the whole
	// training set: the records of the index (so --skip-corrupt leaves out
	// what it left out), in source order, which does not matter here.
	trainSet, err := sourceOrder(ctx, d, ix, seed)
	if err != nil {
		return report, err
	}
	log.Info("training", "records", ix.Records, "bytes", humanize.IBytes(uint64(ix.Bytes)), "test_records", test.Len(),
		"features", test.Dim, "classes", classes, "model", v.model, "via", v.via, "workers", v.workers, "sync_every", v.syncEvery)
	work, err := os.MkdirTemp("", "corgifs-validate-")
	if err != nil {
		return report, err
	}
	defer os.RemoveAll(work)
	for _, r := range runs {
		if v.progress != nil {
			fmt.Fprintf(v.progress, " %s", r.label)
		}
		model, err := validator.NewModel(v.model, test.Dim, classes)
		if err != nil {
			return report, err
		}
		tr := &validator.Trainer{Model: model, Decoder: dec, LR: v.lr, Decay: v.decay, L2: v.l2, Batch: v.batch,
			SyncEvery: v.syncEvery, TrainSet: trainSet, Logger: log}
		fbDim := 0
		if shuffler.IsFeedback(r.strategy) {
			// The projection is drawn from the run's seed, so that the
			// mount and direct runs write the same vectors.
			if tr.Gradients, err = validator.NewGradients(model, v.sketchDim, seed); err != nil {
				return report, err
			}
			fbDim = tr.Gradients.Dim()
			if err := feedbackFits(d, ix, r.strategy, tr.Gradients); err != nil {
				return report, err
			}
		}
		rio, err := epochOpener(ctx, d, v, ix, r, seed, work, fbDim, log)
		if err != nil {
			return report, err
		}
		tr.Feedback = rio.feedback
		run, err := tr.TrainParts(ctx, r.label, v.epochs, rio.open, test)
		if err == nil && rio.feedback != nil {
			var st feedback.Stats
			if st, err = rio.feedbackStats(); err == nil {
				run.Feedback = feedbackSummary(tr.Gradients, st)
				log.Info("feedback", "strategy", r.label, "dim", fbDim, "exact", tr.Gradients.Exact(),
					"accepted", st.Accepted, "refused", st.Refused, "fallbacks", st.Fallbacks)
			}
		}
		if derr := rio.done(); err == nil {
			err = derr
		}
		if rio.warnings != nil {
			// A child mount's warnings (too few blocks a buffer, more
			// parts than blocks) are the run's: its log is deleted with
			// the work directory.
			for _, w := range rio.warnings() {
				log.Warn("mount of " + r.label + ": " + w)
				run.Warnings = append(run.Warnings, w)
			}
		}
		run.MountConfig = rio.mountConfig
		if err != nil {
			return report, err
		}
		report.Runs = append(report.Runs, run)
	}
	return report, nil
}

// A strategyRun is one entry of --strategies: a strategy and, for pls,
// its exchange fraction, and the label of its results.
type strategyRun struct {
	label    string
	strategy string
	exchange float64 // pls's Q
}

// runs parses --strategies (pls:Q gives pls its own Q; a plain pls takes
// --exchange) and refuses --partition and --exchange where no strategy
// uses them.
func (v *validateFlags) runs(d *datasetFlags) ([]strategyRun, error) {
	var runs []strategyRun
	var partitioned, plainPLS bool
	for _, s := range v.strategies {
		name, q, hasQ := strings.Cut(s, ":")
		if !shuffler.IsStrategy(name) {
			return nil, fmt.Errorf("unknown strategy %q in --strategies (choose from %s)", name, strings.Join(shuffler.Strategies(), ", "))
		}
		r := strategyRun{label: name, strategy: name}
		switch {
		case hasQ && name != "pls":
			return nil, fmt.Errorf("%q in --strategies: only pls takes an exchange fraction (pls:Q)", s)
		case hasQ:
			var f fractionFlag
			if err := f.Set(q); err != nil {
				return nil, fmt.Errorf("%q in --strategies: %w", s, err)
			}
			r.exchange = float64(f)
		case name == "pls":
			r.exchange = float64(d.exchange)
			plainPLS = true
		}
		if name == "pls" {
			// The label says the Q, so that runs of several Q compare.
			r.label = "pls:" + strconv.FormatFloat(r.exchange, 'g', -1, 64)
		}
		partitioned = partitioned || shuffler.Partitioned(name)
		runs = append(runs, r)
	}
	if d.partitionGiven && !partitioned {
		return nil, fmt.Errorf("--partition applies to the strategies local, pls, grab and cdgrab (the set each part keeps); --strategies %s has none of them", v.strategies.String())
	}
	if d.exchangeGiven && !plainPLS {
		return nil, fmt.Errorf("--exchange is the Q of pls in --strategies (local is pls with Q 0); --strategies %s has no pls without its own pls:Q", v.strategies.String())
	}
	return runs, nil
}

// checkWorkers checks --workers and --sync-every against --batch.
func (v *validateFlags) checkWorkers() error {
	v.workers = max(v.workers, 1) // demo leaves it 0
	switch {
	case v.syncEvery < 0:
		return fmt.Errorf("--sync-every %d: want 0 (synchronous SGD) or a number of steps ≥ 1", v.syncEvery)
	case v.syncEvery > 0 && v.workers == 1:
		return fmt.Errorf("--sync-every averages the models of several workers: pass --workers K with K > 1")
	case max(v.batch, 1)%v.workers != 0:
		return fmt.Errorf("--batch %d is not a multiple of --workers %d: every step takes --batch/K records of each part (try --batch %d)",
			v.batch, v.workers, v.workers*max(1, v.batch/v.workers))
	}
	return nil
}

// runIO is how a run reads its epochs and, for a feedback strategy, where
// it writes its per-example gradients.
type runIO struct {
	open          func(epoch int) ([]io.ReadCloser, error) // the --workers parts of an epoch
	feedback      validator.Feedback                       // nil unless a feedback strategy
	feedbackStats func() (feedback.Stats, error)
	done          func() error // cleans up
	// Of a child mount: its config.json, and the warnings it logged.
	mountConfig json.RawMessage
	warnings    func() []string
}

// epochOpener returns how to open the --workers parts of one epoch of a
// strategy and how to clean up; for a feedback strategy (fbDim > 0, the
// dimension of the vectors) also where its vectors go: the mount's
// feedback files, or in-process a feedback store the planner reads.
func epochOpener(ctx context.Context, d *datasetFlags, v *validateFlags, ix *index.Index, r strategyRun, seed uint64, work string, fbDim int, log *slog.Logger) (*runIO, error) {
	k := v.workers
	partition := ""
	if shuffler.Partitioned(r.strategy) {
		partition = string(d.partition)
	}
	cacheDir := d.cacheDir
	if fbDim > 0 {
		// A cache directory of the run's own: a mount keeps the orders it
		// computed from feedback there, and would serve them again to a
		// later run (with other training flags, other gradients).
		var err error
		if cacheDir, err = os.MkdirTemp(work, "cache-"); err != nil {
			return nil, err
		}
	}
	if v.via == "mount" {
		flags := []string{"--strategy", r.strategy, "--seed", fmt.Sprint(seed),
			"--max-memory", fmt.Sprint(int64(d.maxMemory)), "--cache-dir", cacheDir,
			"--include", d.include.String(), "--epochs", fmt.Sprint(v.epochs), "--parts", fmt.Sprint(k)}
		// What was not given the child chooses as any mount does, and
		// says so in its config.json: validate runs what users run.
		if d.blockSizeGiven {
			flags = append(flags, "--block-size", fmt.Sprint(int64(d.blockSize)))
		}
		if d.bufferGiven {
			flags = append(flags, "--buffer", d.buffer.v.String())
		}
		if d.skipCorrupt {
			flags = append(flags, "--skip-corrupt")
		}
		if d.equalParts {
			flags = append(flags, "--equal-parts")
		}
		if partition != "" {
			flags = append(flags, "--partition", partition)
		}
		if r.strategy == "pls" {
			flags = append(flags, "--exchange", strconv.FormatFloat(r.exchange, 'g', -1, 64))
		}
		if fbDim > 0 {
			flags = append(flags, "--feedback-dim", fmt.Sprint(fbDim), "--balance-rule", d.balance.rule.String(),
				"--feedback-timeout", d.balance.timeout.String())
		}
		flags = append(flags, "--prefetch", d.prefetchFlag())
		if v.format != "tfrecord" {
			// The decoding flags of validate are mount's too.
			flags = append(flags, "--format", v.format, "--header="+strconv.FormatBool(!v.noHeader))
			if v.format == "fixed" {
				flags = append(flags, "--record-size", fmt.Sprint(v.recordSize), "--header-bytes", fmt.Sprint(v.headerBytes))
			}
		}
		if d.source != nil {
			flags = append(flags, d.s3.args()...)
		}
		m, err := startChildMount(v.data, work, flags...)
		if err != nil {
			return nil, err
		}
		rio := &runIO{done: m.stop, mountConfig: m.config, warnings: m.warnings}
		rio.open = func(e int) ([]io.ReadCloser, error) {
			return openParts(k, func(i int) (io.ReadCloser, error) { return os.Open(m.part(e, i, k)) })
		}
		if fbDim > 0 {
			fb := &client.MountWriter{Mount: m.Dir}
			rio.feedback, rio.feedbackStats = fb, fb.Stats
		}
		return rio, nil
	}
	// The budget a mount of this strategy would use, so that the orders
	// are the mount's: its slabs' share, less what it sets aside for the
	// feedback vectors.
	slabs, _ := mount.MemorySplit(ix, int64(d.maxMemory), shuffler.ReadsRecords(r.strategy))
	p := shuffler.Params{Strategy: r.strategy, Seed: seed, Buffer: d.bufferFor(r.strategy), MaxMemory: slabs,
		EqualParts: d.equalParts, Partition: partition, Exchange: r.exchange}
	var store *feedback.Store
	if fbDim > 0 {
		var err error
		if store, err = openStore(ix, r.strategy, filepath.Join(cacheDir, "feedback"), fbDim, log); err != nil {
			return nil, err
		}
		slabs -= feedback.Bound(ix.Records, fbDim)
		p.MaxMemory, p.Feedback, p.FeedbackTimeout, p.BalanceRule, p.Logger = slabs, store, d.balance.timeout.d, d.balance.rule.r, log
	}
	pl, err := shuffler.NewPlanner(ix, p)
	if err != nil {
		if store != nil {
			store.Close()
		}
		return nil, err
	}
	lo := d.loaderOptions(nil)
	lo.MaxMemory = slabs
	ld := blockcache.NewLoader(ix, lo)
	rio := &runIO{done: func() error { return nil }}
	rio.open = func(e int) ([]io.ReadCloser, error) {
		return openParts(k, func(i int) (io.ReadCloser, error) {
			plan, err := pl.Plan(e, i, k)
			if err != nil {
				return nil, err
			}
			return &streamReader{ctx: ctx, s: shuffler.NewStream(pl, ld, plan)}, nil
		})
	}
	if store != nil {
		fb := &client.StoreWriter{Store: store, Planner: pl}
		rio.feedback, rio.feedbackStats = fb, fb.Stats
		rio.done = func() error { pl.Close(); return store.Close() }
	}
	return rio, nil
}

// sourceOrder returns how to open the records of the index in source
// order, in-process.
func sourceOrder(ctx context.Context, d *datasetFlags, ix *index.Index, seed uint64) (func() (io.ReadCloser, error), error) {
	slabs, _ := mount.MemorySplit(ix, int64(d.maxMemory), false)
	pl, err := shuffler.NewPlanner(ix, shuffler.Params{Strategy: "none", Seed: seed, Buffer: d.buffer.v, MaxMemory: slabs})
	if err != nil {
		return nil, fmt.Errorf("the training set in source order: %w", err)
	}
	lo := d.loaderOptions(nil)
	lo.MaxMemory = slabs
	ld := blockcache.NewLoader(ix, lo)
	return func() (io.ReadCloser, error) {
		plan, err := pl.Plan(0, 0, 1)
		if err != nil {
			return nil, err
		}
		return &streamReader{ctx: ctx, s: shuffler.NewStream(pl, ld, plan)}, nil
	}, nil
}

// openParts opens parts 0 to k-1 of an epoch, or none.
func openParts(k int, open func(i int) (io.ReadCloser, error)) ([]io.ReadCloser, error) {
	rs := make([]io.ReadCloser, 0, k)
	for i := range k {
		r, err := open(i)
		if err != nil {
			for _, r := range rs {
				r.Close()
			}
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// streamReader reads a Stream from start to end, as a reader of the mount would.
type streamReader struct {
	ctx context.Context
	s   *shuffler.Stream
	off int64
}

func (r *streamReader) Read(p []byte) (int, error) {
	if r.off >= r.s.Size() {
		return 0, io.EOF
	}
	n, err := r.s.ReadAt(r.ctx, p, r.off)
	r.off += int64(n)
	return n, err
}

func (r *streamReader) Close() error { r.s.Close(); return nil }

// validateFiles trains on the source files read in their order, every
// epoch: the "none" strategy without a mount or an index, in any format.
func validateFiles(ctx context.Context, v *validateFlags, dec validator.Decoder, test *validator.TestSet, classes int, files []string, log *slog.Logger) (validator.Report, error) {
	var report validator.Report
	log.Info("training on the source files in their order", "files", len(files), "test_records", test.Len(),
		"features", test.Dim, "classes", classes, "model", v.model, "format", dec.Format().Name())
	model, err := validator.NewModel(v.model, test.Dim, classes)
	if err != nil {
		return report, err
	}
	seq := func() (io.ReadCloser, error) { return &validator.Sequence{Paths: files}, nil }
	tr := &validator.Trainer{Model: model, Decoder: dec, LR: v.lr, Decay: v.decay, L2: v.l2, Batch: v.batch, TrainSet: seq, Logger: log}
	run, err := tr.Train(ctx, "none", v.epochs, func(int) (io.ReadCloser, error) { return seq() }, test)
	if err != nil {
		return report, err
	}
	report.Runs = append(report.Runs, run)
	return report, nil
}

// dataFormat returns the format of --data (--format, or chosen from the
// file extensions) and its files in their order.
func (v *validateFlags) dataFormat(d *datasetFlags) (formats.Format, []string, error) {
	o := formats.Options{NoHeader: v.noHeader, RecordSize: v.recordSize, HeaderBytes: v.headerBytes}
	if v.format == "" {
		all, err := formatFiles(d.s3.local(v.data), []string{"*"})
		if err != nil {
			return nil, nil, err
		}
		f, err := formats.Detect(all, o)
		if errors.Is(err, formats.ErrNoFormat) {
			return nil, nil, fmt.Errorf("no data files in %s: none has the extension of a format (%s); pass --format", v.data, strings.Join(formats.AllIncludes(), " "))
		}
		if err != nil {
			return nil, nil, err
		}
		v.format = f.Name()
	}
	f, err := formats.Lookup(v.format, o)
	if err != nil {
		return nil, nil, fmt.Errorf("--format: %w", err)
	}
	if slices.Equal(d.include, formats.TFRecord{}.Include()) {
		// The default --include is TFRecord's; the index and child
		// mounts then take the format's own.
		d.include = listFlag(f.Include())
	}
	// The index of --via direct and of the orders reads the records as
	// the flags say (fixed is never detected; --header=false).
	d.format = &formatFlags{format: f, options: formats.OptionsOf(f)}
	files, err := formatFiles(d.s3.local(v.data), d.include)
	return f, files, err
}

// decoder returns the decoder of the records of f that the flags describe.
// files are the data and test files, for the dimension of libsvm data.
func (v *validateFlags) decoder(f formats.Format, files []string) (validator.Decoder, error) {
	switch f := f.(type) {
	case formats.TFRecord:
		return validator.ExampleDecoder{Label: cmp.Or(v.label, "label"), Features: cmp.Or(v.features, "features")}, nil
	case formats.CSV:
		ignore := []string(v.ignoreColumns)
		if !v.ignoreSet {
			ignore = []string{"id"}
		}
		return &validator.CSVDecoder{NoHeader: !f.Header, Label: cmp.Or(v.labelColumn, "label"), Ignore: ignore, Divide: float32(v.divide)}, nil
	case formats.JSONL:
		return &validator.JSONLDecoder{Label: v.label, Features: v.features, Divide: float32(v.divide)}, nil
	case formats.LibSVM:
		if v.features != "" {
			n, err := strconv.Atoi(v.features)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("--features %q: for libsvm, the number of features", v.features)
			}
			return &validator.LibSVMDecoder{Dim: n, Divide: float32(v.divide)}, nil
		}
		dim, err := validator.LibSVMDim(func(p string) (io.ReadCloser, error) { return os.Open(p) }, files...)
		if err != nil {
			return nil, err
		}
		return &validator.LibSVMDecoder{Dim: dim, Divide: float32(v.divide)}, nil
	case formats.WDS:
		return &validator.WDSDecoder{Label: v.label, Features: v.features}, nil
	case formats.NPY, formats.Fixed:
		d := &validator.RowDecoder{}
		if fx, ok := f.(formats.Fixed); ok {
			d.Fixed = &fx
		}
		if v.labelColumn != "" {
			n, err := strconv.Atoi(v.labelColumn)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("--label-column %q: for %s, a column number from 0", v.labelColumn, f.Name())
			}
			d.Label = n
		}
		for _, c := range v.ignoreColumns {
			n, err := strconv.Atoi(c)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("--ignore-columns %q: for %s, column numbers from 0", v.ignoreColumns.String(), f.Name())
			}
			d.Ignore = append(d.Ignore, n)
		}
		return d, nil
	}
	return nil, fmt.Errorf("validate does not read --format %s", f.Name())
}

// formatFiles returns the files under dir whose base name matches one of
// include, in lexical order.
func formatFiles(dir string, include []string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		for _, pat := range include {
			if ok, _ := filepath.Match(pat, e.Name()); ok {
				files = append(files, p)
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no files matching %s in %s", strings.Join(include, ","), dir)
	}
	return files, nil
}

// bufferFor is the buffer a mount of strategy uses: --buffer, or what the
// rule chooses for it (window and mrs keep a small one).
func (d *datasetFlags) bufferFor(strategy string) shuffler.BufferSize {
	if d.bufferGiven || d.sizes == nil {
		return d.buffer.v
	}
	in := sizing.Input{DatasetBytes: d.sizes.DatasetBytes, Parts: max(1, d.parts), ObjectStore: d.source != nil,
		MaxMemory: int64(d.maxMemory), RecordStrategy: shuffler.ReadsRecords(strategy)}
	if d.blockSizeGiven {
		in.BlockSize = int64(d.blockSize)
	}
	return sizing.Choose(in).Buffer
}
