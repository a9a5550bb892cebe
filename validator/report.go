package validator

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
)

// A Report holds the runs of one comparison, one per strategy.
type Report struct {
	Runs []Run `json:"runs"`
}

// A Run is the training of one model on the orders of one strategy, such
// as "corgipile", "shuffle" or "clustered".
type Run struct {
	Strategy string  `json:"strategy"`
	Epochs   []Epoch `json:"epochs"`
	// Workers is the number of parts read in lock-step per epoch, when
	// more than one; SyncEvery is then 0 for synchronous SGD or the local
	// steps between model averages (Trainer.SyncEvery).
	Workers   int `json:"workers,omitempty"`
	SyncEvery int `json:"sync_every,omitempty"`
	// Feedback says, for a strategy that orders epochs from the trainer's
	// per-example gradients, what was written to the order server.
	Feedback *FeedbackSummary `json:"feedback,omitempty"`
	// Warnings are those the run's mount logged (corgifs validate's child
	// mounts; with --via direct, its in-process Dataset), and MountConfig
	// its .corgifs/config.json (child mounts only).
	Warnings    []string        `json:"warnings,omitempty"`
	MountConfig json.RawMessage `json:"mount_config,omitempty"`
}

// FeedbackSummary is what a run gave the order server (Trainer.Feedback)
// and what the server did with it.
type FeedbackSummary struct {
	Dim   int  `json:"dim"`   // values per vector
	Exact bool `json:"exact"` // the gradients themselves, not a sketch
	// Feedback files accepted and refused, and epochs served as a random
	// reshuffle because their feedback did not arrive in time.
	Accepted  int64 `json:"accepted"`
	Refused   int64 `json:"refused"`
	Fallbacks int64 `json:"fallbacks"`
}

// An Epoch holds the measurements of one epoch of a Run.
type Epoch struct {
	Epoch     int     `json:"epoch"`      // from 0
	TrainLoss float64 `json:"train_loss"` // mean training loss over the epoch (EpochStats)
	TrainAcc  float64 `json:"train_acc"`  // training accuracy over the epoch (EpochStats)
	TestAcc   float64 `json:"test_acc"`   // test accuracy after the epoch
	Seconds   float64 `json:"seconds"`    // time of the training pass

	// The model at the end of the epoch on the full training set (a full
	// pass, Trainer.TrainSet), and its mean loss on the test set.
	FullTrainLoss float64 `json:"full_train_loss,omitempty"`
	FullTrainAcc  float64 `json:"full_train_acc,omitempty"`
	TestLoss      float64 `json:"test_loss,omitempty"`
	// Records trained on and updates (EpochStats).
	Records int64 `json:"records,omitempty"`
	Steps   int64 `json:"steps,omitempty"`
}

// epochs returns the epoch numbers that occur in any run, in order.
func (r Report) epochs() []int {
	var es []int
	for _, run := range r.Runs {
		for _, e := range run.Epochs {
			es = append(es, e.Epoch)
		}
	}
	slices.Sort(es)
	return slices.Compact(es)
}

// fullTrain reports whether any epoch was evaluated on the full training set.
func (r Report) fullTrain() bool {
	for _, run := range r.Runs {
		for _, e := range run.Epochs {
			if e.FullTrainLoss != 0 || e.FullTrainAcc != 0 {
				return true
			}
		}
	}
	return false
}

type measure struct {
	title  string
	format string
	value  func(Epoch) float64
}

// WriteTable writes the report as plain-text tables, one per measure (test
// accuracy, training loss, training accuracy, seconds, and when measured
// the final model's loss and accuracy on the full training set), each with
// a row per epoch and a column per strategy, so that strategies compare
// along a row.
func WriteTable(w io.Writer, r Report) error {
	measures := []measure{
		{"test accuracy (%)", "%.2f", func(e Epoch) float64 { return 100 * e.TestAcc }},
		{"training loss (mean over the epoch)", "%.4f", func(e Epoch) float64 { return e.TrainLoss }},
		{"training accuracy (%, over the epoch)", "%.2f", func(e Epoch) float64 { return 100 * e.TrainAcc }},
		{"seconds per epoch (training pass)", "%.2f", func(e Epoch) float64 { return e.Seconds }},
	}
	if r.fullTrain() {
		measures = append(measures,
			measure{"training loss (model at the end of the epoch, full training set)", "%.4f", func(e Epoch) float64 { return e.FullTrainLoss }},
			measure{"training accuracy (%, model at the end of the epoch, full training set)", "%.2f", func(e Epoch) float64 { return 100 * e.FullTrainAcc }})
	}
	epochs := r.epochs()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(r.Runs) > 0 && r.Runs[0].Workers > 1 {
		// Every run of one validate has the same workers.
		how := "synchronous SGD (gradients averaged every step)"
		if h := r.Runs[0].SyncEvery; h > 0 {
			how = fmt.Sprintf("local SGD (models averaged every %d steps and at the end of every epoch)", h)
		}
		fmt.Fprintf(tw, "%d workers reading their parts in lock-step, %s\n\n", r.Runs[0].Workers, how)
	}
	for i, m := range measures {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		// A title line without tabs is not part of the aligned columns.
		fmt.Fprintf(tw, "%s\n", m.title)
		fmt.Fprint(tw, "epoch\t")
		for _, run := range r.Runs {
			fmt.Fprintf(tw, "%s\t", run.Strategy)
		}
		fmt.Fprintln(tw)
		for _, e := range epochs {
			fmt.Fprintf(tw, "%d\t", e)
			for _, run := range r.Runs {
				i := slices.IndexFunc(run.Epochs, func(x Epoch) bool { return x.Epoch == e })
				if i < 0 {
					fmt.Fprint(tw, "-\t")
					continue
				}
				fmt.Fprintf(tw, m.format+"\t", m.value(run.Epochs[i]))
			}
			fmt.Fprintln(tw)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("validator: writing table: %w", err)
	}
	return nil
}
