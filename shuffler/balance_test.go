package shuffler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/corgifs/corgifs/index"
)

// filesIndex cuts files of the given frame lengths into blocks of at most
// blockSize bytes, each file on its own, as the indexer does: every file
// ends in a short block, and a frame longer than blockSize is a block by
// itself.
func filesIndex(files [][]uint32, blockSize int64) *index.Index {
	ix := &index.Index{Root: "/files", BlockSize: blockSize}
	for f, frames := range files {
		ix.Files = append(ix.Files, index.File{Path: fmt.Sprintf("f%04d.tfrecord", f), Records: int64(len(frames))})
		var off int64
		blk := index.Block{File: int32(f)}
		flush := func() {
			if blk.Records > 0 {
				ix.Blocks = append(ix.Blocks, blk)
			}
			blk = index.Block{File: int32(f), Offset: off}
		}
		for _, n := range frames {
			if blk.Records > 0 && blk.Len+int64(n) > blockSize {
				flush()
			}
			blk.Records++
			blk.Len += int64(n)
			off += int64(n)
			ix.Frames = append(ix.Frames, n)
			ix.Records++
			ix.Bytes += int64(n)
		}
		flush()
		ix.Files[f].Size = off
	}
	return ix
}

// balanceShapes are datasets whose blocks differ in length.
func balanceShapes(rng *rand.Rand) map[string]*index.Index {
	frames := func(n int, lo, hi uint32) []uint32 {
		f := make([]uint32, n)
		for i := range f {
			f[i] = lo + uint32(rng.IntN(int(hi-lo+1)))
		}
		return f
	}
	shapes := map[string]*index.Index{}
	// The shape: 16 files, each ending in a short block.
	var files [][]uint32
	for range 16 {
		files = append(files, frames(300+rng.IntN(900), 90, 110))
	}
	shapes["16 files with tails"] = filesIndex(files, 10_000)
	// Many small files: most blocks are tails.
	files = nil
	for range 400 {
		files = append(files, frames(1+rng.IntN(40), 50, 150))
	}
	shapes["400 small files"] = filesIndex(files, 2_000)
	// One huge record among small ones.
	f := frames(5000, 100, 100)
	f[rng.IntN(len(f))] = 300_000
	shapes["one huge record"] = filesIndex([][]uint32{f}, 5_000)
	// Records of very different sizes.
	files = nil
	for range 5 {
		files = append(files, frames(800, 10, 4000))
	}
	shapes["mixed record sizes"] = filesIndex(files, 20_000)
	return shapes
}

// TestPartsOfAnEpochAreBalancedByBytes checks the bound stated for the
// README: every part of an epoch holds total/K bytes give or take one
// largest unit (block for block strategies, record for record strategies),
// whatever the strategy, K, seed and dataset shape; and together the parts
// still hold every record once. Parts used to get equal block counts, so
// with short file tails epoch-0 parts of a 16-file set differed by 1.85
// full blocks.
func TestPartsOfAnEpochAreBalancedByBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for name, ix := range balanceShapes(rng) {
		var maxBlock, maxFrame int64
		for _, b := range ix.Blocks {
			maxBlock = max(maxBlock, b.Len)
		}
		for _, f := range ix.Frames {
			maxFrame = max(maxFrame, int64(f))
		}
		for _, strategy := range Strategies() {
			if !ExactlyOnce(strategy) {
				continue // mrs: see TestMRSServesEachScannedRecordOnceInThatEpochOrTheNext
			}
			unit := maxBlock
			if ReadsRecords(strategy) {
				unit = maxFrame
			}
			for _, seed := range []uint64{1, 2, 3} {
				pl, err := NewPlanner(ix, Params{Strategy: strategy, Seed: seed, Buffer: BufferSize{Percent: 10}, MaxMemory: 1 << 30})
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range []int{2, 3, 5, 7, 16, 64, 257} {
					epoch := int(seed) // also epochs other than 0
					var total int64
					var records []int32
					for i := range k {
						p, err := pl.Plan(epoch, i, k)
						if err != nil {
							t.Fatal(err)
						}
						total += p.Size
						all, _ := planRecords(ix, p)
						records = append(records, all...)
						// |S − T/K| ≤ unit, in integers.
						if d := int64(k)*p.Size - ix.Bytes; d > int64(k)*unit || -d > int64(k)*unit {
							t.Fatalf("%s, %s, seed %d: part %d of %d holds %d bytes, want %d ± %d (total/K ± the largest unit)",
								name, strategy, seed, i, k, p.Size, ix.Bytes/int64(k), unit)
						}
					}
					slices.Sort(records)
					if total != ix.Bytes || len(records) != int(ix.Records) || len(slices.Compact(records)) != int(ix.Records) {
						t.Fatalf("%s, %s, K=%d: parts hold %d bytes and %d records, want %d and every one of %d once",
							name, strategy, k, total, len(records), ix.Bytes, ix.Records)
					}
				}
			}
		}
	}
}

// TestBalancedPartsAgreeWithTheirLargestCount checks the record count of
// the largest part that --equal-parts pads to, found in one walk over the
// sequence, against the parts themselves.
func TestBalancedPartsAgreeWithTheirLargestCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for name, ix := range balanceShapes(rng) {
		for _, strategy := range Strategies() {
			pl, err := NewPlanner(ix, Params{Strategy: strategy, Seed: 11, Buffer: BufferSize{Percent: 10}, MaxMemory: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []int{2, 9, 64, 1000} {
				var most int64
				for i := range k {
					p, _ := pl.Plan(2, i, k)
					most = max(most, p.Records)
				}
				seq := pl.sequence(2, k)
				got := pl.most(seq, k)
				pl.cache.mu.Lock()
				pl.cache.releaseLocked(seq)
				pl.cache.mu.Unlock()
				if got != most {
					t.Fatalf("%s, %s, K=%d: largest part counted %d records, the parts' largest holds %d", name, strategy, k, got, most)
				}
			}
		}
	}
}

// BenchmarkBalancedPartBounds finds the units of one part of 100,000 in an
// epoch of 1M blocks of varying length: after the epoch's prefix sums
// (once), two binary searches and at most 128 units.
func BenchmarkBalancedPartBounds(b *testing.B) {
	frames := make([]uint32, 1_000_000)
	for i := range frames {
		frames[i] = uint32(50 + i%97)
	}
	ix := sizedIndex(frames, 1) // a block per record
	pl, err := NewPlanner(ix, Params{Strategy: "corgipile", Seed: 1, Buffer: BufferSize{Percent: 5}, MaxMemory: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	seq := pl.sequence(0, 0)
	pl.prefixes(seq)
	b.ResetTimer()
	for i := range b.N {
		pl.bounds(seq, i%100_000, 100_000)
	}
}
