package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/dustin/go-humanize"
)

// takesFeedback says whether the mount takes feedback files: with a
// strategy that orders epochs from the trainer's feedback, and only then.
func (d *datasetFlags) takesFeedback() bool { return shuffler.IsFeedback(d.strategy) }

// registerFeedback adds the flags of the feedback store.
func (d *datasetFlags) registerFeedback(fs *flag.FlagSet) {
	fs.IntVar(&d.feedbackDim, "feedback-dim", 64, "largest `dimension` of the feedback vectors a trainer writes (feedback strategies);\n"+
		"records × (4 × dim + 12) bytes of --max-memory are set aside for them")
}

// openFeedback opens the feedback store of the dataset ix served with the
// seed, and takes its memory from the slabs' share of --max-memory. Its
// directory in the cache directory is keyed by everything an order
// depends on, so that a remount with the same flags finds its orders and
// any other finds none.
func (d *datasetFlags) openFeedback(ix *blockcache.Index, seed uint64, need int64, log *slog.Logger) error {
	if d.feedback != nil {
		d.feedback.Close()
		d.feedback = nil
	}
	if !d.takesFeedback() {
		return nil
	}
	if d.feedbackDim < 1 {
		return fmt.Errorf("--feedback-dim %d: want at least 1", d.feedbackDim)
	}
	bound := feedback.Bound(ix.Records, d.feedbackDim)
	if d.slabBudget-bound < need {
		return fmt.Errorf("--max-memory %s does not hold the feedback vectors (%d records × (4 × %d + 12) bytes = %s) beside the blocks (%s): raise --max-memory by %s or lower --feedback-dim",
			humanize.IBytes(uint64(d.maxMemory)), ix.Records, d.feedbackDim, humanize.IBytes(uint64(bound)),
			humanize.IBytes(uint64(need)), humanize.IBytes(uint64(bound+need-d.slabBudget)))
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00%+v\x00", ix.Root, ix.BlockSize, ix.Format, ix.FormatOptions)
	for _, f := range ix.Files {
		v := f.Version
		if d.source == nil {
			// A local file's version is its size and mtime, hashed
			// already: feedback saved before local files had versions
			// keeps its directory.
			v = ""
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%s\x00%d\x00", f.Path, f.Size, f.Mtime, v, f.Records)
	}
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00%v\x00%s\x00%v", d.strategy, seed, d.buffer.v.String(), d.equalParts, d.partitionOf(), d.exchangeQ())
	root := ix.Root
	if d.source != nil {
		root = ""
	}
	dir := filepath.Join(d.cacheDir, "feedback-"+hex.EncodeToString(h.Sum(nil)[:12]))
	// Only corgipile-balance reads the latest vectors; grab and cdgrab
	// read an epoch's from disk, within the same bound.
	epochsOnly := d.strategy == "grab" || d.strategy == "cdgrab"
	st, err := feedback.Open(feedback.Options{Dir: dir, Root: root, MaxBytes: bound, Dim: d.feedbackDim, Records: ix.Records, EpochsOnly: epochsOnly, Logger: log})
	if err != nil {
		return err
	}
	d.feedback = st
	d.slabBudget -= bound
	d.heapLimit += bound
	log.Debug("feedback files taken", "dir", dir, "max_dim", d.feedbackDim, "memory", humanize.IBytes(uint64(bound)))
	return d.openCoordinate(log)
}
