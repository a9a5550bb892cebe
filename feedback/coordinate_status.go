package feedback

// The coordination's part of status.json: what a node waits for and the
// decisions it followed.

import (
	"slices"
	"time"
)

// WaitStatus is what a node waits for, in status.json: the feedback of
// some parts (the order server) or the decision (the other nodes).
type WaitStatus struct {
	Epoch        int       `json:"epoch"` // the epoch to decide
	Parts        int       `json:"parts"`
	For          string    `json:"for"`                     // feedback or decision
	MissingParts []int     `json:"missing_parts,omitempty"` // of epoch-1's feedback
	Since        time.Time `json:"since"`
	Deadline     time.Time `json:"deadline"`
}

// DecisionStatus is a decision this node followed, in status.json.
type DecisionStatus struct {
	Epoch     int    `json:"epoch"`
	Parts     int    `json:"parts"`
	Balanced  bool   `json:"balanced"`
	Reason    string `json:"reason"`
	Digest    string `json:"digest"`     // the decision's
	DecidedBy int    `json:"decided_by"` // rank
	Served    string `json:"served"`     // the digest of what this node serves
}

// CoordinateStatus is the "coordinate" object of status.json.
type CoordinateStatus struct {
	Shared         string            `json:"shared"`
	Rank           int               `json:"rank"`
	Role           string            `json:"role"` // order server or follower
	Waiting        []WaitStatus      `json:"waiting"`
	Decisions      []DecisionStatus  `json:"decisions"`
	RefusedShared  map[string]string `json:"refused_shared_feedback,omitempty"`
	BytesWritten   int64             `json:"bytes_written"` // to the shared place
	BytesRead      int64             `json:"bytes_read"`
	PartsPublished int               `json:"parts_published"`
	PartsGathered  int64             `json:"parts_gathered"` // by the order server
}

// coordinateStatus is the store's "coordinate" status, nil without one.
func (s *Store) coordinateStatus() *CoordinateStatus {
	c := s.coordinator()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &CoordinateStatus{Shared: c.sh.String(), Rank: c.rank, Role: "follower", Waiting: []WaitStatus{}, Decisions: slices.Clone(c.recent),
		BytesWritten: c.written, BytesRead: c.read, PartsPublished: c.ownParts, PartsGathered: c.ingested}
	if c.rank == 0 {
		st.Role = "order server"
	}
	if st.Decisions == nil {
		st.Decisions = []DecisionStatus{}
	}
	for _, w := range c.waits {
		st.Waiting = append(st.Waiting, w)
	}
	slices.SortFunc(st.Waiting, func(a, b WaitStatus) int { return a.Epoch - b.Epoch })
	for k, why := range c.badRemote {
		if st.RefusedShared == nil {
			st.RefusedShared = make(map[string]string)
		}
		st.RefusedShared[sharedFeedbackName(k.epoch, k.part, k.parts)] = why
	}
	return st
}
