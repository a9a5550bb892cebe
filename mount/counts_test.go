package mount

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/shuffler"
)

// A remount whose probed index knows the record counts an earlier mount
// learned plans exactly what that mount planned: its slabs' share of
// --max-memory (which lowers the buffers when two do not fit) is the one
// of the probe's counts, not of the kept ones, even where the kept counts
// alone (300,000 tiny records: 12 MB of record tables) would shrink it to
// a third and cut every part into more buffers.
func TestRemountWithKeptRecordCountsPlansTheBuffersOfTheMountThatLearnedThem(t *testing.T) {
	c := config(t)
	var b strings.Builder
	for i := range 300_000 {
		b.WriteString(`{"i":` + strings.Repeat("7", 1+i%9) + "}\n")
	}
	if err := os.WriteFile(filepath.Join(c.Source, "a.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := formats.Lookup("jsonl", formats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.Format, c.Index, c.BlockSize, c.MaxMemory = f, index.IndexProbe, 64<<10, 16<<20
	c.Buffer = shuffler.BufferSize{Percent: 100}
	c.Seed, c.SeedGiven, c.Parts = 5, true, 2

	first, err := Open(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Index.CountsUnknown {
		t.Fatal("a probed jsonl index knows its counts before a load")
	}
	lo := first.Config.LoaderOptions(nil, first.SlabBudget, nil)
	lo.Proofs = first.proofs
	ld := blockcache.NewLoader(first.Index, lo)
	for id := range first.Index.Blocks {
		buf, err := ld.Get(context.Background(), blockcache.Unit{Blocks: []int32{int32(id)}})
		if err != nil {
			t.Fatal(err)
		}
		ld.Release(buf)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	second, err := Open(context.Background(), c, nil)
	if err != nil {
		t.Fatalf("the remount that knows the counts: %v", err)
	}
	defer second.Close()
	if second.Index.CountsUnknown || second.Index.Records != 300_000 || second.Index.CountsKept() != 1 {
		t.Fatalf("the remount's index: counts unknown %v, %d records, %d files' counts kept; want 300000 known from 1", second.Index.CountsUnknown, second.Index.Records, second.Index.CountsKept())
	}
	if all, _ := MemorySplit(indexOf(second.Index.Records, second.Index.Bytes), c.MaxMemory, false); all > first.SlabBudget/2 {
		t.Fatalf("the test's dataset is too small for its kept counts to change the split: %d slabs counting them, %d not", all, first.SlabBudget)
	}
	if second.SlabBudget != first.SlabBudget {
		t.Fatalf("slabs %d at the remount, %d at the mount that learned the counts", second.SlabBudget, first.SlabBudget)
	}
	for epoch := range 3 {
		for part := range c.Parts {
			p1, err := first.Planner.Plan(epoch, part, c.Parts)
			if err != nil {
				t.Fatal(err)
			}
			p2, err := second.Planner.Plan(epoch, part, c.Parts)
			if err != nil {
				t.Fatal(err)
			}
			if p1.Size != p2.Size || len(p1.Buffers) != len(p2.Buffers) {
				t.Fatalf("epoch %d part %d: %d bytes in %d buffers at the remount, %d in %d at the mount that learned the counts", epoch, part, p2.Size, len(p2.Buffers), p1.Size, len(p1.Buffers))
			}
			for g := range p1.Buffers {
				b1, b2 := p1.Buffers[g], p2.Buffers[g]
				if !slices.Equal(b1.Blocks, b2.Blocks) || b1.Seed != b2.Seed || b1.Start != b2.Start || b1.Size != b2.Size || b1.Shuffle != b2.Shuffle || b2.Count <= 0 || b1.Count != -1 {
					t.Fatalf("epoch %d part %d buffer %d: the remount plans %+v, the mount that learned the counts %+v", epoch, part, g, b2, b1)
				}
			}
		}
	}
}
