package feedback

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"time"

	"github.com/corgifs/corgifs/option"
)

// PartStatus is what status.json says of one part of one epoch.
type PartStatus struct {
	Epoch int    `json:"epoch"`
	Part  int    `json:"part"`
	Parts int    `json:"parts"`
	State string `json:"state"` // receiving, accepted or refused
	// UID is the user who wrote the part's latest upload.
	UID     uint32 `json:"uid"`
	Records int    `json:"records"`
	Dim     int    `json:"dim,omitempty"`
	Bytes   int64  `json:"bytes,omitempty"`
	// Kept says that the vectors are still kept for the strategies.
	Kept   bool      `json:"kept"`
	Reason string    `json:"reason,omitempty"`
	Time   time.Time `json:"time"`
}

// Status is status.json: the parts of the newest epochs, and the latest
// refusals with their reasons.
type Status struct {
	Stats
	Parts    []PartStatus `json:"parts"`
	Refusals []Refusal    `json:"refusals"`
	// Coordinate says what this node waits for and what it decided, with
	// --coordinate (coordinate.go).
	Coordinate *CoordinateStatus `json:"coordinate,omitempty"`
}

// Status returns the store's status.
func (s *Store) Status() Status {
	st := Status{Stats: s.Stats(), Coordinate: s.coordinateStatus()}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Parts = make([]PartStatus, 0, len(s.parts))
	for k, p := range s.parts {
		st.Parts = append(st.Parts, PartStatus{Epoch: k.epoch, Part: k.part, Parts: k.parts, State: p.state, UID: p.uid,
			Records: p.records, Dim: p.dim, Bytes: p.bytes, Kept: p.file != "", Reason: flags(p.reason), Time: p.at.UTC()})
	}
	slices.SortFunc(st.Parts, func(a, b PartStatus) int {
		return cmp.Or(cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.Parts, b.Parts), cmp.Compare(a.Part, b.Part))
	})
	st.Refusals = slices.Clone(s.refusals)
	if st.Refusals == nil {
		st.Refusals = []Refusal{}
	}
	for i := range st.Refusals {
		st.Refusals[i].Reason = flags(st.Refusals[i].Reason)
	}
	if c := st.Coordinate; c != nil {
		for k, v := range c.RefusedShared {
			c.RefusedShared[k] = flags(v)
		}
	}
	return st
}

// flags writes the options a reason names as the flags of corgifs mount,
// {feedback-group} as --feedback-group: status.json is read by the
// trainers of a mount, which corgifs mount started with those flags.
func flags(reason string) string { return option.Render(reason, "--") }

// StatusJSON returns Status as indented JSON, for status.json.
func (s *Store) StatusJSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // reasons say "I < K"
	enc.SetIndent("", "  ")
	if err := enc.Encode(s.Status()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
