package validate

import (
	"log/slog"

	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/validator"
)

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
