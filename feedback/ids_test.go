package feedback

import (
	"errors"
	"slices"
	"testing"
)

// One epoch uploaded under every part count K from 1 to 24: the store's
// memory (bytes_held) must stay within its reservation, and every upload's
// ids and vectors must still be read back exactly (those not kept in
// memory from the file saved beside the upload).
func TestFeedbackUnderManyKStaysWithinItsReservation(t *testing.T) {
	const records, dim = 1200, 1
	s, _ := newStore(t, Options{Records: records, Dim: dim})
	all := make([]int32, records)
	for i := range all {
		all[i] = int32(records - 1 - i)
	}
	part := func(i, k int) []int32 { return all[i*records/k : (i+1)*records/k] }
	for k := 1; k <= 24; k++ {
		for i := range k {
			ids := part(i, k)
			if err := upload(t, s, 0, i, k, ids, file(Magic, 1, dim, 0, vectors(len(ids), dim, float32(k))), 4096, false); err != nil {
				t.Fatalf("K=%d part %d: %v", k, i, err)
			}
			if st := s.Stats(); st.BytesHeld > st.BytesReserved {
				t.Fatalf("after K=%d part %d: %d bytes held, reservation %d", k, i, st.BytesHeld, st.BytesReserved)
			}
		}
	}
	for k := 1; k <= 24; k++ {
		for i := range k {
			ids, vecs, d, ok := s.Epoch(0, i, k)
			want := vectors(len(part(i, k)), dim, float32(k))
			if !ok || d != dim || !slices.Equal(ids, part(i, k)) || len(vecs) != len(want) || vecs[0] != want[0][0] {
				t.Fatalf("K=%d part %d read back: ok %v, dim %d, %d ids (want %d)", k, i, ok, d, len(ids), len(part(i, k)))
			}
		}
	}
}

// Uploads opened at once whose served ids would pass the memory set aside
// for them are refused at their start with ErrBusy, saying why; closing
// the open ones lets the next one start.
func TestTooManyUploadsOpenAtOnceAreRefusedAtTheirStart(t *testing.T) {
	const records = 100
	s, _ := newStore(t, Options{Records: records, Dim: 1})
	all := make([]int32, records)
	for i := range all {
		all[i] = int32(i)
	}
	var open []*Upload
	for k := 1; k <= 2; k++ {
		u, err := s.Begin(0, 0, 1+k, all)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, u)
	}
	u, err := s.Begin(0, 0, 1, all)
	if !errors.Is(err, ErrBusy) || u != nil {
		t.Fatalf("a third upload past the ids' budget: %v, want ErrBusy", err)
	}
	for _, u := range open {
		u.Close()
	}
	if _, err := s.Begin(0, 0, 1, all); err != nil {
		t.Fatalf("after the open uploads closed: %v", err)
	}
}
