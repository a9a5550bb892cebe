package blockcache

// The loader's side of the disk cache, and the bytes it counts per epoch.

import (
	"sync"
	"sync/atomic"

	"github.com/corgifs/corgifs/diskcache"
	"github.com/corgifs/corgifs/index"
)

// EpochStats are the bytes loaded for one epoch's units, by where they
// came from: read from the source, read from the disk cache, or found in
// memory by a Get (a buffer loaded for another reader or read again; a
// prefetched buffer's bytes count where its load took them from).
//
// SourceGETs are the requests to an object store that brought the
// SourceBytes (every range of a split read and every try; 0 for a local
// source): what the epoch cost in requests, which stores bill.
type EpochStats struct {
	SourceBytes    int64 `json:"source_bytes"`
	SourceGETs     int64 `json:"source_gets,omitempty"`
	DiskCacheBytes int64 `json:"disk_cache_bytes"`
	MemoryBytes    int64 `json:"memory_bytes"`
	// WalkedBytes are bytes of blocks a record-chain walk had read whole
	// and the loader kept (walked.go): read from the source once, by the
	// walk (Stats.ProofBytes), not again.
	WalkedBytes int64 `json:"walked_bytes,omitempty"`
}

// diskTier is the loader's state for the disk cache and the counts per
// epoch.
type diskTier struct {
	disk           diskcache.Tier // nil: none
	sourceRequests atomic.Int64
	epochMu        sync.Mutex
	epochs         map[int]*EpochStats
}

// readCachedExtent serves extent e of b from the blocks a walk kept
// (walked.go) or the disk cache if either holds it, and reports whether it
// did; err is then the check of its bytes. A
// disk cache that reads into whole pages (diskcache.PageTier) gets the
// block's pages, where it is placed as for a direct read (placesPages).
func (l *Loader) readCachedExtent(b *Buf, e extent, check func(int64) error) (bool, error) {
	if l.takeWalked(e, b.Data[e.at:e.at+e.n]) {
		if err := check(e.n); err != nil {
			return true, err
		}
		l.addEpoch(b.unit.Epoch, EpochStats{WalkedBytes: e.n})
		if l.tier.disk != nil {
			// Bytes from the source, checked: as fetched offers them.
			l.tier.disk.OfferExtent(diskcache.Extent{File: e.file, Block: e.block, Off: e.off, Len: e.n}, b.unit.Epoch, b.Data[e.at:e.at+e.n])
		}
		return true, nil
	}
	if l.tier.disk == nil || e.block < 0 {
		return false, nil
	}
	de := diskcache.Extent{File: e.file, Block: e.block, Off: e.off, Len: e.n}
	var ok bool
	if pt, pages := l.tier.disk.(diskcache.PageTier); pages && l.placesPages() {
		lead := e.off - index.AlignDown(e.off)
		ok = pt.ReadExtentPages(de, b.Data[e.at-lead:e.at-lead+index.AlignUp(lead+e.n)])
	} else {
		ok = l.tier.disk.ReadExtent(de, b.Data[e.at:e.at+e.n])
	}
	if !ok {
		return false, nil
	}
	if err := check(e.n); err != nil {
		return true, err
	}
	l.addEpoch(b.unit.Epoch, EpochStats{DiskCacheBytes: e.n})
	return true, nil
}

// placesPages reports whether the loader places every block in pages of
// its own at its offset within a page of its file (placeBlock): for reads
// with O_DIRECT, from the source or from a disk cache that reads into
// pages.
func (l *Loader) placesPages() bool { return l.fetch.direct || pagesFor(l.ix, l.tier.disk) }

// pagesFor reports whether t, a loader's disk cache, reads the blocks of
// ix into pages: blocks of index.MinDirectBlock or more, as for direct
// reads from a local source; smaller ones would pay too many pages.
func pagesFor(ix *index.Index, t diskcache.Tier) bool {
	_, ok := t.(diskcache.PageTier)
	return ok && ix.BlockSize >= index.MinDirectBlock
}

// fetched counts a read of extent e of b from the source that made gets
// requests to a store and ended with err, and offers the bytes to the
// disk cache when they were read whole and checked.
func (l *Loader) fetched(b *Buf, e extent, gets int64, err error) {
	l.tier.sourceRequests.Add(1)
	if err != nil {
		l.addEpoch(b.unit.Epoch, EpochStats{SourceGETs: gets})
		return
	}
	l.addEpoch(b.unit.Epoch, EpochStats{SourceBytes: e.n, SourceGETs: gets})
	if l.tier.disk != nil {
		l.tier.disk.OfferExtent(diskcache.Extent{File: e.file, Block: e.block, Off: e.off, Len: e.n}, b.unit.Epoch, b.Data[e.at:e.at+e.n])
	}
}

// fromMemory counts the bytes of u, which a Get for epoch found loaded.
func (l *Loader) fromMemory(epoch int, u Unit) {
	var n int64
	if u.Records != nil {
		for _, r := range u.Records {
			n += int64(l.ix.Frames[r])
		}
	} else {
		for _, id := range u.Blocks {
			n += l.ix.Blocks[id].Len
		}
	}
	l.addEpoch(epoch, EpochStats{MemoryBytes: n})
}

// addEpoch adds d to the counters of epoch e.
func (l *Loader) addEpoch(e int, d EpochStats) {
	l.tier.epochMu.Lock()
	defer l.tier.epochMu.Unlock()
	if l.tier.epochs == nil {
		l.tier.epochs = map[int]*EpochStats{}
	}
	s := l.tier.epochs[e]
	if s == nil {
		s = &EpochStats{}
		l.tier.epochs[e] = s
	}
	s.SourceBytes += d.SourceBytes
	s.SourceGETs += d.SourceGETs
	s.DiskCacheBytes += d.DiskCacheBytes
	s.MemoryBytes += d.MemoryBytes
	s.WalkedBytes += d.WalkedBytes
}

// diskStats fills in the counters of the disk cache and of the epochs.
func (l *Loader) diskStats(s *Stats) {
	s.SourceRequests = l.tier.sourceRequests.Load()
	l.tier.epochMu.Lock()
	s.Epochs = make(map[int]EpochStats, len(l.tier.epochs))
	for e, v := range l.tier.epochs {
		s.Epochs[e] = *v
		s.Totals.SourceBytes += v.SourceBytes
		s.Totals.SourceGETs += v.SourceGETs
		s.Totals.DiskCacheBytes += v.DiskCacheBytes
		s.Totals.MemoryBytes += v.MemoryBytes
		s.Totals.WalkedBytes += v.WalkedBytes
	}
	l.tier.epochMu.Unlock()
	if l.tier.disk != nil {
		d := l.tier.disk.Stats()
		s.DiskCache = &d
	}
}
