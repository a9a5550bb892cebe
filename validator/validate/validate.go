// Package validate is validate's orchestration: it trains a model per order
// strategy on the epochs a mount of the dataset serves (through a real
// mount, or in-process from mount's policies, or the files in their
// order) and reports how each order trains.
package validate

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/feedback/client"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/sizing"
	"github.com/corgifs/corgifs/source/s3"
	"github.com/corgifs/corgifs/validator"
	"github.com/dustin/go-humanize"
)

// How Config.Via reads the epochs.
const (
	// ViaMount reads them through a real corgifs mount (Config.Mounter).
	ViaMount = "mount"
	// ViaDirect reads the same bytes in-process, from a planner and a
	// loader made by mount's policies.
	ViaDirect = "direct"
	// ViaFiles reads the data files in their order, every epoch, with
	// no index and no mount (strategy none only).
	ViaFiles = "files"
)

// Config is what Run trains with: the dataset's options as a mount takes
// them, and the training's own. Its errors are *mount.OptionError, whose
// {option} names are the CLI's flags without their dashes.
type Config struct {
	// Mount holds the options of a mount of Data: CacheDir, MaxMemory,
	// BlockSize and Buffer (zero: chosen as a mount chooses them),
	// Include (nil: the format's), SkipCorrupt, DirectIO, EqualParts,
	// Partition ("": random, and not given), Exchange (ExchangeGiven: of
	// a plain pls), BalanceRule and FeedbackTimeout (and whether each was
	// given), Prefetch, S3, Progress, and Seed (chosen and logged unless
	// SeedGiven). Run sets Source, Strategy, Parts, Epochs, Format and
	// FeedbackDim itself for each run.
	Mount mount.Config
	// Data and Test are the directories, or s3://bucket/prefix, of the
	// training and the test files. The files of an s3:// one are copied
	// for what reads them whole; the epochs read the bucket.
	Data, Test string
	// Model is one of validator.ModelNames.
	Model string
	// Strategies are the orders trained on side by side, each from the
	// same initial weights; "pls:Q" is pls with exchange fraction Q.
	Strategies    []string
	Epochs, Batch int
	LR, Decay, L2 float64
	// Workers is K, the parts of every epoch read in lock-step (0 is 1);
	// SyncEvery 0 is synchronous SGD, H ≥ 1 local SGD whose models are
	// averaged every H steps.
	Workers, SyncEvery int
	// SketchDim is the largest dimension of the feedback vectors of the
	// feedback strategies.
	SketchDim int
	// Via is ViaMount, ViaDirect or ViaFiles.
	Via string
	// Decode says the format of Data and Test and where its records keep
	// the label and the features.
	Decode Decode
	// Mounter serves the mount of each run of ViaMount.
	Mounter Mounter
	// Progress, if set, gets the name of each strategy as its run starts.
	Progress io.Writer
}

// Decode is the format of the records and where they keep the label and
// the features; "" and zero are the format's defaults.
type Decode struct {
	// Format is a formats name, or "" to choose it from the extensions.
	Format                  string
	NoHeader                bool // csv files have no header row
	RecordSize, HeaderBytes int64
	// Label and Features: see the validator decoders; for libsvm,
	// Features is the number of features.
	Label, Features string
	// LabelColumn is a csv header name or a column number; IgnoreColumns
	// the columns that are not features (IgnoreGiven: csv's default "id"
	// is replaced).
	LabelColumn   string
	IgnoreColumns []string
	IgnoreGiven   bool
	// Divide divides every feature of csv, jsonl and libsvm.
	Divide float64
}

// A Mounter serves the mount of c (c.Source) at a new directory under
// work and returns once it serves. Reading a FUSE mount from the process
// that serves it can deadlock: the CLI's runs `corgifs mount` as a child
// process.
type Mounter func(ctx context.Context, c mount.Config, work string) (*Mounted, error)

