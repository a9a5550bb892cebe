package blockcache

// DiskCache implements DiskTier, the loader's view of it.
var _ DiskTier = (*DiskCache)(nil)

// ReadExtent fills dst with the bytes of e from the cache and reports
// whether it did (see read).
func (c *DiskCache) ReadExtent(e Extent, dst []byte) bool { return c.read(e, dst) }

// OfferExtent queues data, the bytes of e, for writing (see offer).
func (c *DiskCache) OfferExtent(e Extent, epoch int, data []byte) { c.offer(e, epoch, data) }
