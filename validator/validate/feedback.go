package validate

import (
	"fmt"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/validator"
	"github.com/dustin/go-humanize"
)

// feedbackSummary is what the report says of a run's feedback.
func feedbackSummary(g *validator.Gradients, s feedback.Stats) *validator.FeedbackSummary {
	return &validator.FeedbackSummary{Dim: g.Dim(), Exact: g.Exact(), Accepted: s.Accepted, Refused: s.Refused, Fallbacks: s.Fallbacks}
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