// Mounted is a mount a Mounter serves.
type Mounted struct {
	Dir string
	// Ext is the extension of its part files.
	Ext string
	// Config is its config.json.
	Config json.RawMessage
	// Warnings returns the warnings it logged so far.
	Warnings func() []string
	// Stop unmounts it and says whether it ended well.
	Stop func() error
}

// Result is what Run measured, and the block size and buffer the mounts'
// rule chose (nil with ViaFiles, which has no index).
type Result struct {
	Report validator.Report
	Sizes  *sizing.Choice
}

func optionErrorf(option, format string, a ...any) error {
	return &mount.OptionError{Option: option, Reason: fmt.Sprintf(format, a...)}
}

// Run trains one model per strategy of c and returns the results.
func Run(ctx context.Context, c Config, log *slog.Logger) (Result, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var res Result
	v := &validation{Config: c, log: log}
	defer v.close()
	if err := v.copyFromS3(ctx); err != nil {
		return res, err
	}
	if c.Via != ViaMount && c.Via != ViaDirect && c.Via != ViaFiles {
		return res, optionErrorf("via", "{via} %q: want mount, direct or files", c.Via)
	}
	runs, err := c.runs()
	if err != nil {
		return res, err
	}
	v.Workers = max(v.Workers, 1)
	if err := v.checkWorkers(); err != nil {
		return res, err
	}
	if err := v.checkFeedback(runs); err != nil {
		return res, err
	}
	if v.Via == ViaFiles && !slices.Equal(v.Strategies, []string{"none"}) {
		return res, optionErrorf("via", "{via} files reads the source files in their order: pass {strategies} none (got %s)", strings.Join(v.Strategies, ","))
	}
	if v.Via == ViaFiles && v.Workers > 1 {
		return res, optionErrorf("workers", "{via} files reads the source files as one stream: {workers} %d needs {via} mount or direct, which serve K parts", v.Workers)
	}
	dataFiles, err := v.dataFormat()
	if err != nil {
		return res, err
	}
	testFiles, err := formatFiles(v.test, v.format.Include())
	if err != nil {
		return res, err
	}
	dec, err := v.decoder(append(slices.Clone(dataFiles), testFiles...))
	if err != nil {
		return res, err
	}
	test, err := validator.LoadTestSet(dec, testFiles...)
	if err != nil {
		return res, err
	}
	classes := test.Classes()
	if v.Model != validator.Softmax {
		classes = 2
	}
	if v.Via == ViaFiles {
		res.Report, err = v.trainFiles(ctx, dec, test, classes, dataFiles)
		return res, err
	}
	seed := v.Mount.Seed
	if !v.Mount.SeedGiven {
		var b [8]byte
		rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:]) >> 1
		log.Info("no seed given; chose one (pass it to reproduce these orders)", "seed", seed)
	}
	// Index once, so every strategy (and every child mount) uses the
	// sidecar, at the block size and buffer a mount of Workers parts
	// chooses (package sizing): the child mounts choose them again, from
	// the same listing, and find this index in the cache.
	base, err := mount.OpenIndexFrom(ctx, v.indexConfig(), v.src, log)
	if err != nil {
		return res, err
	}
	defer base.Close()
	v.base, res.Sizes = base, &base.Sizes
	ix := base.Index
	// The final model of every epoch is also measured on the whole
	// training set: the records of the index (so SkipCorrupt leaves out
	// what it left out), in source order, which does not matter here.
	trainSet, closeTrainSet, err := v.sourceOrder(ctx, seed)
	if err != nil {
		return res, err
	}
	defer closeTrainSet()
	log.Info("training", "records", ix.Records, "bytes", humanize.IBytes(uint64(ix.Bytes)), "test_records", test.Len(),
		"features", test.Dim, "classes", classes, "model", v.Model, "via", v.Via, "workers", v.Workers, "sync_every", v.SyncEvery)
	work, err := os.MkdirTemp("", "corgifs-validate-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(work)
	for _, r := range runs {
		if v.Progress != nil {
			fmt.Fprintf(v.Progress, " %s", r.label)
		}
		model, err := validator.NewModel(v.Model, test.Dim, classes)
		if err != nil {
			return res, err
		}
		tr := &validator.Trainer{Model: model, Decoder: dec, LR: v.LR, Decay: v.Decay, L2: v.L2, Batch: v.Batch,
			SyncEvery: v.SyncEvery, TrainSet: trainSet, Logger: log}
		fbDim := 0
		if shuffler.IsFeedback(r.strategy) {
			// The projection is drawn from the run's seed, so that the
			// mount and direct runs write the same vectors.
			if tr.Gradients, err = validator.NewGradients(model, v.SketchDim, seed); err != nil {
				return res, err
			}
			fbDim = tr.Gradients.Dim()
			if err := v.feedbackFits(ix, r.strategy, tr.Gradients); err != nil {
				return res, err
			}
		}
		rio, err := v.epochOpener(ctx, r, seed, work, fbDim)
		if err != nil {
			return res, err
		}
		tr.Feedback = rio.feedback
		run, err := tr.TrainParts(ctx, r.label, v.Epochs, rio.open, test)
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
			return res, err
		}
		res.Report.Runs = append(res.Report.Runs, run)
	}
	return res, nil
}

