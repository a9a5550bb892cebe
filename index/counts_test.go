package index

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// blockCounts returns the record count of every block of ix.
func blockCounts(ix *Index) []int32 {
	c := make([]int32, len(ix.Blocks))
	for i, b := range ix.Blocks {
		c[i] = b.Records
	}
	return c
}

// keepAll keeps in pl the counts of every file of probed as full (the
// same cuts, read whole) has them, as a loader that learned every block
// would, with the files' proofs.
func keepAll(t *testing.T, pl *ProofLog, probed, full *Index) {
	t.Helper()
	if !slices.EqualFunc(probed.Blocks, full.Blocks, func(a, b Block) bool { return a.Offset == b.Offset && a.Len == b.Len }) {
		t.Fatal("the probed and the full index cut other blocks")
	}
	for fi := range probed.Files {
		first, n := probed.FileBlocks(int32(fi))
		pl.Add(probed.ProofEntry(int32(fi)))
		pl.AddCounts(probed, int32(fi), blockCounts(full)[first:first+n])
	}
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
}

// openLog is OpenProofLog that fails the test on error.
func openLog(t *testing.T, root string, o Options) *ProofLog {
	t.Helper()
	pl, err := OpenProofLog(blocktest.Dir(t, root, false), o)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// The counts a mount learned for every block of a file, kept in the cache
// directory, give the next probed index of the same files and cuts every
// count, as a full index has them; so its record count is known.
func TestKeptRecordCountsFillTheNextProbedIndexOfTheSameFiles(t *testing.T) {
	root, _ := blocktest.Dataset(t, 3, 3, 400, 300)
	o := Options{BlockSize: 4000, CacheDir: t.TempDir()}
	full := build(t, root, o)
	o.Probe = true
	keepAll(t, openLog(t, root, o), build(t, root, o), full)

	ix := build(t, root, o)
	if !ix.CountsUnknown {
		t.Fatal("a probed TFRecord index knows its counts before any load")
	}
	if n := openLog(t, root, o).FillCounts(ix, nil); n != len(ix.Files) || ix.CountsKept() != n {
		t.Fatalf("filled %d files (CountsKept %d), want %d", n, ix.CountsKept(), len(ix.Files))
	}
	if ix.CountsUnknown || ix.Records != full.Records || !slices.Equal(blockCounts(ix), blockCounts(full)) {
		t.Fatalf("filled index: unknown %v, %d records, counts %v; the full index has %d records, counts %v", ix.CountsUnknown, ix.Records, blockCounts(ix), full.Records, blockCounts(full))
	}
	for fi, f := range ix.Files {
		if f.Records != full.Files[fi].Records {
			t.Fatalf("file %s: %d records, the full index says %d", f.Path, f.Records, full.Files[fi].Records)
		}
	}
	if err := ix.checkTiling(); err != nil {
		t.Fatalf("the filled index does not pass the sidecar's own check: %v", err)
	}
}

// A count is trusted only for the file, the cuts and the format it was
// learned with, and for a format whose probe must be proven, once the
// file's cuts are: a rewritten file, another block size, other format
// options, a lost proof, a forgotten or a stale-marked index each leave
// the counts unknown, to be learned again.
func TestKeptRecordCountsAreNotGivenToAFileWhoseIdentityCutsOrFormatDiffer(t *testing.T) {
	t.Run("changed-file", func(t *testing.T) {
		root, files := blocktest.Dataset(t, 5, 2, 400, 300)
		o := Options{BlockSize: 4000, CacheDir: t.TempDir(), Probe: true}
		full := build(t, root, Options{BlockSize: 4000})
		keepAll(t, openLog(t, root, o), build(t, root, o), full)
		// f1 rewritten: the same size, other bytes, a later mtime.
		data := slices.Clone(files[1].Data)
		data[len(data)-1] ^= 0xff
		blocktest.WriteBytes(t, filepath.Join(root, "f1.tfrecord"), data)
		ix := build(t, root, o)
		if n := openLog(t, root, o).FillCounts(ix, nil); n != 1 || !ix.CountsUnknown {
			t.Fatalf("filled %d files, counts unknown %v; want f0 alone filled", n, ix.CountsUnknown)
		}
		first, n := ix.FileBlocks(1)
		for _, b := range ix.Blocks[first : first+n] {
			if b.Records != 0 {
				t.Fatalf("the rewritten file's block at %d was given %d records", b.Offset, b.Records)
			}
		}
	})
	t.Run("earlier-version-pruned", func(t *testing.T) {
		root, files := blocktest.Dataset(t, 15, 2, 400, 300)
		o := Options{BlockSize: 4000, CacheDir: t.TempDir(), Probe: true}
		full := build(t, root, Options{BlockSize: 4000})
		keepAll(t, openLog(t, root, o), build(t, root, o), full)
		o3 := o
		o3.BlockSize = 3000 // counts of the same files at other cuts stay
		keepAll(t, openLog(t, root, o3), build(t, root, o3), build(t, root, Options{BlockSize: 3000}))
		data := slices.Clone(files[1].Data)
		data[len(data)-1] ^= 0xff
		blocktest.WriteBytes(t, filepath.Join(root, "f1.tfrecord"), data)
		pl := openLog(t, root, o)
		pl.FillCounts(build(t, root, o), nil)
		if err := pl.Close(); err != nil {
			t.Fatal(err)
		}
		pl = openLog(t, root, o)
		var paths []string
		for id := range pl.counts {
			paths = append(paths, id.Path)
		}
		slices.Sort(paths)
		// f0 at both block sizes; f1's counts were for its earlier bytes.
		if want := []string{"f0.tfrecord", "f0.tfrecord"}; !slices.Equal(paths, want) {
			t.Fatalf("kept counts after f1 was rewritten are for %v, want %v", paths, want)
		}
	})
	t.Run("other-block-size", func(t *testing.T) {
		root, _ := blocktest.Dataset(t, 7, 2, 400, 300)
		o := Options{BlockSize: 4000, CacheDir: t.TempDir(), Probe: true}
		keepAll(t, openLog(t, root, o), build(t, root, o), build(t, root, Options{BlockSize: 4000}))
		o.BlockSize = 3000
		ix := build(t, root, o)
		if n := openLog(t, root, o).FillCounts(ix, nil); n != 0 || !ix.CountsUnknown {
			t.Fatalf("an index of other cuts was given the counts of %d files", n)
		}
	})
	t.Run("unproven", func(t *testing.T) {
		root, _ := blocktest.Dataset(t, 9, 2, 400, 300)
		o := Options{BlockSize: 4000, CacheDir: t.TempDir(), Probe: true}
		probed, full := build(t, root, o), build(t, root, Options{BlockSize: 4000})
		pl := openLog(t, root, o)
		for fi := range probed.Files {
			first, n := probed.FileBlocks(int32(fi))
			pl.AddCounts(probed, int32(fi), blockCounts(full)[first:first+n])
		}
		pl.Close()
		ix := build(t, root, o)
		if n := openLog(t, root, o).FillCounts(ix, nil); n != 0 {
			t.Fatalf("TFRecord files whose cuts are not proven were given the counts of %d files", n)
		}
	})
	t.Run("other-format-options", func(t *testing.T) {
		root := t.TempDir()
		var b strings.Builder
		for i := range 500 {
			b.WriteString(strings.Repeat("x", i%40) + "\n")
		}
		blocktest.WriteBytes(t, filepath.Join(root, "a.jsonl"), []byte(b.String()))
		o := Options{BlockSize: 2000, CacheDir: t.TempDir(), Probe: true, Format: formats.JSONL{}}
		probed := build(t, root, o)
		full := build(t, root, Options{BlockSize: 2000, Format: formats.JSONL{}})
		keepAll(t, openLog(t, root, o), probed, full)
		if ix := build(t, root, o); openLog(t, root, o).FillCounts(ix, nil) != 1 || ix.CountsUnknown {
			t.Fatal("the same jsonl files were not given their counts")
		}
		o.Format = formats.JSONL{Check: true}
		if ix := build(t, root, o); openLog(t, root, o).FillCounts(ix, nil) != 0 || !ix.CountsUnknown {
			t.Fatal("jsonl files read with other options were given counts kept for the first")
		}
	})
	t.Run("forgotten", func(t *testing.T) {
		root, _ := blocktest.Dataset(t, 11, 2, 400, 300)
		o := Options{BlockSize: 4000, CacheDir: t.TempDir(), Probe: true}
		keepAll(t, openLog(t, root, o), build(t, root, o), build(t, root, Options{BlockSize: 4000}))
		if err := openLog(t, root, o).ForgetCounts(); err != nil {
			t.Fatal(err)
		}
		if n := openLog(t, root, o).FillCounts(build(t, root, o), nil); n != 0 {
			t.Fatalf("forgotten counts filled %d files", n)
		}
	})
	t.Run("stale", func(t *testing.T) {
		root, _ := blocktest.Dataset(t, 13, 2, 400, 300)
		o := Options{BlockSize: 4000, CacheDir: t.TempDir(), Probe: true}
		if _, _, err := Open(t.Context(), blocktest.Dir(t, root, false), o); err != nil {
			t.Fatal(err)
		}
		keepAll(t, openLog(t, root, o), build(t, root, o), build(t, root, Options{BlockSize: 4000}))
		if err := MarkStale(blocktest.Dir(t, root, false), o, "a block failed its check"); err != nil {
			t.Fatal(err)
		}
		ix, _, err := Open(t.Context(), blocktest.Dir(t, root, false), o)
		if err != nil {
			t.Fatal(err)
		}
		if n := openLog(t, root, o).FillCounts(ix, nil); n != 0 {
			t.Fatalf("after the sidecar was marked stale, kept counts filled %d files", n)
		}
		m, _ := filepath.Glob(filepath.Join(o.CacheDir, "*.probe-counts"))
		for _, p := range m {
			if _, err := os.Stat(p); err == nil {
				t.Fatalf("the kept counts %s outlived the stale mark", p)
			}
		}
	})
}
