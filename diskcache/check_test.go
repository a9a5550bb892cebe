package diskcache

import (
	"path/filepath"
	"testing"
)

// TestAProbedIndexGivesTheDiskCacheNoBlockChecksum: a probed index reads
// a little of each file and has no block checksums (0 in its blocks), so
// its entries are kept apart by their keys alone, never failed against 0.
func TestAProbedIndexGivesTheDiskCacheNoBlockChecksum(t *testing.T) {
	f := newDiskFixture(t)
	f.ix.Probed = true
	dc, err := Open(f.ix, Options{Dir: filepath.Join(t.TempDir(), "dc"), MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	b := f.ix.Blocks[0]
	if _, ok := dc.blockCRC(Extent{File: b.File, Block: 0, Off: b.Offset, Len: b.Len}); ok {
		t.Fatal("a probed index's block has a CRC to check against")
	}
}
