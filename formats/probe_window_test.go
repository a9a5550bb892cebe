package formats

import (
	"bytes"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

// sizedReads records the size of every read.
type sizedReads struct {
	r     io.ReaderAt
	sizes []int64
}

func (s *sizedReads) ReadAt(p []byte, off int64) (int, error) {
	s.sizes = append(s.sizes, int64(len(p)))
	return s.r.ReadAt(p, off)
}

// A probe bounded by a block's window finds the boundary the unbounded
// probe finds, reads no more than the block (nor 256 KiB) at a time, and
// starts with a read of a small share of it: among records much smaller
// than that share, one read.
func TestProbeWithinFindsTheSameBoundaryInReadsNoLargerThanTheBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 1))
	for _, maxRec := range []int{40, 3000, 300 << 10} {
		var recs [][]byte
		for total := 0; total < 4<<20; {
			b := make([]byte, rng.IntN(maxRec)+1)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			recs = append(recs, b)
			total += len(b) + FrameExtra
		}
		data, _ := frames(recs...)
		h := Head{Start: 0, End: int64(len(data))}
		for _, bs := range []int64{333, 4 << 10, 64 << 10, 1 << 20, 8 << 20} {
			w := WindowFor(bs)
			if w.Max > bs && bs >= HeaderLen || w.Max > 256<<10 || w.First > w.Max {
				t.Fatalf("block %d: window %+v", bs, w)
			}
			for k := 1; k < 40; k++ {
				off := int64(k) * (int64(len(data)) / 40)
				want, err := TFRecord{}.Probe(bytes.NewReader(data), h, off)
				if err != nil {
					t.Fatal(err)
				}
				sr := &sizedReads{r: bytes.NewReader(data)}
				got, err := TFRecord{}.ProbeWithin(sr, h, off, w)
				if err != nil || got != want {
					t.Fatalf("records up to %d, block %d: ProbeWithin(%d) = %d, %v; Probe says %d", maxRec, bs, off, got, err, want)
				}
				if sr.sizes[0] > w.First || maxRec*4 < int(w.First) && len(sr.sizes) != 1 {
					t.Fatalf("records up to %d, block %d, window %+v: reads %v", maxRec, bs, w, sr.sizes)
				}
				for _, n := range sr.sizes {
					if n > w.Max {
						t.Fatalf("records up to %d, block %d, window %+v: a read of %d bytes (reads %v)", maxRec, bs, w, n, sr.sizes)
					}
				}
			}
		}
	}
}

// Probes that share what they learned (ProbeWindow.Typical) among
// records longer than their first window: the first probe takes several
// reads and notes the record's length; every later one finds the same
// boundary as the unbounded probe in one read, of at most Max bytes, that
// holds two records and a header (issue 25: four GETs a probe among
// 100 KiB records at 1 MiB blocks, one now).
func TestProbesThatShareTheTypicalRecordLengthFindEachBoundaryInOneRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 3))
	var recs [][]byte
	for total := 0; total < 8<<20; {
		b := make([]byte, 100<<10+rng.IntN(3))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		recs = append(recs, b)
		total += len(b) + FrameExtra
	}
	data, _ := frames(recs...)
	h := Head{Start: 0, End: int64(len(data))}
	w := WindowFor(1 << 20)
	w.Typical = new(atomic.Int64)
	for k := int64(1); k < 8; k++ {
		off := k << 20
		want, err := TFRecord{}.Probe(bytes.NewReader(data), h, off)
		if err != nil {
			t.Fatal(err)
		}
		sr := &sizedReads{r: bytes.NewReader(data)}
		got, err := TFRecord{}.ProbeWithin(sr, h, off, w)
		if err != nil || got != want {
			t.Fatalf("ProbeWithin(%d) = %d, %v; Probe says %d", off, got, err, want)
		}
		if k == 1 && len(sr.sizes) < 2 {
			t.Fatalf("the first probe, knowing no record, read %v: want several reads from a %d-byte window", sr.sizes, w.First)
		}
		if k > 1 && (len(sr.sizes) != 1 || sr.sizes[0] > w.Max || sr.sizes[0] < 2*(100<<10+FrameExtra)+HeaderLen) {
			t.Fatalf("probe %d, after one saw a %d-byte record: reads %v; want one read of two records and a header, at most %d bytes",
				k, w.Typical.Load(), sr.sizes, w.Max)
		}
	}
}

