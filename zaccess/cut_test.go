package zaccess

import (
	"bytes"
	"compress/gzip"
	"math/rand/v2"
	"testing"
)

// A cut indexer records, for each cut its caller reports, the last place
// at or before it where decoding can restart, with a window that decodes
// the stream from there; a cut far past the one before (a record longer
// than many DEFLATE blocks) still gets a point at or before it, from the
// candidates it held.
func TestCutIndexerChoosesTheLastRestartBeforeEachCut(t *testing.T) {
	data := make([]byte, 7<<20)
	rand.NewChaCha8([32]byte{1}).Read(data)
	var comp bytes.Buffer
	w, _ := gzip.NewWriterLevel(&comp, gzip.NoCompression) // stored blocks of 64 KiB: many restarts
	w.Write(data)
	w.Close()
	src, size := bytes.NewReader(comp.Bytes()), int64(comp.Len())
	every, err := Build(src, size, Gzip, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	const span = 1 << 20
	// The 4 MiB between the second and third cut hold about 64 restarts
	// past the floor: more than the indexer keeps (it keeps the last).
	// The last is not at a multiple (as after damaged bytes): it gets a
	// point at or before it, not necessarily the last restart.
	cuts := []int64{100, span + 5, 5*span + 123, 6*span + 7000, 6*span + 300_000}
	x := NewCutIndexer(src, size, Gzip, span, nil)
	buf := make([]byte, 64<<10)
	next := 0
	for off := int64(0); off < int64(len(data)); off += int64(len(buf)) {
		n, _ := x.ReadAt(buf, off)
		if !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
			t.Fatalf("indexer reads other bytes at %d", off)
		}
		for next < len(cuts) && cuts[next] < off+int64(n) {
			x.Cut(cuts[next])
			next++
		}
	}
	ix, err := x.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.Points) > len(cuts)+1 {
		t.Fatalf("%d points for %d cuts", len(ix.Points), len(cuts))
	}
	var dc Decoder
	for i, c := range cuts {
		p, best := ix.PointBefore(c), every.PointBefore(c)
		if i < 4 && p != best {
			t.Fatalf("cut %d at %d decodes from %d, the last restart before it is at %d", i, c, p, best)
		}
		if i > 0 && i < 4 && p <= cuts[i-1] || p > c {
			t.Fatalf("cut %d at %d decodes from %d: after it, or before the cut before it", i, c, p)
		}
		got := make([]byte, 4000)
		if err := dc.ReadAt(ix, src, size, got, min(c, int64(len(data))-4000), nil); err != nil {
			t.Fatalf("cut %d: %v", i, err)
		}
		if want := data[min(c, int64(len(data))-4000):][:4000]; !bytes.Equal(got, want) {
			t.Fatalf("cut %d: decoded bytes differ", i)
		}
		t.Logf("cut %d at %d: from %d (last restart %d)", i, c, p, best)
	}
}
