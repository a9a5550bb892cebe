package diskcache

import (
	"fmt"
	"path/filepath"
)

// The disk cache's last check: an entry is served only if its bytes are
// the ones the index took the checksum of. Its key (the file's version)
// changes whenever the file does, so this fails only for an entry filled
// from other bytes under a key that did not change: a local file rewritten
// by a tool that restores even the change time (a clock set back, a raw
// copy of a disk image), an object store that reuses ETags, an entry
// copied in from another machine's cache. Such an entry is intact, so it is
// not damage: it is a miss, and the block is read from the source.

// blockCRC returns the CRC32C the index took of the stored bytes of
// extent e, or false when it has none: a probed index reads only a little
// of each file, so its blocks have no checksum, and its entries are kept
// apart by their keys alone.
func (c *Cache) blockCRC(e Extent) (uint32, bool) {
	ix := c.ix
	if ix.Probed || e.Block < 0 || int(e.Block) >= len(ix.Blocks) {
		return 0, false
	}
	blk := ix.Blocks[e.Block]
	if blk.File != e.File || blk.Offset != e.Off || blk.Len != e.Len {
		return 0, false
	}
	return blk.CRC, true
}

// checkBlock reports whether crc, the CRC32C of the bytes of entry name
// (ent in the table) read for extent e, is the index's for that block.
// If not, the entry is counted, dropped so that the source's bytes take its
// place, and the first such entry of the mount is logged.
func (c *Cache) checkBlock(name diskName, ent *diskEntry, e Extent, crc uint32) bool {
	want, ok := c.blockCRC(e)
	if !ok || crc == want {
		return true
	}
	c.count.misses.Add(1)
	c.count.mismatched.Add(1)
	if c.count.mismatchLogged.CompareAndSwap(false, true) {
		c.log.Warn("disk cache entry holds other bytes than the index's block (the source was rewritten without changing the file's version, or the entry was filled from other data): dropped, and the block read from the source; later such entries are counted in stats.json disk_cache.mismatched, not logged",
			"entry", filepath.Join(c.path, name.String()), "file", c.ix.Path(e.File), "offset", e.Off, "bytes", e.Len, "crc32c", fmt.Sprintf("%08x", crc), "index_crc32c", fmt.Sprintf("%08x", want))
	}
	c.drop(name, ent)
	return false
}
