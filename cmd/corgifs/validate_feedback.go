package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/validator"
	"github.com/dustin/go-humanize"
)

// checkFeedbackFlags refuses the feedback flags where no run of
// --strategies takes feedback, and --feedback-dim, which validate sets
// itself from --sketch-dim.
func (v *validateFlags) checkFeedbackFlags(d *datasetFlags, runs []strategyRun, feedbackDimGiven bool) error {
	if feedbackDimGiven {
		return errors.New("validate gives its mounts --feedback-dim itself (the dimension of the vectors it writes): set that with --sketch-dim")
	}
	for _, r := range runs {
		if !shuffler.IsFeedback(r.strategy) {
			continue
		}
		if v.sketchDim < 1 {
			return fmt.Errorf("--sketch-dim %d: want at least 1", v.sketchDim)
		}
		return nil
	}
	switch {
	case d.balance.ruleGiven:
		return fmt.Errorf("--balance-rule applies to the strategies grab, cdgrab and corgipile-balance; --strategies %s has none", v.strategies.String())
	case d.balance.timeoutGiven:
		return fmt.Errorf("--feedback-timeout applies to the strategies grab, cdgrab and corgipile-balance; --strategies %s has none", v.strategies.String())
	}
	return nil
}

// feedbackFits refuses a run whose feedback vectors of g do not fit in
// --max-memory beside the blocks, before it trains, naming the numbers as
// a mount would, and what a validate user can change: the mount's
// --feedback-dim is validate's to set.
func feedbackFits(d *datasetFlags, ix *index.Index, strategy string, g *validator.Gradients) error {
	rec := shuffler.ReadsRecords(strategy)
	slabs, _ := mount.MemorySplit(ix, int64(d.maxMemory), rec)
	need := max(blockcache.MinMemory(ix, d.loaderOptions(nil), rec), ix.MaxBlock())
	bound := feedback.Bound(ix.Records, g.Dim())
	if slabs-bound >= need {
		return nil
	}
	what := fmt.Sprintf("a sketch of %d values (--sketch-dim)", g.Dim())
	fix := "or lower --sketch-dim"
	if g.Exact() {
		what = fmt.Sprintf("the exact per-example gradients (%d values)", g.Dim())
		fix = "(binary models always give exact gradients: features + 1 values)"
	}
	return fmt.Errorf("%s: --max-memory %s does not hold the feedback vectors, %s for %d records (records × (4 × %d + 12) bytes = %s), beside the blocks (%s): raise --max-memory by %s %s",
		strategy, humanize.IBytes(uint64(d.maxMemory)), what, ix.Records, g.Dim(), humanize.IBytes(uint64(bound)),
		humanize.IBytes(uint64(need)), humanize.IBytes(uint64(bound+need-slabs)), fix)
}

// openStore opens a feedback store for an in-process run in dir, with the
// memory a mount would set aside for vectors of dim values.
func openStore(ix *index.Index, strategy, dir string, dim int, log *slog.Logger) (*feedback.Store, error) {
	return feedback.Open(feedback.Options{Dir: dir, Root: ix.Root, Dim: dim, Records: ix.Records,
		EpochsOnly: strategy == "grab" || strategy == "cdgrab", Logger: log})
}

// feedbackSummary is what the report says of a run's feedback.
func feedbackSummary(g *validator.Gradients, s feedback.Stats) *validator.FeedbackSummary {
	return &validator.FeedbackSummary{Dim: g.Dim(), Exact: g.Exact(), Accepted: s.Accepted, Refused: s.Refused, Fallbacks: s.Fallbacks}
}
