package blockcache

// The loader's counters and their snapshot, Stats.

import (
	"sync/atomic"
	"time"

	"github.com/corgifs/corgifs/diskcache"
)

// counters are the loader's counts for Stats.
type counters struct {
	blocksRead, recordsRead                    atomic.Int64
	bytesRead, buffersLoaded                   atomic.Int64
	prefetchIssued, prefetchHits, prefetchSkip atomic.Int64
	cacheHits, stalls, stallNanos, memoryWaits atomic.Int64
	evictions, loadErrors, directBytes         atomic.Int64
	servedLoading                              atomic.Int64
}

// Stats are the loader's counters.
type Stats struct {
	BlocksRead      int64 `json:"blocks_read"`
	RecordsRead     int64 `json:"records_read"` // by strategies that read records one at a time
	BytesRead       int64 `json:"bytes_read"`
	DirectBytesRead int64 `json:"direct_bytes_read"` // with O_DIRECT, bypassing the page cache
	BuffersLoaded   int64 `json:"buffers_loaded"`
	// BuffersServedLoading counts the Bufs that Begin returned while
	// they were still loading (arrival.go): their readers were served the
	// records that had arrived. Only an index that knows every record
	// count of a buffer can (a full one, or a probed one whose counts an
	// earlier mount kept); 0 when every count is learned as blocks load.
	BuffersServedLoading int64   `json:"buffers_served_loading"`
	PrefetchIssued       int64   `json:"prefetch_issued"`
	PrefetchHits         int64   `json:"prefetch_hits"`
	PrefetchSkipped      int64   `json:"prefetch_skipped"` // not started for lack of memory
	CacheHits            int64   `json:"cache_hits"`
	Stalls               int64   `json:"stalls"` // a reader waited for a read
	StallSeconds         float64 `json:"stall_seconds"`
	MemoryWaits          int64   `json:"memory_waits"` // a reader waited for memory
	Evictions            int64   `json:"evictions"`
	LoadErrors           int64   `json:"load_errors"`
	MemoryInUse          int64   `json:"memory_in_use"`
	MemoryPeak           int64   `json:"memory_peak"`
	MemoryBudget         int64   `json:"memory_budget"`
	// MemoryMapped counts the fresh memory the slabs were given, which
	// the system must fault in and zero: far above MemoryPeak, it says
	// slabs are not recycled.
	MemoryMapped int64 `json:"memory_mapped"`
	// SourceRequests counts the reads of extents from the source: one
	// ranged GET each from a remote source (retries inside the client
	// aside), or a share of one for blocks adjacent in their object
	// (runs.go; Epochs counts the GETs), one or more preads from a
	// local one.
	SourceRequests int64 `json:"source_requests"`
	// Totals is the sum of Epochs: the bytes loaded from the source,
	// from the disk cache and found in memory.
	Totals EpochStats `json:"totals"`
	// Epochs splits the bytes loaded by the epoch of the unit they were
	// loaded for (see EpochStats).
	Epochs    map[int]EpochStats `json:"epochs"`
	DiskCache *diskcache.Stats   `json:"disk_cache,omitempty"`
	// BlocksLearned and RecordsLearned, for a probed index only (whose
	// record counts are learned as blocks load), are the blocks loaded so
	// far and the records they hold (Learned).
	BlocksLearned  *int64 `json:"blocks_learned,omitempty"`
	RecordsLearned *int64 `json:"records_learned,omitempty"`
	// ProofReads and ProofBytes are the reads (GETs of a remote object)
	// and bytes of the record-chain walks that prove a probed index's
	// boundaries (probe_proof.go): TFRecord and tar only.
	ProofReads int64 `json:"proof_reads,omitempty"`
	ProofBytes int64 `json:"proof_bytes,omitempty"`
	// WalkKeptBytes are the bytes of blocks those walks read whole and
	// the loader kept for the loads that hold them (walked.go); the
	// epochs' WalkedBytes say how many were used.
	WalkKeptBytes int64 `json:"walk_kept_bytes,omitempty"`
	// WalkTaken counts the blocks loads took from them instead of the
	// source: each is offered to the disk cache as a fetched block is,
	// beside the SourceRequests.
	WalkTaken int64 `json:"walk_taken,omitempty"`
}

// Learned returns how many blocks of a probed index have been loaded, so
// that their record counts are known, and the records they hold. For an
// index that knows every count, all of them.
func (l *Loader) Learned() (blocks int, records int64) {
	if l.learn.counts == nil {
		return len(l.ix.Blocks), l.ix.Records
	}
	return int(l.learn.blocks.Load()), l.learn.records.Load()
}

// Stats returns a snapshot of the counters.
func (l *Loader) Stats() Stats {
	l.mu.Lock()
	used, peak, mapped, kept, taken := l.mem.used, l.mem.peak, l.mem.mapped, l.walk.kept, l.walk.taken
	l.mu.Unlock()
	s := Stats{
		BlocksRead: l.count.blocksRead.Load(), RecordsRead: l.count.recordsRead.Load(), BytesRead: l.count.bytesRead.Load(), DirectBytesRead: l.count.directBytes.Load(), BuffersLoaded: l.count.buffersLoaded.Load(), BuffersServedLoading: l.count.servedLoading.Load(),
		PrefetchIssued: l.count.prefetchIssued.Load(), PrefetchHits: l.count.prefetchHits.Load(), PrefetchSkipped: l.count.prefetchSkip.Load(),
		CacheHits: l.count.cacheHits.Load(), Stalls: l.count.stalls.Load(), StallSeconds: time.Duration(l.count.stallNanos.Load()).Seconds(),
		MemoryWaits: l.count.memoryWaits.Load(), Evictions: l.count.evictions.Load(), LoadErrors: l.count.loadErrors.Load(),
		MemoryInUse: used, MemoryPeak: peak, MemoryBudget: l.mem.budget, MemoryMapped: mapped,
	}
	l.diskStats(&s)
	if l.learn.counts != nil {
		blocks, records := l.learn.blocks.Load(), l.learn.records.Load()
		s.BlocksLearned, s.RecordsLearned = &blocks, &records
	}
	if l.proof != nil {
		s.ProofReads, s.ProofBytes = l.proof.reads.Load(), l.proof.bytes.Load()
		s.WalkKeptBytes, s.WalkTaken = kept, taken
	}
	return s
}

// stalled counts a reader's wait for b.
func (l *Loader) stalled(b *Buf, d time.Duration, why string) {
	l.count.stalls.Add(1)
	l.count.stallNanos.Add(int64(d))
	l.log.Debug("a reader waited for a buffer", "why", why, "bytes", len(b.Data), "waited", d)
}

// counted counts a record or block of n bytes read from the source.
func (l *Loader) counted(n int64, record bool) {
	if record {
		l.count.recordsRead.Add(1)
	} else {
		l.count.blocksRead.Add(1)
	}
	l.count.bytesRead.Add(n)
}
