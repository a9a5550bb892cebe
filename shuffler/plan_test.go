package shuffler

import (
	"fmt"
	"slices"
	"testing"

	"github.com/corgifs/corgifs/blockcache"
)

// fixedIndex is a small index of 3 files and 20 blocks of varying sizes.
func fixedIndex() *blockcache.Index {
	ix := &blockcache.Index{Root: "/golden", BlockSize: 1000}
	for f := range 3 {
		ix.Files = append(ix.Files, blockcache.File{Path: fmt.Sprintf("f%d.tfrecord", f)})
	}
	for b := range 20 {
		n := int32(3 + b%4)
		blk := blockcache.Block{File: int32(b % 3), Records: n, Offset: int64(b) * 1000, Len: int64(n) * 100}
		ix.Blocks = append(ix.Blocks, blk)
		ix.Records += int64(n)
		ix.Bytes += blk.Len
	}
	return ix
}

func newPlanner(t *testing.T, strategy string, buf BufferSize) *Planner {
	t.Helper()
	pl, err := NewPlanner(fixedIndex(), Params{Strategy: strategy, Seed: 7, Buffer: buf, MaxMemory: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func TestPlanPartsHoldEveryBlockOnce(t *testing.T) {
	for _, strategy := range Strategies() {
		for _, k := range []int{1, 3, 8, 25} {
			pl := newPlanner(t, strategy, BufferSize{Percent: 30})
			for e := range 3 {
				var all []int32
				counts := map[int]bool{}
				for i := range k {
					p, err := pl.Plan(e, i, k)
					if err != nil {
						t.Fatal(err)
					}
					n := 0
					var size int64
					for g, b := range p.Buffers {
						if b.Start != size {
							t.Fatalf("%s e%d part %d/%d buffer %d starts at %d, want %d", strategy, e, i, k, g, b.Start, size)
						}
						size += b.Size
						n += len(b.Blocks)
						all = append(all, b.Blocks...)
					}
					if size != p.Size {
						t.Fatalf("buffer sizes add up to %d, plan size %d", size, p.Size)
					}
					counts[n] = true
				}
				slices.Sort(all)
				if len(all) != 20 || all[0] != 0 || all[19] != 19 || len(slices.Compact(all)) != 20 {
					t.Fatalf("%s e%d K=%d: blocks %v, want each of 0..19 once", strategy, e, k, all)
				}
				lo, hi := 1<<30, 0
				for n := range counts {
					lo, hi = min(lo, n), max(hi, n)
				}
				if hi-lo > 1 {
					t.Fatalf("%s K=%d: block counts per part range %d..%d, want a spread of at most one", strategy, k, lo, hi)
				}
			}
		}
	}
}

func TestPlanBuffersRespectTargetAndMemory(t *testing.T) {
	pl, err := NewPlanner(fixedIndex(), Params{Strategy: "corgipile", Seed: 1, Buffer: BufferSize{Bytes: 1500}, MaxMemory: 2000})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := pl.Plan(0, 0, 1)
	if !p.Capped || p.Target != 1000 {
		t.Fatalf("target %d capped %v, want 1000 capped by half of max memory", p.Target, p.Capped)
	}
	for _, b := range p.Buffers {
		if len(b.Blocks) > 1 && b.Size > p.Target {
			t.Fatalf("buffer of %d blocks has %d bytes, over the target %d", len(b.Blocks), b.Size, p.Target)
		}
	}
	if _, err := NewPlanner(fixedIndex(), Params{Strategy: "corgipile", Seed: 1, Buffer: BufferSize{Percent: 5}, MaxMemory: 100}); err == nil {
		t.Fatal("max memory below the largest block was accepted")
	}
	if _, err := NewPlanner(fixedIndex(), Params{Strategy: "nope", Buffer: BufferSize{Percent: 5}, MaxMemory: 1 << 20}); err == nil {
		t.Fatal("unknown strategy accepted")
	}
}

// TestPlanGolden pins the block orders and record seeds of a fixed index so
// that an accidental change of order is caught.
func TestPlanGolden(t *testing.T) {
	cases := []struct {
		strategy string
		epoch    int
		part, k  int
		want     string
	}{
		{"corgipile", 0, 0, 1, `[14 10] [2 5 8 3 6 7 9 0 4 1][9 15] [0 5 6 7 2 3 9 4 1 8][5 13] [6 0 7 4 5 3 2 1][6 12 16] [8 1 2 6 7 10 0 5 9 3 4][4 11] [2 8 4 7 3 1 5 6 0][18 7] [10 3 0 5 6 2 7 4 9 1 8][2 8] [0 2 4 1 6 5 7 3][19 0] [2 4 7 3 6 0 1 5 8][1 3] [5 7 9 6 3 1 2 0 8 4][17] [3 2 1 0]`},
		{"corgipile", 1, 0, 1, `[5 4 17] [7 6 1 9 2 5 10 3 0 8 4][0 9 12] [9 3 5 7 1 2 0 4 8 6][16 11] [5 4 2 7 0 6 1 8 3][10 13] [4 3 8 1 7 5 0 2 6][6 15] [9 5 3 0 4 7 8 6 1 10 2][8 18] [6 7 5 3 4 2 0 1][14 7] [1 0 10 9 4 8 2 5 3 7 6][2 3] [9 0 1 6 2 5 10 7 3 4 8][1 19] [4 9 2 6 5 0 8 3 1 7]`},
		{"corgipile", 0, 1, 3, `[6 12 16] [0 7 3 8 9 10 6 1 2 4 5][4 11] [3 5 1 0 8 4 6 7 2][18 7] [9 5 3 6 0 2 7 4 10 8 1]`},
		{"none", 0, 2, 3, `[13 14] [0 1 2 3 4 5 6 7 8][15 16] [0 1 2 3 4 5 6 7 8][17 18] [0 1 2 3 4 5 6 7 8][19] [0 1 2 3 4 5]`},
	}
	for _, c := range cases {
		pl := newPlanner(t, c.strategy, BufferSize{Bytes: 1200})
		p, err := pl.Plan(c.epoch, c.part, c.k)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, b := range p.Buffers {
			perm := make([]uint32, b.Records)
			if b.Shuffle {
				permute(perm, b.Seed)
			} else {
				for i := range perm {
					perm[i] = uint32(i)
				}
			}
			got += fmt.Sprint(b.Blocks, perm)
		}
		if got != c.want {
			t.Errorf("%s epoch %d part %d/%d:\n got %s\nwant %s", c.strategy, c.epoch, c.part, c.k, got, c.want)
		}
	}
}

func TestPermuteIsUniformEnough(t *testing.T) {
	// Each of the 6 orders of 3 items should come up about 1/6 of the time.
	counts := map[[3]uint32]int{}
	p := make([]uint32, 3)
	const n = 60000
	for s := range uint64(n) {
		permute(p, Derive(99, s))
		counts[[3]uint32(p)]++
	}
	if len(counts) != 6 {
		t.Fatalf("saw %d distinct orders of 3, want 6", len(counts))
	}
	for k, c := range counts {
		if c < n/6*9/10 || c > n/6*11/10 {
			t.Fatalf("order %v came %d times of %d, want about %d", k, c, n, n/6)
		}
	}
}

func TestDeriveSeparatesInputs(t *testing.T) {
	seen := map[uint64]bool{}
	for _, tags := range [][]uint64{{}, {0}, {1}, {0, 0}, {0, 1}, {1, 0}, {2, 0, 0, 1, 0}, {2, 0, 0, 1, 1}} {
		h := Derive(7, tags...)
		if seen[h] {
			t.Fatalf("Derive(7, %v) collides", tags)
		}
		seen[h] = true
	}
}

func TestParseBufferSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want BufferSize
		ok   bool
	}{
		{"5%", BufferSize{Percent: 5}, true},
		{"0.5%", BufferSize{Percent: 0.5}, true},
		{"64MiB", BufferSize{Bytes: 64 << 20}, true},
		{"1000", BufferSize{Bytes: 1000}, true},
		{"0%", BufferSize{}, false},
		{"101%", BufferSize{}, false},
		{"abc", BufferSize{}, false},
		{"0", BufferSize{}, false},
	} {
		got, err := ParseBufferSize(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseBufferSize(%q) = %v, %v; want %v ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}