// A rare long record among short ones, found by one probe, makes only the
// next few probes of the index read more: the shared length is an
// average, so the probes after them read their first window again, in one
// read, and find the boundaries the unbounded probe finds.
func TestARareLongRecordEnlargesOnlyTheNextFewProbesWindows(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 4))
	record := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	const bs = 1 << 20
	var recs [][]byte
	total := 0
	for total < 2*bs { // the long record starts at the first boundary after the edge at 2 MiB
		recs = append(recs, record(1000))
		total += 1000 + FrameExtra
	}
	recs = append(recs, record(300<<10))
	for total < 42*bs {
		recs = append(recs, record(1000))
		total += 1000 + FrameExtra
	}
	data, _ := frames(recs...)
	h := Head{Start: 0, End: int64(len(data))}
	w := WindowFor(bs)
	w.Typical = new(atomic.Int64)
	var reads [][]int64
	for off := int64(bs); off < h.End; off += bs {
		want, err := TFRecord{}.Probe(bytes.NewReader(data), h, off)
		if err != nil {
			t.Fatal(err)
		}
		sr := &sizedReads{r: bytes.NewReader(data)}
		got, err := TFRecord{}.ProbeWithin(sr, h, off, w)
		if err != nil || got != want {
			t.Fatalf("ProbeWithin(%d) = %d, %v; Probe says %d", off, got, err, want)
		}
		reads = append(reads, sr.sizes)
	}
	// reads[1] is the probe at 2 MiB, which found the long record.
	if reads[2][0] <= w.First {
		t.Fatalf("the probe after the one that found the long record read %v: want a first window larger than %d", reads[2], w.First)
	}
	for i, r := range reads[len(reads)-10:] {
		if len(r) != 1 || r[0] != w.First {
			t.Fatalf("probe %d of %d, long after the one long record: reads %v; want one of the first window's %d bytes (typical length %d)",
				len(reads)-10+i, len(reads), r, w.First, w.Typical.Load())
		}
	}
}

// The line probes bounded by a block's window find the line start the
// unbounded probe finds, in reads no larger than the block.
func TestLineProbeWithinFindsTheSameLineStartInReadsNoLargerThanTheBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 2))
	var data []byte
	for len(data) < 1<<20 {
		data = append(data, bytes.Repeat([]byte{'a' + byte(rng.IntN(26))}, rng.IntN(20000))...)
		data = append(data, '\n')
	}
	h := Head{Start: 0, End: int64(len(data))}
	for _, bs := range []int64{333, 4 << 10, 1 << 20} {
		w := WindowFor(bs)
		for off := int64(1); off < int64(len(data)); off += 7919 {
			want, err := Lines{}.Probe(bytes.NewReader(data), h, off)
			if err != nil {
				t.Fatal(err)
			}
			sr := &sizedReads{r: bytes.NewReader(data)}
			got, err := Lines{}.ProbeWithin(sr, h, off, w)
			if err != nil || got != want {
				t.Fatalf("block %d: ProbeWithin(%d) = %d, %v; Probe says %d", bs, off, got, err, want)
			}
			for _, n := range sr.sizes {
				if n > w.Max {
					t.Fatalf("block %d, window %+v: a read of %d bytes", bs, w, n)
				}
			}
		}
	}
}

// Every format's bounded probe finds, from any offset, the boundary its
// unbounded probe finds, in reads no larger than the window allows.
func TestEveryWindowProberFindsTheSameBoundaryWithinItsWindow(t *testing.T) {
	for _, c := range seamCases(t) {
		p, ok := c.f.(WindowProber)
		if !ok {
			continue
		}
		for fi, data := range c.files {
			s, err := scanFile(c.f, data)
			if err != nil {
				t.Fatal(err)
			}
			for _, bs := range []int64{16, 600, 1 << 20} {
				w := WindowFor(bs)
				limit := w.Max
				if _, wds := c.f.(WDS); wds {
					limit = max(limit, 512) // a tar header
				}
				for off := int64(0); off <= int64(len(data)); off++ {
					want, err := c.f.(Prober).Probe(bytes.NewReader(data), s.head, off)
					if err != nil {
						t.Fatal(err)
					}
					sr := &sizedReads{r: bytes.NewReader(data)}
					got, err := p.ProbeWithin(sr, s.head, off, w)
					if err != nil || got != want {
						t.Fatalf("%s file %d, block %d: ProbeWithin(%d) = %d, %v; Probe says %d", c.f.Name(), fi, bs, off, got, err, want)
					}
					for _, n := range sr.sizes {
						if n > limit {
							t.Fatalf("%s file %d, block %d: a read of %d bytes, window %+v", c.f.Name(), fi, bs, n, w)
						}
					}
				}
			}
		}
	}
}
