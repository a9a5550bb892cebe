package blockcache

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// walkedFixture is a probed index of two files of small records and the
// full index of the same files, whose blocks are the probed ones.
type walkedFixture struct {
	full, probed *index.Index
	a, b         []int32 // the blocks of each file
}

func newWalkedFixture(t *testing.T) walkedFixture {
	r := rand.New(rand.NewPCG(61, 62))
	root := t.TempDir()
	blocktest.WriteRecords(t, root, "a.tfrecord", blocktest.RandomPayloads(r, 400, 2000))
	blocktest.WriteRecords(t, root, "b.tfrecord", blocktest.RandomPayloads(r, 800, 2000))
	o := index.Options{BlockSize: 16 << 10}
	f := walkedFixture{full: build(t, root, o)}
	o.Probe = true
	f.probed = build(t, root, o)
	if len(f.full.Blocks) != len(f.probed.Blocks) {
		t.Fatalf("%d full blocks, %d probed", len(f.full.Blocks), len(f.probed.Blocks))
	}
	for id, b := range f.probed.Blocks {
		if filepath.Base(f.probed.Path(b.File)) == "a.tfrecord" {
			f.a = append(f.a, int32(id))
		} else {
			f.b = append(f.b, int32(id))
		}
	}
	return f
}

// loadSame loads unit u with both loaders and fails unless both serve the
// same records.
func loadSame(t *testing.T, lp, lf *Loader, u Unit) {
	t.Helper()
	bp, err := lp.Get(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	bf, err := lf.Get(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(records(bp), records(bf)) {
		t.Fatalf("blocks %v: the probed loader serves other records than the full index's", u.Blocks)
	}
	lp.Release(bp)
	lf.Release(bf)
}

// A first load of a file's last block reads the file whole before it, in
// runs, for the walk over every block before it (chain_ahead.go), and
// takes its own block from that read; the loads of the other blocks then
// take them from memory: no read of the source, the same records as a
// full index's loader, and the kept memory given back once all are taken.
func TestBlocksAWalkReadServeTheirLaterLoadsWithoutReadingAgain(t *testing.T) {
	f := newWalkedFixture(t)
	lp := NewLoader(f.probed, LoaderOptions{MaxMemory: 64 << 20})
	readAhead(lp, true)
	lf := NewLoader(f.full, LoaderOptions{MaxMemory: 64 << 20})
	last := f.a[len(f.a)-1]
	loadSame(t, lp, lf, blockUnit(last))
	s := lp.Stats()
	var gap int64
	for _, id := range f.a {
		gap += f.probed.Blocks[id].Len
	}
	if s.WalkKeptBytes != gap || s.BlocksRead != 0 {
		t.Fatalf("the walk kept %d bytes, the file's blocks hold %d; %d blocks read from the source, want none", s.WalkKeptBytes, gap, s.BlocksRead)
	}
	// In two loads, each of every other block.
	var even, odd []int32
	for i, id := range f.a[:len(f.a)-1] {
		if i%2 == 0 {
			even = append(even, id)
		} else {
			odd = append(odd, id)
		}
	}
	loadSame(t, lp, lf, blockUnit(odd...))
	loadSame(t, lp, lf, blockUnit(even...))
	s2 := lp.Stats()
	if s2.BlocksRead != 0 || s2.Totals.WalkedBytes != gap {
		t.Fatalf("after loading the walked blocks: %d blocks read from the source, %d bytes from the walk; want 0 and %d",
			s2.BlocksRead, s2.Totals.WalkedBytes, gap)
	}
	lp.mu.Lock()
	runs, kept := len(lp.walk.runs), len(lp.walk.blocks)
	lp.mu.Unlock()
	if runs != 0 || kept != 0 {
		t.Fatalf("%d kept reads and %d blocks still held after every block was taken", runs, kept)
	}
}

// A walk keeps nothing where the budget has no room for its read beside a
// buffer as large as the largest so far; and a load that needs memory the
// kept blocks hold drops them before anything else. Loads stay correct
// either way, from the source.
func TestKeptWalkBlocksNeverTakeABuffersMemory(t *testing.T) {
	f := newWalkedFixture(t)
	lf := NewLoader(f.full, LoaderOptions{MaxMemory: 64 << 20})
	last := f.a[len(f.a)-1]

	t.Run("no room", func(t *testing.T) {
		var gap int64
		for _, id := range f.a[:len(f.a)-1] {
			gap += f.probed.Blocks[id].Len
		}
		// Room for the gap's blocks as a buffer, not for the walk's read
		// of them (and the next few bytes) beside the last block's
		// buffer and another as large.
		lp := NewLoader(f.probed, LoaderOptions{MaxMemory: gap + f.probed.Blocks[last].Len})
		readAhead(lp, true)
		loadSame(t, lp, lf, blockUnit(last))
		if s := lp.Stats(); s.WalkKeptBytes != 0 {
			t.Fatalf("kept %d bytes in a budget of %d", s.WalkKeptBytes, s.MemoryBudget)
		}
		loadSame(t, lp, lf, blockUnit(f.a[:len(f.a)-1]...))
	})

	t.Run("dropped for a load", func(t *testing.T) {
		var bBytes int64
		for _, id := range f.b {
			bBytes += f.probed.Blocks[id].Len
		}
		budget := bBytes + 256<<10 // room for b's load, not also for what the walk keeps
		lp := NewLoader(f.probed, LoaderOptions{MaxMemory: budget})
		readAhead(lp, true)
		loadSame(t, lp, lf, blockUnit(last))
		s := lp.Stats()
		if s.WalkKeptBytes == 0 {
			t.Fatal("nothing kept: the test needs the walk's blocks held")
		}
		loadSame(t, lp, lf, blockUnit(f.b...))
		s2 := lp.Stats()
		if s2.MemoryInUse > budget {
			t.Fatalf("%d bytes in use, over the budget of %d", s2.MemoryInUse, budget)
		}
		lp.mu.Lock()
		kept := len(lp.walk.blocks)
		lp.mu.Unlock()
		if kept == len(f.a)-1 {
			t.Fatal("the load of file b dropped none of the kept blocks")
		}
		loadSame(t, lp, lf, blockUnit(f.a[:len(f.a)-1]...))
		if s3 := lp.Stats(); s3.BlocksRead == s2.BlocksRead {
			t.Fatal("the dropped blocks were not read from the source again")
		}
	})
}