// validation is the state of one Run.
type validation struct {
	Config
	log *slog.Logger
	// src is the S3 source of an s3:// Data, nil for a local one.
	src *s3.Source
	// data is the directory whose files are read whole (the copy of an
	// s3:// Data), test that of the test files.
	data, test string
	copies     []string // directories to remove
	// format is the format of Data and Test, include the globs of its
	// files.
	format  formats.Format
	include []string
	// base is the Dataset of the index every run reads.
	base *mount.Dataset
}

func (v *validation) close() {
	for _, dir := range v.copies {
		os.RemoveAll(dir)
	}
}

// copyFromS3 opens the source of an s3:// Data, for the index and the
// epochs, which read the bucket, and copies its data objects into a
// temporary directory for what is read as whole local files: the
// format's detection, the libsvm dimension, ViaFiles and the loss on
// the whole training set. An s3:// Test is copied too.
func (v *validation) copyFromS3(ctx context.Context) error {
	v.data, v.test = v.Data, v.Test
	include := formats.AllIncludes()
	if v.Mount.Include != nil {
		include = v.Mount.Include
	}
	for _, p := range []*string{&v.data, &v.test} {
		if !s3.IsURL(*p) {
			continue
		}
		sc := v.Mount.S3
		sc.Logger = v.log
		src, err := s3.New(ctx, *p, sc)
		if err != nil {
			return err
		}
		if p == &v.data {
			v.src = src
		}
		dir, err := os.MkdirTemp("", "corgifs-validate-s3-")
		if err != nil {
			return err
		}
		v.copies = append(v.copies, dir)
		if err := copyObjects(ctx, src, include, dir); err != nil {
			return err
		}
		v.log.Info("copied the data objects for the whole-file reads (the epochs read the bucket)", "source", *p, "to", dir)
		*p = dir
	}
	return nil
}

// A strategyRun is one entry of Strategies: a strategy and, for pls,
// its exchange fraction, and the label of its results.
type strategyRun struct {
	label    string
	strategy string
	exchange float64 // pls's Q
}

