package validate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/feedback/client"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/validator"
)

// runIO is how a run reads its epochs and, for a feedback strategy, where
// it writes its per-example gradients.
type runIO struct {
	open          func(epoch int) ([]io.ReadCloser, error) // the Workers parts of an epoch
	feedback      validator.Feedback                       // nil unless a feedback strategy
	feedbackStats func() (feedback.Stats, error)
	done          func() error // cleans up
	// Of a child mount: its config.json. warnings returns the warnings
	// the run's mount logged, or those its in-process Dataset logged
	// (logged set: they reached the log as they came).
	mountConfig json.RawMessage
	warnings    func() []string
	logged      bool
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
	// It logs what the run's mount would (too few blocks a buffer for this
	// strategy, feedback that came late), and the run keeps its warnings
	// as it keeps a mount's.
	w := new(warnings)
	ds, err := v.base.Reopen(v.runConfig(r, seed, cacheDir, fbDim), w.logger(v.log.With("run", r.label)))
	if err != nil {
		return nil, err
	}
	pl, ld := ds.Planner, ds.NewLoader()
	rio := &runIO{done: func() error { pl.Close(); return ds.Close() }, warnings: w.all, logged: true}
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
	// Not an order a mount serves: the buffer rule's warning for it would
	// mislead.
	ds, err := v.base.Reopen(c, slog.New(slog.DiscardHandler))
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
