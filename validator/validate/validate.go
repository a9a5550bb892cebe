// Package validate is validate's orchestration: it trains a model per order
// strategy on the epochs a mount of the dataset serves (through a real
// mount, or in-process from mount's policies, or the files in their
// order) and reports how each order trains.
package validate

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/formats"
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
			// the work directory. An in-process run's reached the log
			// as they came.
			for _, w := range rio.warnings() {
				if !rio.logged {
					log.Warn("mount of " + r.label + ": " + w)
				}
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