// runs parses Strategies (pls:Q gives pls its own Q; a plain pls takes
// Mount.Exchange) and refuses a Partition or an Exchange given where no
// strategy uses them.
func (c *Config) runs() ([]strategyRun, error) {
	var runs []strategyRun
	var partitioned, plainPLS bool
	list := strings.Join(c.Strategies, ",")
	for _, s := range c.Strategies {
		name, q, hasQ := strings.Cut(s, ":")
		if !shuffler.IsStrategy(name) {
			return nil, optionErrorf("strategies", "unknown strategy %q in {strategies} (choose from %s)", name, strings.Join(shuffler.Strategies(), ", "))
		}
		r := strategyRun{label: name, strategy: name}
		switch {
		case hasQ && name != "pls":
			return nil, optionErrorf("strategies", "%q in {strategies}: only pls takes an exchange fraction (pls:Q)", s)
		case hasQ:
			f, err := strconv.ParseFloat(q, 64)
			if err != nil || !(f >= 0 && f <= 1) {
				return nil, optionErrorf("strategies", "%q in {strategies}: want a fraction Q with 0 ≤ Q ≤ 1, such as 0.3", s)
			}
			r.exchange = f
		case name == "pls":
			r.exchange = c.Mount.Exchange
			plainPLS = true
		}
		if name == "pls" {
			// The label says the Q, so that runs of several Q compare.
			r.label = "pls:" + strconv.FormatFloat(r.exchange, 'g', -1, 64)
		}
		partitioned = partitioned || shuffler.Partitioned(name)
		runs = append(runs, r)
	}
	if c.Mount.Partition != "" && !partitioned {
		return nil, optionErrorf("partition", "{partition} applies to the strategies local, pls, grab and cdgrab (the set each part keeps); {strategies} %s has none of them", list)
	}
	if c.Mount.ExchangeGiven && !plainPLS {
		return nil, optionErrorf("exchange", "{exchange} is the Q of pls in {strategies} (local is pls with Q 0); {strategies} %s has no pls without its own pls:Q", list)
	}
	return runs, nil
}

// checkWorkers checks Workers and SyncEvery against Batch.
func (c *Config) checkWorkers() error {
	switch {
	case c.SyncEvery < 0:
		return optionErrorf("sync-every", "{sync-every} %d: want 0 (synchronous SGD) or a number of steps ≥ 1", c.SyncEvery)
	case c.SyncEvery > 0 && c.Workers == 1:
		return optionErrorf("sync-every", "{sync-every} averages the models of several workers: pass {workers} K with K > 1")
	case max(c.Batch, 1)%c.Workers != 0:
		return optionErrorf("batch", "{batch} %d is not a multiple of {workers} %d: every step takes {batch}/K records of each part (try {batch} %d)",
			c.Batch, c.Workers, c.Workers*max(1, c.Batch/c.Workers))
	}
	return nil
}

// checkFeedback refuses the feedback options where no run of Strategies
// takes feedback.
func (c *Config) checkFeedback(runs []strategyRun) error {
	for _, r := range runs {
		if !shuffler.IsFeedback(r.strategy) {
			continue
		}
		if c.SketchDim < 1 {
			return optionErrorf("sketch-dim", "{sketch-dim} %d: want at least 1", c.SketchDim)
		}
		return nil
	}
	list := strings.Join(c.Strategies, ",")
	switch {
	case c.Mount.BalanceRuleGiven:
		return optionErrorf("balance-rule", "{balance-rule} applies to the strategies grab, cdgrab and corgipile-balance; {strategies} %s has none", list)
	case c.Mount.FeedbackTimeoutGiven:
		return optionErrorf("feedback-timeout", "{feedback-timeout} applies to the strategies grab, cdgrab and corgipile-balance; {strategies} %s has none", list)
	}
	return nil
}

// indexConfig is the mount.Config of the index of Data: the one a mount
// of Workers parts builds, which the child mounts find in the cache.
func (v *validation) indexConfig() mount.Config {
	c := v.Mount
	c.Source = v.Data
	if c.Include != nil {
		c.Include = v.include
	}
	c.Parts = v.Workers
	c.ListsRecords = true // it trains with every strategy, full and once too
	c.Format, c.FormatOptions = v.format, formats.OptionsOf(v.format)
	return c
}

// runIO is how a run reads its epochs and, for a feedback strategy, where
// it writes its per-example gradients.
type runIO struct {
	open          func(epoch int) ([]io.ReadCloser, error) // the Workers parts of an epoch
	feedback      validator.Feedback                       // nil unless a feedback strategy
	feedbackStats func() (feedback.Stats, error)
	done          func() error // cleans up
	// Of a child mount: its config.json, and the warnings it logged.
	mountConfig json.RawMessage
	warnings    func() []string
}

