package blockcache

import (
	"fmt"
	"slices"
	"testing"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// A loader that learns the count of every block of a probed index keeps
// them (with the proofs of the cuts, for TFRecord and tar); the next
// probed index of the same files, filled from them, knows every count a
// full index knows, and its loader lays each buffer out before reading it
// (so that a reader is served as it loads), loads the same records, and
// walks no record chain.
func TestCountsLearnedByALoaderAreKnownToTheNextProbedIndexAndItsBuffersAreLaidOutBeforeTheyLoad(t *testing.T) {
	for _, c := range probeCases(t) {
		root := c.Write(t)
		t.Run(fmt.Sprintf("%s/%d-files", c.Format.Name(), len(c.Files)), func(t *testing.T) {
			o := index.Options{BlockSize: 3000, Format: c.Format, CacheDir: t.TempDir()}
			full := build(t, root, o)
			o.Probe = true
			ix := build(t, root, o)
			if !ix.CountsUnknown {
				// The probe knows the counts of this format (npy,
				// fixed): nothing to keep, and they must be the full
				// index's.
				if ix.Records != full.Records {
					t.Fatalf("a probe that knows its counts found %d records, a full index %d", ix.Records, full.Records)
				}
				return
			}
			all := Unit{}
			for id := range ix.Blocks {
				all.Blocks = append(all.Blocks, int32(id))
			}
			pl, err := index.OpenProofLog(blocktest.Dir(t, root, false), o)
			if err != nil {
				t.Fatal(err)
			}
			l := NewLoader(ix, LoaderOptions{MaxMemory: 64 << 20, Proofs: pl})
			// Block by block, last first: the chain walks prove the
			// cuts after the counts are learned.
			for id := len(ix.Blocks) - 1; id >= 0; id-- {
				b, err := l.Get(t.Context(), blockUnit(int32(id)))
				if err != nil {
					t.Fatal(err)
				}
				if b.partial {
					t.Fatal("a buffer of unknown counts was laid out before it loaded")
				}
				l.Release(b)
			}
			if err := pl.Close(); err != nil {
				t.Fatal(err)
			}

			next := build(t, root, o)
			pl, err = index.OpenProofLog(blocktest.Dir(t, root, false), o)
			if err != nil {
				t.Fatal(err)
			}
			want := 0 // the files with blocks
			for fi := range next.Files {
				if _, n := next.FileBlocks(int32(fi)); n > 0 {
					want++
				}
			}
			if n := pl.FillCounts(next, nil); n != want || next.CountsUnknown || next.Records != full.Records {
				t.Fatalf("filled %d of %d files; counts unknown %v, %d records, the full index %d", n, want, next.CountsUnknown, next.Records, full.Records)
			}
			for id, b := range next.Blocks {
				if b.Records != full.Blocks[id].Records {
					t.Fatalf("block %d: %d records kept, the full index has %d", id, b.Records, full.Blocks[id].Records)
				}
			}
			lf := NewLoader(full, LoaderOptions{MaxMemory: 64 << 20})
			ln := NewLoader(next, LoaderOptions{MaxMemory: 64 << 20, Proofs: pl})
			bf, err := lf.Get(t.Context(), all)
			if err != nil {
				t.Fatal(err)
			}
			bn, err := ln.Begin(t.Context(), all)
			if err != nil {
				t.Fatal(err)
			}
			if !bn.partial {
				t.Fatal("the buffer of an index whose counts were kept was not laid out before it loaded")
			}
			for r := range bn.Starts {
				if err := ln.Await(t.Context(), bn, r); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := records(bn), records(bf); !slices.Equal(got, want) {
				t.Fatalf("the filled index loads %d records, the full index %d, or others", len(got), len(want))
			}
			lf.Release(bf)
			ln.Release(bn)
			if s := ln.Stats(); s.ProofReads != 0 || s.BlocksLearned != nil {
				t.Fatalf("the filled index's loader walked %d reads or learns counts (%v)", s.ProofReads, s.BlocksLearned)
			}
		})
	}
}

// A count kept for a file is checked when its block loads: a count that
// no longer matches (the kept list edited, or a source changed behind an
// unchanged identity) fails the block with EIO and reports the damage, as
// a full index's wrong count does.
func TestAKeptCountThatDoesNotMatchTheBlockFailsItsLoad(t *testing.T) {
	root, _ := blocktest.Dataset(t, 21, 1, 300, 300)
	o := index.Options{BlockSize: 3000, CacheDir: t.TempDir(), Probe: true}
	ix := build(t, root, o)
	pl, err := index.OpenProofLog(blocktest.Dir(t, root, false), o)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLoader(ix, LoaderOptions{MaxMemory: 64 << 20, Proofs: pl})
	for id := range ix.Blocks {
		b, err := l.Get(t.Context(), blockUnit(int32(id)))
		if err != nil {
			t.Fatal(err)
		}
		l.Release(b)
	}
	// Off by one in the kept list: AddCounts replaces the learned ones.
	counts := make([]int32, len(ix.Blocks))
	for id := range counts {
		counts[id] = l.learn.counts[id].Load()
	}
	counts[1]++
	pl.AddCounts(ix, 0, counts)
	pl.Close()

	next := build(t, root, o)
	pl, err = index.OpenProofLog(blocktest.Dir(t, root, false), o)
	if err != nil {
		t.Fatal(err)
	}
	if pl.FillCounts(next, nil) != 1 {
		t.Fatal("the kept counts were not filled")
	}
	var damage string
	ln := NewLoader(next, LoaderOptions{MaxMemory: 64 << 20, OnDamage: func(r string) { damage = r }})
	if _, err := ln.Get(t.Context(), blockUnit(1)); err == nil || damage == "" {
		t.Fatalf("a block loaded with a wrong kept count: err %v, damage reported %q", err, damage)
	}
	if b, err := ln.Get(t.Context(), blockUnit(0)); err != nil {
		t.Fatalf("a block of a right kept count failed: %v", err)
	} else {
		ln.Release(b)
	}
}
