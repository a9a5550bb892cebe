package client

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/shuffler"
)

// The file a trainer writes is the header the store checks (magic,
// version, dimension, a reserved word) and then the vectors as
// little-endian float32s, reusing the buffer it is given.
func TestEncodeWritesTheHeaderThenTheVectorsLittleEndian(t *testing.T) {
	vecs := []float32{1, -2.5, 3, float32(math.Inf(1))}
	buf := Encode(make([]byte, 0, 64), 2, vecs)
	head := len(feedback.Magic) + 12
	if len(buf) != head+4*len(vecs) || string(buf[:len(feedback.Magic)]) != feedback.Magic {
		t.Fatalf("%d bytes %q, want the magic and %d bytes", len(buf), buf[:min(len(buf), 8)], head+4*len(vecs))
	}
	le := binary.LittleEndian
	if v, d, r := le.Uint32(buf[len(feedback.Magic):]), le.Uint32(buf[len(feedback.Magic)+4:]), le.Uint32(buf[len(feedback.Magic)+8:]); v != feedback.Version || d != 2 || r != 0 {
		t.Errorf("version %d dim %d reserved %d, want %d 2 0", v, d, r, feedback.Version)
	}
	for i, x := range vecs {
		if got := math.Float32frombits(le.Uint32(buf[head+4*i:])); got != x {
			t.Errorf("vector value %d: %g, want %g", i, got, x)
		}
	}
	if again := Encode(buf, 2, vecs[:2]); len(again) != head+8 || &again[0] != &buf[0] {
		t.Errorf("a second encoding is %d bytes in a new buffer (%v), want %d bytes in the same", len(again), &again[0] != &buf[0], head+8)
	}
}

// The in-process writer gives a part's vectors to a real store as the
// mount's feedback file does: the store accepts them against the records
// the part's plan serves, in served order.
func TestStoreWriterGivesThePartsVectorsForTheRecordsItsPlanServes(t *testing.T) {
	const blocks, per, dim = 12, 4, 3
	ix := &index.Index{Root: "/nonexistent", BlockSize: 1 << 10, Format: "tfrecord",
		Files: []index.File{{Path: "a", Size: blocks << 10, Records: blocks * per}}, Records: blocks * per, Bytes: blocks << 10}
	for i := range blocks {
		ix.Blocks = append(ix.Blocks, index.Block{Records: per, Offset: int64(i) << 10, Len: 1 << 10})
		for range per {
			ix.Frames = append(ix.Frames, 1<<10/per)
		}
	}
	pl, err := shuffler.NewPlanner(ix, shuffler.Params{Strategy: "corgipile", Seed: 1, Buffer: shuffler.BufferSize{Percent: 50}, MaxMemory: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	st, err := feedback.Open(feedback.Options{Dir: t.TempDir(), Root: "", Dim: dim, Records: ix.Records, EpochsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	plan, err := pl.Plan(0, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	served := pl.RecordIDs(plan)
	vecs := make([]float32, dim*len(served))
	for i := range vecs {
		vecs[i] = float32(i)
	}
	w := &StoreWriter{Store: st, Planner: pl}
	if err := w.WritePart(0, 1, 2, dim, vecs); err != nil {
		t.Fatal(err)
	}
	ids, got, d, ok := st.Epoch(0, 1, 2)
	if !ok || d != dim || !slices.Equal(ids, served) || !slices.Equal(got, vecs) {
		t.Errorf("store holds ok=%v dim %d ids %v vectors %v; want dim %d ids %v vectors %v", ok, d, ids, got, dim, served, vecs)
	}
	if s, err := w.Stats(); err != nil || s.Accepted != 1 || s.Refused != 0 {
		t.Errorf("stats %+v (%v), want 1 accepted", s, err)
	}
}
