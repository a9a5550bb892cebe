package diskcache

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

// Extent is a byte range of a source file that the loader reads whole:
// Len stored bytes at Off of file File (an index into Index.Files),
// holding block Block (an index into Index.Blocks, -1 for a single
// record).
type Extent struct {
	File, Block int32
	Off, Len    int64
}

// Cache implements Tier, the loader's view of it.
var _ Tier = (*Cache)(nil)

// ReadExtent fills dst with the bytes of e from the cache and reports
// whether it did (see read).
func (c *Cache) ReadExtent(e Extent, dst []byte) bool { return c.read(e, dst) }

// OfferExtent queues data, the bytes of e, for writing (see offer).
func (c *Cache) OfferExtent(e Extent, epoch int, data []byte) { c.offer(e, epoch, data) }
