package diskcache

import "github.com/corgifs/corgifs/index"

// Tier is the disk cache as the loader sees it (Cache is one):
// where it looks for the stored bytes of an extent before it reads them
// from the source, and where it offers those it read and checked.
type Tier interface {
	// ReadExtent fills dst with the stored bytes of e and reports whether
	// it did.
	ReadExtent(e Extent, dst []byte) bool
	// OfferExtent offers data, the stored bytes of e read from the source
	// and checked for epoch, for keeping. It must not keep data, which
	// the loader goes on using.
	OfferExtent(e Extent, epoch int, data []byte)
	// Stats returns a snapshot of its counters, for stats.json.
	Stats() Stats
}

// PageTier is a Tier that can read an extent straight from its disk into
// whole pages of the loader's memory, around the page cache (Cache is
// one). A loader that has one, with blocks of at least
// index.MinDirectBlock, places every block at the offset within a page it
// has in its file, with pages of its own (blockcache's placeBlock), and
// reads it with ReadExtentPages.
type PageTier interface {
	Tier
	// ReadExtentPages is ReadExtent into win[e.Off%source.DirectAlign:]
	// [:e.Len]: win starts at a page boundary, is at least that offset
	// plus e.Len rounded up to a page long, and is e's own, so that its
	// other bytes may be overwritten.
	ReadExtentPages(e Extent, win []byte) bool
}

// Extent is a byte range of a source file that the loader reads whole:
// Len stored bytes at Off of file File (an index into Index.Files),
// holding block Block (an index into Index.Blocks, -1 for a single
// record).
type Extent struct {
	File, Block int32
	Off, Len    int64
}

// Cache implements PageTier, the loader's view of it.
var _ PageTier = (*Cache)(nil)

// ReadExtent fills dst with the bytes of e from the cache and reports
// whether it did (see read).
func (c *Cache) ReadExtent(e Extent, dst []byte) bool { return c.read(e, dst, nil) }

// ReadExtentPages implements PageTier.
func (c *Cache) ReadExtentPages(e Extent, win []byte) bool {
	lead := e.Off - index.AlignDown(e.Off)
	return c.read(e, win[lead:lead+e.Len], win)
}

// OfferExtent queues data, the bytes of e, for writing (see offer).
func (c *Cache) OfferExtent(e Extent, epoch int, data []byte) { c.offer(e, epoch, data) }
