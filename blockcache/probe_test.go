package blockcache

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/corgifs/corgifs/formats"
)

// probeCases are the format cases with larger files of TFRecord (records
// up to 3000 bytes, two of 20000 and 40000), WebDataset and npy, so that
// block sizes from a few bytes to a few KiB cut them many times.
func probeCases(t *testing.T) []formatCase {
	r := rand.New(rand.NewPCG(11, 12))
	big := map[string][]byte{}
	for i, n := range []int{300, 0, 120} {
		ps := randomPayloads(r, n, 3000)
		if n > 100 {
			ps[50] = make([]byte, 20000)
			ps[51] = make([]byte, 40000)
		}
		data, _ := frames(t, ps)
		big[fmt.Sprintf("f%d.tfrecord", i)] = data
	}
	return append(formatCases(t),
		formatCase{formats.TFRecord{}, big},
		formatCase{formats.WDS{}, map[string][]byte{"a.tar": wdsBytes(t, "a", 300), "b.tar": wdsBytes(t, "b", 1)}},
		formatCase{formats.NPY{}, map[string][]byte{"a.npy": npyBytes(2000, 7, 0), "b.npy": npyBytes(1, 7, 3)}},
	)
}

// A probed index cuts exactly the blocks a full index cuts, for every
// format and block size: the same files, record ranges and block ranges.
// CSV, which has no probe, falls back to a full scan; fixed and npy know
// their counts by arithmetic, the others learn them when loaded.
func TestProbedIndexCutsTheSameBlocksAsAFullIndex(t *testing.T) {
	for _, c := range probeCases(t) {
		root := c.write(t)
		for _, bs := range []int64{1, 100, 512, 1000, 4096, 64 << 10} {
			if bs < 512 && len(c.files) > 0 && sizeOf(c) > 16<<10 {
				continue // a probe at every few bytes of a large file: slow, and no more telling
			}
			t.Run(fmt.Sprintf("%s/%d-files/BlockSize=%d", c.format.Name(), len(c.files), bs), func(t *testing.T) {
				full := build(t, root, Options{BlockSize: bs, Format: c.format})
				probed := build(t, root, Options{BlockSize: bs, Format: c.format, Probe: true})
				_, csv := c.format.(formats.CSV)
				if probed.Probed == csv {
					t.Fatalf("Probed %v for format %s", probed.Probed, c.format.Name())
				}
				compareIndexes(t, full, probed)
			})
		}
	}
}

// compareIndexes fails unless probed cuts the files as full does.
func compareIndexes(t *testing.T, full, probed *Index) {
	t.Helper()
	if len(full.Files) != len(probed.Files) {
		t.Fatalf("%d files, full index %d", len(probed.Files), len(full.Files))
	}
	for i, f := range full.Files {
		p := probed.Files[i]
		if p.Path != f.Path || p.From != f.From || p.To != f.To || p.Head.Start != f.Head.Start || p.Head.End != f.Head.End || string(p.Head.Key) != string(f.Head.Key) || string(p.Head.Tail) != string(f.Head.Tail) {
			t.Fatalf("file %d: probed %s records [%d, %d) head %+v; full %s [%d, %d) head %+v", i, p.Path, p.From, p.To, p.Head, f.Path, f.From, f.To, f.Head)
		}
	}
	if len(full.Blocks) != len(probed.Blocks) {
		t.Fatalf("%d blocks, full index %d: %v vs %v", len(probed.Blocks), len(full.Blocks), probed.Blocks, full.Blocks)
	}
	for i, b := range full.Blocks {
		p := probed.Blocks[i]
		if p.File != b.File || p.Offset != b.Offset || p.Len != b.Len || p.Records != 0 && p.Records != b.Records {
			t.Fatalf("block %d: probed %+v, full %+v", i, p, b)
		}
		if probed.Probed && p.CRC != 0 {
			t.Fatalf("block %d of a probed index has a CRC", i)
		}
	}
	if full.Bytes != probed.Bytes {
		t.Fatalf("%d bytes, full index %d", probed.Bytes, full.Bytes)
	}
	if !probed.CountsUnknown && probed.Records != full.Records {
		t.Fatalf("%d records known, full index %d", probed.Records, full.Records)
	}
	if probed.Probed && (probed.Frames != nil || probed.RecordCRCs != nil) {
		t.Fatal("a probed index has a record table")
	}
}

func sizeOf(c formatCase) int {
	n := 0
	for _, d := range c.files {
		n += len(d)
	}
	return n
}
