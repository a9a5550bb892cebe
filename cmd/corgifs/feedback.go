package main

import (
	"flag"
)

// registerFeedback adds the flags of the feedback store.
func (d *datasetFlags) registerFeedback(fs *flag.FlagSet) {
	fs.IntVar(&d.feedbackDim, "feedback-dim", 64, "largest `dimension` of the feedback vectors a trainer writes (feedback strategies);\n"+
		"records × (4 × dim + 12) bytes of --max-memory are set aside for them")
}
