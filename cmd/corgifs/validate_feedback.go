package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"

	"github.com/corgifs/corgifs/api"
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
	case d.c.BalanceRuleGiven:
		return fmt.Errorf("--balance-rule applies to the strategies grab, cdgrab and corgipile-balance; --strategies %s has none", v.strategies.String())
	case d.c.FeedbackTimeoutGiven:
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
	slabs, _ := mount.MemorySplit(ix, d.c.MaxMemory, rec)
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
		strategy, humanize.IBytes(uint64(d.c.MaxMemory)), what, ix.Records, g.Dim(), humanize.IBytes(uint64(bound)),
		humanize.IBytes(uint64(need)), humanize.IBytes(uint64(bound+need-slabs)), fix)
}

// feedbackFile encodes the feedback file of dim-value vectors into buf: the
// header, then the vectors as little-endian float32s.
func feedbackFile(buf []byte, dim int, vecs []float32) []byte {
	buf = append(buf[:0], feedback.Magic...)
	buf = binary.LittleEndian.AppendUint32(buf, feedback.Version)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(dim))
	buf = binary.LittleEndian.AppendUint32(buf, 0)
	for _, x := range vecs {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
	}
	return buf
}

// mountFeedback writes the vectors into a mount's feedback files, as any
// trainer would.
type mountFeedback struct {
	mnt string
	buf []byte
}

// feedbackPath returns the path of the feedback file of part i of k of
// epoch e in the mount mnt.
func feedbackPath(mnt string, e, i, k int) string {
	return filepath.Join(mnt, api.Dir, api.FeedbackDir, shuffler.EpochName(e), shuffler.PartName(i, k, ".f32"))
}

func (f *mountFeedback) WritePart(epoch, part, parts, dim int, vecs []float32) error {
	f.buf = feedbackFile(f.buf, dim, vecs)
	path := feedbackPath(f.mnt, epoch, part, parts)
	fd, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = fd.Write(f.buf)
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w (the mount's reason: %s)", err, f.reason(epoch, part, parts))
	}
	return nil
}

// reason returns what the mount's status.json says of a part.
func (f *mountFeedback) reason(epoch, part, parts int) string {
	b, err := os.ReadFile(api.StatusPath(f.mnt))
	if err != nil {
		return fmt.Sprintf("status.json unreadable: %v", err)
	}
	var st feedback.Status
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Sprintf("status.json: %v", err)
	}
	for _, p := range st.Parts {
		if p.Epoch == epoch && p.Part == part && p.Parts == parts {
			return p.State + ": " + p.Reason
		}
	}
	return "none given"
}

// stats returns the feedback counters of the mount's stats.json.
func (f *mountFeedback) stats() (feedback.Stats, error) {
	b, err := os.ReadFile(api.StatsPath(f.mnt))
	if err != nil {
		return feedback.Stats{}, err
	}
	var s struct{ Feedback *feedback.Stats }
	if err := json.Unmarshal(b, &s); err != nil {
		return feedback.Stats{}, fmt.Errorf("%s/.corgifs/stats.json: %w", f.mnt, err)
	}
	if s.Feedback == nil {
		return feedback.Stats{}, fmt.Errorf("%s/.corgifs/stats.json has no feedback counters: the mount takes no feedback", f.mnt)
	}
	return *s.Feedback, nil
}

// storeFeedback gives the vectors to a feedback store in-process (--via
// direct), as the mount's feedback files do: the part's served records
// are those of its plan.
type storeFeedback struct {
	st  *feedback.Store
	pl  *shuffler.Planner
	buf []byte
}

func (f *storeFeedback) WritePart(epoch, part, parts, dim int, vecs []float32) error {
	plan, err := f.pl.Plan(epoch, part, parts)
	if err != nil {
		return err
	}
	u, err := f.st.Begin(epoch, part, parts, f.pl.RecordIDs(plan))
	if err != nil {
		return err
	}
	f.buf = feedbackFile(f.buf, dim, vecs)
	_, err = u.WriteAt(f.buf, 0)
	if cerr := u.Close(); err == nil {
		err = cerr
	}
	return err
}

func (f *storeFeedback) stats() (feedback.Stats, error) { return f.st.Stats(), nil }

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