// epochOpener returns how to open the Workers parts of one epoch of a
// strategy and how to clean up; for a feedback strategy (fbDim > 0, the
// dimension of the vectors) also where its vectors go: the mount's
// feedback files, or in-process a feedback store the planner reads.
func (v *validation) epochOpener(ctx context.Context, r strategyRun, seed uint64, work string, fbDim int) (*runIO, error) {
	k := v.Workers
	partition := ""
	if shuffler.Partitioned(r.strategy) {
		partition = cmp.Or(v.Mount.Partition, shuffler.PartitionRandom)
	}
	cacheDir := v.Mount.CacheDir
	if fbDim > 0 {
		// A cache directory of the run's own: a mount keeps the orders it
		// computed from feedback there, and would serve them again to a
		// later run (with other training options, other gradients).
		var err error
		if cacheDir, err = os.MkdirTemp(work, "cache-"); err != nil {
			return nil, err
		}
	}
	if v.Via == ViaMount {
		if v.Mounter == nil {
			return nil, errors.New("validate through a mount needs a Mounter")
		}
		// What was not given the mount chooses as any mount does, and
		// says so in its config.json: validate runs what users run.
		c := v.Mount
		c.Source, c.Strategy, c.Seed, c.SeedGiven = v.Data, r.strategy, seed, true
		c.CacheDir, c.Include, c.Epochs, c.Parts = cacheDir, v.include, v.Epochs, k
		c.Partition, c.Exchange, c.ExchangeGiven = partition, r.exchange, r.strategy == "pls"
		c.FeedbackDim = fbDim
		// The decoding options of validate are the mount's too.
		c.Format = v.format
		c.FormatOptions = formats.Options{NoHeader: v.Decode.NoHeader, RecordSize: v.Decode.RecordSize, HeaderBytes: v.Decode.HeaderBytes}
		m, err := v.Mounter(ctx, c, work)
		if err != nil {
			return nil, err
		}
		rio := &runIO{done: m.Stop, mountConfig: m.Config, warnings: m.Warnings}
		rio.open = func(e int) ([]io.ReadCloser, error) {
			return openParts(k, func(i int) (io.ReadCloser, error) { return os.Open(shuffler.PartPath(m.Dir, e, i, k, m.Ext)) })
		}
		if fbDim > 0 {
			fb := &client.MountWriter{Mount: m.Dir}
			rio.feedback, rio.feedbackStats = fb, fb.Stats
		}
		return rio, nil
	}
	// The planner and the loader a mount of this strategy would make,
	// over the same index: its slabs' share of MaxMemory, less what it
	// sets aside for the feedback vectors, and its feedback store.
	ds, err := v.base.Reopen(v.runConfig(r, seed, cacheDir, fbDim))
	if err != nil {
		return nil, err
	}
	pl, ld := ds.Planner, ds.NewLoader()
	rio := &runIO{done: func() error { pl.Close(); return ds.Close() }}
	rio.open = func(e int) ([]io.ReadCloser, error) {
		return openParts(k, func(i int) (io.ReadCloser, error) {
			plan, err := pl.Plan(e, i, k)
			if err != nil {
				return nil, err
			}
			return &streamReader{ctx: ctx, s: shuffler.NewStream(pl, ld, plan)}, nil
		})
	}
	if ds.Feedback != nil {
		fb := &client.StoreWriter{Store: ds.Feedback, Planner: pl}
		rio.feedback, rio.feedbackStats = fb, fb.Stats
	}
	return rio, nil
}

// runConfig is the mount.Config of run r of strategy in-process: the
// options of validate that apply to its strategy, and none other (a
// mount refuses them).
func (v *validation) runConfig(r strategyRun, seed uint64, cacheDir string, fbDim int) mount.Config {
	c := v.indexConfig()
	c.Strategy, c.Seed, c.SeedGiven, c.CacheDir, c.Parts, c.Epochs = r.strategy, seed, true, cacheDir, v.Workers, v.Epochs
	c.Partition = ""
	if shuffler.Partitioned(r.strategy) {
		c.Partition = cmp.Or(v.Mount.Partition, shuffler.PartitionRandom)
	}
	c.Exchange, c.ExchangeGiven = r.exchange, r.strategy == "pls"
	c.FeedbackDim = fbDim
	if !shuffler.IsFeedback(r.strategy) {
		c.BalanceRuleGiven, c.FeedbackTimeoutGiven = false, false
	}
	return c
}

