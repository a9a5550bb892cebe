// Package client writes a trainer's feedback vectors: into a mount's
// feedback files, as any trainer does, or in-process into a feedback
// store, as the mount's files would.
package client

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/shuffler"
)

// Encode encodes the feedback file of dim-value vectors into buf: the
// header, then the vectors as little-endian float32s.
func Encode(buf []byte, dim int, vecs []float32) []byte {
	buf = append(buf[:0], feedback.Magic...)
	buf = binary.LittleEndian.AppendUint32(buf, feedback.Version)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(dim))
	buf = binary.LittleEndian.AppendUint32(buf, 0)
	for _, x := range vecs {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
	}
	return buf
}

// MountWriter writes the vectors into a mount's feedback files, as any
// trainer would.
type MountWriter struct {
	Mount string // the mount point
	buf   []byte
}

// Path returns the path of the feedback file of part i of k of
// epoch e in the mount mnt.
func Path(mnt string, e, i, k int) string {
	return api.FeedbackPath(mnt, e, i, k)
}

func (f *MountWriter) WritePart(epoch, part, parts, dim int, vecs []float32) error {
	f.buf = Encode(f.buf, dim, vecs)
	path := Path(f.Mount, epoch, part, parts)
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
func (f *MountWriter) reason(epoch, part, parts int) string {
	b, err := os.ReadFile(api.StatusPath(f.Mount))
	if err != nil {
		return fmt.Sprintf("status.json unreadable: %v", err)
	}
	var st api.Status
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
func (f *MountWriter) Stats() (feedback.Stats, error) {
	b, err := os.ReadFile(api.StatsPath(f.Mount))
	if err != nil {
		return feedback.Stats{}, err
	}
	var s api.Stats
	if err := json.Unmarshal(b, &s); err != nil {
		return feedback.Stats{}, fmt.Errorf("%s/.corgifs/stats.json: %w", f.Mount, err)
	}
	if s.Feedback == nil {
		return feedback.Stats{}, fmt.Errorf("%s/.corgifs/stats.json has no feedback counters: the mount takes no feedback", f.Mount)
	}
	return *s.Feedback, nil
}

// StoreWriter gives the vectors to a feedback store in-process (--via
// direct), as the mount's feedback files do: the part's served records
// are those of its plan.
type StoreWriter struct {
	Store   *feedback.Store
	Planner *shuffler.Planner
	buf     []byte
}

func (f *StoreWriter) WritePart(epoch, part, parts, dim int, vecs []float32) error {
	plan, err := f.Planner.Plan(epoch, part, parts)
	if err != nil {
		return err
	}
	u, err := f.Store.Begin(epoch, part, parts, f.Planner.RecordIDs(plan))
	if err != nil {
		return err
	}
	f.buf = Encode(f.buf, dim, vecs)
	_, err = u.WriteAt(f.buf, 0)
	if cerr := u.Close(); err == nil {
		err = cerr
	}
	return err
}

func (f *StoreWriter) Stats() (feedback.Stats, error) { return f.Store.Stats(), nil }
