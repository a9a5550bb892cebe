package blockcache

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
	"github.com/corgifs/corgifs/source/local"
)

// TestEveryBlockOfAFullIndexOfEveryFormatHoldsTheCRC32COfItsBytes builds a
// full index of every format, stored and compressed every way, TFRecord
// included (whose records carry CRCs of their own, so that its index once
// kept none per block): every block's CRC must be the CRC32C of its stored
// bytes (decompressed), which the disk cache checks its entries against.
func TestEveryBlockOfAFullIndexOfEveryFormatHoldsTheCRC32COfItsBytes(t *testing.T) {
	plain := compressor{name: "stored", fn: func(_ testing.TB, b []byte) []byte { return b }}
	for _, c := range blocktest.FormatCases(t) {
		for _, z := range append([]compressor{plain}, compressors...) {
			t.Run(c.Format.Name()+"/"+z.name, func(t *testing.T) {
				root := t.TempDir()
				data := map[string][]byte{}
				for name, b := range c.Files {
					blocktest.WriteBytes(t, filepath.Join(root, name+z.ext), z.fn(t, b))
					data[name+z.ext] = b
				}
				o := index.Options{BlockSize: 150}
				if _, ok := c.Format.(formats.Fixed); ok {
					o.Format = c.Format
				}
				ix := build(t, root, o)
				if len(ix.Blocks) == 0 {
					t.Fatal("no blocks")
				}
				for id, b := range ix.Blocks {
					stored := data[ix.Files[b.File].Path][b.Offset : b.Offset+b.Len]
					if want := formats.UpdateChecksum(0, stored); b.CRC != want {
						t.Fatalf("block %d (%s at %d, %d bytes): CRC %08x, its bytes have %08x", id, ix.Files[b.File].Path, b.Offset, b.Len, b.CRC, want)
					}
				}
			})
		}
	}
}

// pinVersions gives the files of ix versions without a device, inode and
// change time, as a system without them lists them: the disk cache's keys
// then stay the same across a rewrite that puts sizes and mtimes back.
func pinVersions(ix *index.Index) {
	for i := range ix.Files {
		ix.Files[i].Version = local.Version(ix.Files[i].Size, ix.Files[i].Mtime)
	}
}

// TestDiskCacheEntryOfOtherBytesThanTheIndexsBlockIsAMissLoggedOnce fills
// a disk cache, then rewrites a file with other records of the same
// lengths and puts its mtime back, indexes again and keys the files so
// that the entries' keys do not change: every entry of that file is intact
// and holds valid TFRecord frames of the old data. Each must be a miss, read
// from the source, counted as mismatched (not damaged), logged once for
// all of them, and cached again with the new bytes.
func TestDiskCacheEntryOfOtherBytesThanTheIndexsBlockIsAMissLoggedOnce(t *testing.T) {
	f := newLoaderFixture(t)
	pinVersions(f.ix)
	dir := filepath.Join(t.TempDir(), "dc")
	var log lockedBuffer
	f2 := cacheThenRewrite(t, f, dir, &log, f.ix.Files[0].Mtime)
	pinVersions(f2.ix)
	var changed int64
	for id, b := range f2.ix.Blocks {
		old := f.ix.Blocks[id]
		if b.File != old.File || b.Offset != old.Offset || b.Len != old.Len {
			t.Fatalf("block %d moved: the rewrite must keep every length", id)
		}
		if b.File == 0 {
			changed++
		}
	}
	if f2.ix.Files[0].Version != f.ix.Files[0].Version {
		t.Fatalf("version %q, was %q: the test needs the same keys", f2.ix.Files[0].Version, f.ix.Files[0].Version)
	}

	var log2 lockedBuffer
	l2, dc2 := diskLoader(t, f2, dir, &log2)
	f2.loadAll(t, l2, 1) // checks every byte against the new content
	s := l2.Stats()
	if s.SourceRequests != changed || s.DiskCache.Mismatched != changed || s.DiskCache.Damaged != 0 {
		t.Fatalf("%d source requests, %d mismatched and %d damaged entries; want %d, %d and 0 (the rewritten file's blocks)",
			s.SourceRequests, s.DiskCache.Mismatched, s.DiskCache.Damaged, changed, changed)
	}
	if s.DiskCache.Hits != int64(len(f2.ix.Blocks))-changed {
		t.Fatalf("%d hits, want %d (the blocks of the files left alone)", s.DiskCache.Hits, int64(len(f2.ix.Blocks))-changed)
	}
	if n := strings.Count(log2.String(), "disk cache entry holds other bytes"); n != 1 {
		t.Fatalf("%d log lines about entries of other bytes, want 1:\n%s", n, log2.String())
	}
	if rel := f.files[0].Rel; !strings.Contains(log2.String(), rel) {
		t.Fatalf("the log line does not name the file %s:\n%s", rel, log2.String())
	}
	eventually(t, "the refetched blocks are written", func() bool { return dc2.Stats().Written == changed })
	dc2.Close()

	// The next loader is served every block from the cache, the new bytes.
	l3, _ := diskLoader(t, f2, dir, &log2)
	f2.loadAll(t, l3, 2)
	if s := l3.Stats(); s.SourceRequests != 0 || s.DiskCache.Mismatched != 0 {
		t.Fatalf("after the refetch: %d source requests and %d mismatched entries, want none", s.SourceRequests, s.DiskCache.Mismatched)
	}
}

// TestAProbedIndexGivesTheDiskCacheNoBlockChecksum: a probed index reads
// a little of each file and has no block checksums (0 in its blocks), so
// its entries are kept apart by their keys alone, never failed against 0.
func TestAProbedIndexGivesTheDiskCacheNoBlockChecksum(t *testing.T) {
	f := newLoaderFixture(t)
	f.ix.Probed = true
	dc, err := OpenDiskCache(f.ix, DiskCacheOptions{Dir: filepath.Join(t.TempDir(), "dc"), MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	b := f.ix.Blocks[0]
	if _, ok := dc.blockCRC(Extent{File: b.File, Block: 0, Off: b.Offset, Len: b.Len}); ok {
		t.Fatal("a probed index's block has a CRC to check against")
	}
}