// loaderOptions are the options of an in-process loader of the dataset,
// its budget left to the caller.
func (v *validation) loaderOptions() blockcache.LoaderOptions {
	return v.Mount.LoaderOptions(v.src, 0, nil)
}

// sourceOrder returns how to open the records of the index in source
// order, in-process, and how to release them.
func (v *validation) sourceOrder(ctx context.Context, seed uint64) (func() (io.ReadCloser, error), func(), error) {
	c := v.runConfig(strategyRun{strategy: "none"}, seed, v.Mount.CacheDir, 0)
	c.Buffer, c.EqualParts, c.Parts = v.base.Sizes.Buffer, false, 1
	ds, err := v.base.Reopen(c)
	if err != nil {
		return nil, nil, fmt.Errorf("the training set in source order: %w", err)
	}
	pl, ld := ds.Planner, ds.NewLoader()
	return func() (io.ReadCloser, error) {
		plan, err := pl.Plan(0, 0, 1)
		if err != nil {
			return nil, err
		}
		return &streamReader{ctx: ctx, s: shuffler.NewStream(pl, ld, plan)}, nil
	}, func() { pl.Close(); ds.Close() }, nil
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

// trainFiles trains on the source files read in their order, every
// epoch: the "none" strategy without a mount or an index, in any format.
func (v *validation) trainFiles(ctx context.Context, dec validator.Decoder, test *validator.TestSet, classes int, files []string) (validator.Report, error) {
	var report validator.Report
	v.log.Info("training on the source files in their order", "files", len(files), "test_records", test.Len(),
		"features", test.Dim, "classes", classes, "model", v.Model, "format", dec.Format().Name())
	model, err := validator.NewModel(v.Model, test.Dim, classes)
	if err != nil {
		return report, err
	}
	seq := func() (io.ReadCloser, error) { return &validator.Sequence{Paths: files}, nil }
	tr := &validator.Trainer{Model: model, Decoder: dec, LR: v.LR, Decay: v.Decay, L2: v.L2, Batch: v.Batch, TrainSet: seq, Logger: v.log}
	run, err := tr.Train(ctx, "none", v.Epochs, func(int) (io.ReadCloser, error) { return seq() }, test)
	if err != nil {
		return report, err
	}
	report.Runs = append(report.Runs, run)
	return report, nil
}

// dataFormat sets the format of Data (Decode.Format, or chosen from the
// file extensions) and the globs of its files, and returns its files in
// their order.
func (v *validation) dataFormat() ([]string, error) {
	o := formats.Options{NoHeader: v.Decode.NoHeader, RecordSize: v.Decode.RecordSize, HeaderBytes: v.Decode.HeaderBytes}
	name := v.Decode.Format
	if name == "" {
		all, err := formatFiles(v.data, []string{"*"})
		if err != nil {
			return nil, err
		}
		f, err := formats.Detect(all, o)
		if errors.Is(err, formats.ErrNoFormat) {
			return nil, optionErrorf("format", "no data files in %s: none has the extension of a format (%s); pass {format}", v.Data, strings.Join(formats.AllIncludes(), " "))
		}
		if err != nil {
			return nil, err
		}
		name = f.Name()
	}
	f, err := formats.Lookup(name, o)
	if err != nil {
		return nil, &mount.OptionError{Option: "format", Reason: "{format}: " + err.Error(), Err: err}
	}
	v.format = f
	v.include = v.Mount.Include
	if v.include == nil || slices.Equal(v.include, formats.TFRecord{}.Include()) {
		// The default Include is TFRecord's; the index and the mounts
		// then take the format's own.
		v.include = f.Include()
	}
	return formatFiles(v.data, v.include)
}

// decoder returns the decoder of the records of the format that Decode
// describes. files are the data and test files, for the dimension of
// libsvm data.
func (v *validation) decoder(files []string) (validator.Decoder, error) {
	d := v.Decode
	switch f := v.format.(type) {
	case formats.TFRecord:
		return validator.ExampleDecoder{Label: cmp.Or(d.Label, "label"), Features: cmp.Or(d.Features, "features")}, nil
	case formats.CSV:
		ignore := d.IgnoreColumns
		if !d.IgnoreGiven {
			ignore = []string{"id"}
		}
		return &validator.CSVDecoder{NoHeader: !f.Header, Label: cmp.Or(d.LabelColumn, "label"), Ignore: ignore, Divide: float32(d.Divide)}, nil
	case formats.JSONL:
		return &validator.JSONLDecoder{Label: d.Label, Features: d.Features, Divide: float32(d.Divide)}, nil
	case formats.LibSVM:
		if d.Features != "" {
			n, err := strconv.Atoi(d.Features)
			if err != nil || n < 1 {
				return nil, optionErrorf("features", "{features} %q: for libsvm, the number of features", d.Features)
			}
			return &validator.LibSVMDecoder{Dim: n, Divide: float32(d.Divide)}, nil
		}
		dim, err := validator.LibSVMDim(func(p string) (io.ReadCloser, error) { return os.Open(p) }, files...)
		if err != nil {
			return nil, err
		}
		return &validator.LibSVMDecoder{Dim: dim, Divide: float32(d.Divide)}, nil
	case formats.WDS:
		return &validator.WDSDecoder{Label: d.Label, Features: d.Features}, nil
	case formats.NPY, formats.Fixed:
		rd := &validator.RowDecoder{}
		if fx, ok := f.(formats.Fixed); ok {
			rd.Fixed = &fx
		}
		if d.LabelColumn != "" {
			n, err := strconv.Atoi(d.LabelColumn)
			if err != nil || n < 0 {
				return nil, optionErrorf("label-column", "{label-column} %q: for %s, a column number from 0", d.LabelColumn, f.Name())
			}
			rd.Label = n
		}
		for _, c := range d.IgnoreColumns {
			n, err := strconv.Atoi(c)
			if err != nil || n < 0 {
				return nil, optionErrorf("ignore-columns", "{ignore-columns} %q: for %s, column numbers from 0", strings.Join(d.IgnoreColumns, ","), f.Name())
			}
			rd.Ignore = append(rd.Ignore, n)
		}
		return rd, nil
	}
	return nil, optionErrorf("format", "validate does not read {format} %s", v.format.Name())
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

// feedbackFits refuses a run whose feedback vectors of g do not fit in
// MaxMemory beside the blocks, before it trains, naming the numbers as
// a mount would, and what a user of validate can change: the mount's
// feedback dimension is validate's to set.
func (v *validation) feedbackFits(ix *index.Index, strategy string, g *validator.Gradients) error {
	rec := shuffler.ReadsRecords(strategy)
	slabs, _ := mount.MemorySplit(ix, v.Mount.MaxMemory, rec)
	need := max(blockcache.MinMemory(ix, v.loaderOptions(), rec), ix.MaxBlock())
	bound := feedback.Bound(ix.Records, g.Dim())
	if slabs-bound >= need {
		return nil
	}
	what := fmt.Sprintf("a sketch of %d values ({sketch-dim})", g.Dim())
	fix := "or lower {sketch-dim}"
	if g.Exact() {
		what = fmt.Sprintf("the exact per-example gradients (%d values)", g.Dim())
		fix = "(binary models always give exact gradients: features + 1 values)"
	}
	return optionErrorf("max-memory", "%s: {max-memory} %s does not hold the feedback vectors, %s for %d records (records × (4 × %d + 12) bytes = %s), beside the blocks (%s): raise {max-memory} by %s %s",
		strategy, humanize.IBytes(uint64(v.Mount.MaxMemory)), what, ix.Records, g.Dim(), humanize.IBytes(uint64(bound)),
		humanize.IBytes(uint64(need)), humanize.IBytes(uint64(bound+need-slabs)), fix)
}
