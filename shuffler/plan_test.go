package shuffler

import (
	"fmt"
	"slices"
	"testing"

	"github.com/corgifs/corgifs/index"
)

// fixedIndex is a small index of 3 files and 20 blocks of varying sizes.
func fixedIndex() *index.Index {
	ix := &index.Index{Root: "/golden", BlockSize: 1000}
	for f := range 3 {
		ix.Files = append(ix.Files, index.File{Path: fmt.Sprintf("f%d.tfrecord", f)})
	}
	for b := range 20 {
		n := int32(3 + b%4)
		blk := index.Block{File: int32(b % 3), Records: n, Offset: int64(b) * 1000, Len: int64(n) * 100}
		ix.Blocks = append(ix.Blocks, blk)
		for range n {
			ix.Frames = append(ix.Frames, 100)
		}
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

func TestPlanPartsHoldEveryRecordOnce(t *testing.T) {
	for _, strategy := range Strategies() {
		if !ExactlyOnce(strategy) {
			continue // mrs: see TestMRSServesEachScannedRecordOnceInThatEpochOrTheNext
		}
		for _, k := range []int{1, 3, 8, 25} {
			pl := newPlanner(t, strategy, BufferSize{Percent: 30})
			ix := pl.Index()
			for e := range 3 {
				var all []int32
				for i := range k {
					p, err := pl.Plan(e, i, k)
					if err != nil {
						t.Fatal(err)
					}
					var size int64
					for g, b := range p.Buffers {
						if b.Start != size {
							t.Fatalf("%s e%d part %d/%d buffer %d starts at %d, want %d", strategy, e, i, k, g, b.Start, size)
						}
						size += b.Size
						all = append(all, b.Records...)
						for _, id := range b.Blocks {
							for r := range ix.Blocks[id].Records {
								all = append(all, int32(ix.BlockRecords(id))+r)
							}
						}
					}
					if size != p.Size {
						t.Fatalf("buffer sizes add up to %d, plan size %d", size, p.Size)
					}
					// Balanced by bytes (balance.go): the largest unit
					// here is a block of 600 bytes.
					if d := int64(k)*p.Size - ix.Bytes; d > int64(k)*600 || -d > int64(k)*600 {
						t.Fatalf("%s e%d part %d/%d holds %d bytes, want %d/%d ± 600", strategy, e, i, k, p.Size, ix.Bytes, k)
					}
				}
				slices.Sort(all)
				n := len(ix.Frames)
				if len(all) != n || all[0] != 0 || all[n-1] != int32(n-1) || len(slices.Compact(all)) != n {
					t.Fatalf("%s e%d K=%d: %d records, want each of 0..%d once", strategy, e, k, len(all), n-1)
				}
			}
		}
	}
}

func TestWindowShuffleStaysWithinItsWindow(t *testing.T) {
	// With a window of W records, the record served at step k comes from
	// source positions [0, k+W): it can never run ahead by more than W.
	pl := newPlanner(t, "window", BufferSize{Bytes: 1000}) // 10 records of 100 bytes
	p, _ := pl.Plan(0, 0, 1)
	k := 0
	moved := false
	for _, b := range p.Buffers {
		for _, r := range b.Records {
			if int(r) >= k+10 {
				t.Fatalf("step %d served record %d, beyond a window of 10", k, r)
			}
			moved = moved || int(r) != k
			k++
		}
	}
	if !moved {
		t.Fatal("window served the source order")
	}
}

func TestOnceRepeatsAndFullChangesAcrossEpochs(t *testing.T) {
	order := func(strategy string, e int) []int32 {
		p, _ := newPlanner(t, strategy, BufferSize{Percent: 10}).Plan(e, 0, 1)
		var all []int32
		for _, b := range p.Buffers {
			all = append(all, b.Records...)
		}
		return all
	}
	if !slices.Equal(order("once", 0), order("once", 3)) {
		t.Error("once: epochs 0 and 3 differ")
	}
	if slices.Equal(order("full", 0), order("full", 3)) {
		t.Error("full: epochs 0 and 3 are the same")
	}
}

func TestPlanBuffersRespectTargetAndMemory(t *testing.T) {
	pl, err := NewPlanner(fixedIndex(), Params{Strategy: "corgipile", Seed: 1, Buffer: BufferSize{Bytes: 1500}, MaxMemory: 2000})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := pl.Plan(0, 0, 1)
	// Half of max memory, less 1/128 for the page alignment of slabs.
	if want := int64(1000 - 1000/128); !p.Capped || p.Target != want {
		t.Fatalf("target %d capped %v, want %d capped by half of max memory", p.Target, p.Capped, want)
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
		{"block", 0, 0, 2, `[14 10] [0 1 2 3 4 5 6 7 8 9][9 15] [0 1 2 3 4 5 6 7 8 9][5 13] [0 1 2 3 4 5 6 7][6 12 16] [0 1 2 3 4 5 6 7 8 9 10][4] [0 1 2]`},
		{"window", 1, 1, 2, `r[54 49 47 50 56 60 55 53 57 62 52]r[45 58 46 68 59 66 71 61 63 75 74 69]r[48 79 51 76 65 83 80 70 86 77 88]r[81 73 84 64 78 72 67 89 82 87 85]`},
		{"full", 1, 0, 3, `r[11 72 61 77 0 74 26 69 64 82]r[13 17 45 56 52 20 59 27 9 8]r[32 47 23 18 63 39 40 49 7 1]`},
		{"once", 2, 2, 3, `r[7 33 10 89 4 48 29 60 72 67]r[75 31 74 5 86 77 64 65 18 36]r[40 80 30 81 26 59 46 14 44 28]`},
		{"none", 0, 2, 3, `[14 15] [0 1 2 3 4 5 6 7 8 9 10][16 17] [0 1 2 3 4 5 6][18 19] [0 1 2 3 4 5 6 7 8 9 10]`},
	}
	for _, c := range cases {
		pl := newPlanner(t, c.strategy, BufferSize{Bytes: 1200})
		p, err := pl.Plan(c.epoch, c.part, c.k)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, b := range p.Buffers {
			perm := make([]uint32, b.Count)
			if b.Shuffle {
				permute(perm, b.Seed)
			} else {
				for i := range perm {
					perm[i] = uint32(i)
				}
			}
			if b.Records != nil {
				got += fmt.Sprint("r", b.Records)
				continue
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

func TestEqualPartsPadsShorterPartsWithTheirOwnRecords(t *testing.T) {
	for _, strategy := range Strategies() {
		pl, err := NewPlanner(fixedIndex(), Params{Strategy: strategy, Seed: 7, Buffer: BufferSize{Percent: 30}, MaxMemory: 1 << 30, EqualParts: true})
		if err != nil {
			t.Fatal(err)
		}
		ix := pl.Index()
		for _, k := range []int{3, 7} {
			counts := map[int64]bool{}
			padded := 0
			for i := range k {
				p, _ := pl.Plan(1, i, k)
				again, _ := pl.Plan(1, i, k)
				if fmt.Sprint(p.Buffers) != fmt.Sprint(again.Buffers) {
					t.Fatalf("%s: padding is not deterministic", strategy)
				}
				counts[p.Records] = true
				padded += p.Padding
				seen := map[int32]int{}
				var size int64
				for _, b := range p.Buffers {
					size += b.Size
					for _, r := range b.Records {
						seen[r]++
					}
					for _, id := range b.Blocks {
						for r := range ix.Blocks[id].Records {
							seen[int32(ix.BlockRecords(id))+r]++
						}
					}
				}
				if size != p.Size {
					t.Fatalf("%s: buffers hold %d bytes, plan says %d", strategy, size, p.Size)
				}
				total := 0
				for _, c := range seen {
					total += c
				}
				// mrs serves some records twice (mrs.go).
				if int64(total) != p.Records || (total-len(seen) > p.Padding && ExactlyOnce(strategy)) {
					t.Fatalf("%s part %d/%d: %d records, %d distinct, padding %d", strategy, i, k, total, len(seen), p.Padding)
				}
			}
			if len(counts) != 1 {
				t.Fatalf("%s K=%d: parts hold %v records, want one count", strategy, k, counts)
			}
			if padded == 0 && k == 7 {
				t.Fatalf("%s K=%d: no padding at all on an index whose parts differ", strategy, k)
			}
		}
	}
}
