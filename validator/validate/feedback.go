package validate

import (
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/validator"
)

// feedbackSummary is what the report says of a run's feedback.
func feedbackSummary(g *validator.Gradients, s feedback.Stats) *validator.FeedbackSummary {
	return &validator.FeedbackSummary{Dim: g.Dim(), Exact: g.Exact(), Accepted: s.Accepted, Refused: s.Refused, Fallbacks: s.Fallbacks}
}
