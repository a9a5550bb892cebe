package feedback

import "fmt"

// The served record ids of the uploads are the one part of the store's
// memory that grows with the trainer's choices rather than with the
// dataset: an epoch uploaded under K part counts has K copies of the
// dataset's ids. Bound sets 8 bytes a record aside for them (two epochs'
// worth), and the store keeps them within it for any number of K: every
// accepted upload's ids are saved beside its vectors, and kept in memory
// only while they fit; the others are read back when asked for (Epoch).
// An upload that would pass the budget with what is being received
// already is refused at its start.

// idsBudget is how many served ids the store holds in memory at most.
func (s *Store) idsBudget() int64 { return 2 * s.records }

// idsHeldLocked returns how many served ids the store holds in memory:
// those of uploads being received and of accepted ones kept in memory.
func (s *Store) idsHeldLocked() int64 {
	var n int64
	for _, p := range s.parts {
		n += int64(len(p.ids))
	}
	return n
}

// servedName is the order name the served ids of the accepted upload
// file are saved as.
func servedName(file string) string { return "served-" + file }

// makeRoomLocked drops from memory the ids of accepted uploads (saved on
// disk) until want more ids fit in the budget, and reports whether they
// do.
func (s *Store) makeRoomLocked(want int64) bool {
	held := s.idsHeldLocked()
	for _, p := range s.parts {
		if held+want <= s.idsBudget() {
			break
		}
		if p.state == stateAccepted && p.file != "" && p.ids != nil {
			held -= int64(len(p.ids))
			p.ids = nil
		}
	}
	return held+want <= s.idsBudget()
}

// tooManyOpen is the reason of an upload refused because the ids of the
// uploads being received at once would pass the budget.
func (s *Store) tooManyOpen(n int) string {
	return fmt.Sprintf("the uploads open at once already hold the served record ids of %d records, and this part's %d would pass the %d (two epochs' worth, 8 bytes a record of {max-memory}) set aside for them: close the open feedback files before opening more",
		s.idsHeldLocked(), n, s.idsBudget())
}

// servedIDs returns the served ids of the accepted part p, from memory or
// as saved by accept.
func (s *Store) servedIDs(ids []int32, file string) ([]int32, bool) {
	if ids != nil {
		return ids, true
	}
	return s.LoadOrder(servedName(file))
}
