// Package blockcache turns the block ids of an index (package index) into
// bytes with large reads, a shared memory budget and prefetch (the
// loader), proves a probed index's boundaries before a block is served, and
// keeps the disk cache the loader reaches through DiskTier.
package blockcache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/slab"
	"github.com/corgifs/corgifs/source"
)

// Unit names what one Buf holds, in order: whole blocks, or single records
// (numbered as Index.Record numbers them), each read with its own pread.
// Exactly one of the two is set.
type Unit struct {
	Blocks  []int32
	Records []int32
	// Epoch is the epoch the unit is read for: the bytes it brings are
	// counted under it (Stats.Epochs). It is no part of the unit's
	// identity: epochs share loaded units.
	Epoch int
}

func (u Unit) ids() []int32 {
	if u.Records != nil {
		return u.Records
	}
	return u.Blocks
}

func (u Unit) equal(v Unit) bool {
	return (u.Records != nil) == (v.Records != nil) && slices.Equal(u.ids(), v.ids())
}

func (u Unit) clone() Unit {
	return Unit{Blocks: slices.Clone(u.Blocks), Records: slices.Clone(u.Records), Epoch: u.Epoch}
}

// extent is one pread: a byte range of a file holding whole records, and
// where its first byte lands in the slab.
type extent struct {
	file    int32
	block   int32 // its block, -1 for a single record
	records int32 // 0: not known yet (a probed index, see probe.go)
	off, n  int64 // the stored bytes read
	at      int64
	// tail is served after the stored bytes (Index.Tail): the slab
	// holds n+len(tail) bytes from at.
	tail []byte
	// crc is the CRC32C the stored bytes must have, when sum is set (a
	// format without checksums of its own).
	crc uint32
	sum bool
}

// extents appends the extents of u to exts, placed in the slab as Buf
// describes, and returns them with the slab size they need.
func (l *Loader) extents(u Unit, exts []extent) ([]extent, int64) {
	var at int64
	sum := l.ix.RecordCRCs != nil
	if u.Records != nil {
		for _, r := range u.Records {
			f, off, n := l.ix.Record(r)
			e := extent{file: f, block: -1, records: 1, off: off, n: n, at: at}
			if t := l.ix.Files[f].Head.Tail; len(t) > 0 && off+n == l.ix.Files[f].Head.End+int64(len(t)) {
				// The file's last record: Frames holds its served length.
				e.n, e.tail = n-int64(len(t)), t
			}
			if sum {
				e.crc, e.sum = l.ix.RecordCRCs[r], true
			}
			exts = append(exts, e)
			at += n
		}
		return exts, at
	}
	for _, id := range u.Blocks {
		blk := l.ix.Blocks[id]
		lead, span := l.placeBlock(blk)
		exts = append(exts, extent{file: blk.File, block: id, records: blk.Records, off: blk.Offset, n: blk.Len, at: at + lead,
			tail: l.ix.Tail(blk), crc: blk.CRC, sum: sum})
		at += span
	}
	return exts, at
}

// placeBlock returns where blk starts in its share of a slab, and the size
// of that share.
func (l *Loader) placeBlock(blk index.Block) (lead, span int64) {
	return placeBlock(blk, int64(len(l.ix.Tail(blk))), l.direct)
}

// placeBlock returns where blk, followed by tail bytes, starts in its
// share of a slab, and the size of that share. A block that may be read
// directly gets whole pages of its own: it starts at its offset within a
// page, and its share ends at a page boundary.
func placeBlock(blk index.Block, tail int64, direct bool) (lead, span int64) {
	if !direct {
		return 0, blk.Len + tail
	}
	lead = blk.Offset - index.AlignDown(blk.Offset)
	return lead, index.AlignUp(lead + blk.Len + tail)
}

// readsDirect reports whether a loader with options o reads the blocks of
// ix with O_DIRECT when they are not cached.
func readsDirect(ix *index.Index, o LoaderOptions) bool {
	return index.IsLocal(ix.Source()) && !o.Buffered && ix.BlockSize >= index.MinDirectBlock
}

// MinMemory returns the smallest LoaderOptions.MaxMemory with which a
// loader with options o can load every buffer of one block, or with
// records set every buffer of one record: the largest slab such a buffer
// takes, with the pages of a direct read for a block. Get refuses a buffer
// larger than the budget by the same measure.
func MinMemory(ix *index.Index, o LoaderOptions, records bool) int64 {
	var m int64
	if records {
		for _, n := range ix.Frames {
			m = max(m, int64(n))
		}
		return m
	}
	direct := readsDirect(ix, o)
	for _, blk := range ix.Blocks {
		_, span := placeBlock(blk, int64(len(ix.Tail(blk))), direct)
		m = max(m, span)
	}
	return m
}

// Buf holds the extents of one unit read into one slab, and where each
// record starts in it. Single records are packed back to back; blocks are
// placed so that each can be read with O_DIRECT: a block starts at the same
// offset within a page as in its file, and a block's pages are its own, so
// the bytes between blocks belong to no record. A Buf is shared: every Get
// must be paired with a Release.
type Buf struct {
	Data   []byte
	Starts []int64 // offset in Data of every record, in unit order

	// lens are the frame lengths, kept rather than read from the frame
	// headers: a shuffled walk over the headers misses the cache at
	// every record. The index keeps every frame under 4 GiB.
	lens  []uint32
	exts  []extent
	unit  Unit
	hash  uint64
	refs  int
	ready chan struct{}
	err   error
	// prefetched is set while a Buf loaded ahead of time waits for its first
	// user, so that the first Get counts as a prefetch hit.
	prefetched bool
	// links put the Buf into Loader's idle list while refs == 0; an
	// intrusive list, so that a Release allocates nothing.
	links[Buf]
	dropped bool // evicted: Data may belong to another Buf now
	// servers counts the users serving b to a reader (Serve, Pass), and
	// used is when b was last taken or given back (Loader.clock): see
	// serveGrace.
	servers int
	used    time.Duration
}

// RecordLen returns the frame length of record i.
func (b *Buf) RecordLen(i int) int64 { return int64(b.lens[i]) }

// Locate returns the source file and offset of the byte at offset at of
// Data, which must lie in a record.
func (b *Buf) Locate(at int64) (file int32, off int64) {
	i, found := slices.BinarySearchFunc(b.exts, at, func(e extent, at int64) int { return cmp.Compare(e.at, at) })
	if !found {
		i--
	}
	e := b.exts[i]
	return e.file, e.off + at - e.at
}

// Stats are the loader's counters.
type Stats struct {
	BlocksRead      int64   `json:"blocks_read"`
	RecordsRead     int64   `json:"records_read"` // by strategies that read records one at a time
	BytesRead       int64   `json:"bytes_read"`
	DirectBytesRead int64   `json:"direct_bytes_read"` // with O_DIRECT, bypassing the page cache
	BuffersLoaded   int64   `json:"buffers_loaded"`
	PrefetchIssued  int64   `json:"prefetch_issued"`
	PrefetchHits    int64   `json:"prefetch_hits"`
	PrefetchSkipped int64   `json:"prefetch_skipped"` // not started for lack of memory
	CacheHits       int64   `json:"cache_hits"`
	Stalls          int64   `json:"stalls"` // a reader waited for a read
	StallSeconds    float64 `json:"stall_seconds"`
	MemoryWaits     int64   `json:"memory_waits"` // a reader waited for memory
	Evictions       int64   `json:"evictions"`
	LoadErrors      int64   `json:"load_errors"`
	MemoryInUse     int64   `json:"memory_in_use"`
	MemoryPeak      int64   `json:"memory_peak"`
	MemoryBudget    int64   `json:"memory_budget"`
	// MemoryMapped counts the fresh memory the slabs were given, which
	// the system must fault in and zero: far above MemoryPeak, it says
	// slabs are not recycled.
	MemoryMapped int64 `json:"memory_mapped"`
	// SourceRequests counts the reads of extents from the source: one
	// ranged GET each from a remote source (retries inside the client
	// aside), one or more preads from a local one.
	SourceRequests int64 `json:"source_requests"`
	// Totals is the sum of Epochs: the bytes loaded from the source,
	// from the disk cache and found in memory.
	Totals EpochStats `json:"totals"`
	// Epochs splits the bytes loaded by the epoch of the unit they were
	// loaded for (see EpochStats).
	Epochs    map[int]EpochStats `json:"epochs"`
	DiskCache *DiskCacheStats    `json:"disk_cache,omitempty"`
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
}

// LoaderOptions configure a Loader.
type LoaderOptions struct {
	MaxMemory int64 // budget for all slabs, shared by every stream
	InFlight  int   // block reads in flight at once (default 32); a load of blocks that can only be read through the page cache uses 4
	Logger    *slog.Logger
	// DiskCache, if set, keeps the blocks read from the source on local
	// disk and serves them from there (see OpenDiskCache).
	DiskCache DiskTier
	// Buffered reads everything through the page cache. By default, with
	// blocks of at least MinDirectBlock, the parts of blocks that are not
	// cached are read with O_DIRECT.
	Buffered bool
	// OnDamage, if set, is called once, the first time a loaded block no
	// longer matches the index although its file kept its size and
	// modification time (damaged in place): the check of a cached index
	// cannot see that, so the CLI marks the sidecar stale with it.
	OnDamage func(reason string)
	// OnProbeWrong, if set, is called once for each file of a probed
	// index whose probed boundaries its record chain disproves (see
	// probe_proof.go): the CLI records it with MarkProbeWrong, so that the
	// next index scans that file whole. Without it, OnDamage is called.
	OnProbeWrong func(file index.File, reason string)
	// Proofs, if set, keeps the files whose probed boundaries were proven
	// across mounts, so that a remount does not walk them again.
	Proofs *index.ProofLog
	// MaxOpenFiles bounds the source descriptors open at once; by default
	// a quarter of the open-file limit, at most 1024.
	MaxOpenFiles int
	// Prefetch is how many buffers a stream loads ahead of the one it
	// serves: 0 means DefaultPrefetch, NoPrefetch none. Prefetches never
	// wait for memory, so a deep one only uses what is free.
	Prefetch int
}

// DefaultPrefetch is the buffers a stream loads ahead by default. With
// one, a reader that is served about as fast as the disk loads waits
// whenever a load runs a little slow; with two, the loader keeps working
// while the reader catches up.
const DefaultPrefetch = 2

// NoPrefetch as LoaderOptions.Prefetch turns prefetching off: a buffer
// is loaded when a reader reaches it.
const NoPrefetch = -1

// PrefetchDepth returns how many buffers a stream loads ahead of the one
// it serves (LoaderOptions.Prefetch), 0 for none.
func (l *Loader) PrefetchDepth() int { return l.prefetch }

// prefetchDepth is the depth LoaderOptions.Prefetch o asks for.
func prefetchDepth(o int) int {
	switch {
	case o == 0:
		return DefaultPrefetch
	case o < 0:
		return 0
	}
	return o
}

// Loader turns lists of block ids into loaded Bufs. All memory it hands out
// comes from one budget; when the budget is spent, idle Bufs are evicted
// (least recently used first, but not one another reader is being served
// from, see Serve) and, failing that, Get waits for a Release or a Pass.
// Prefetch never waits: it is skipped when memory is short. Source files
// are opened from a pool of bounded size (see filePool).
type Loader struct {
	ix     *index.Index
	src    source.Source // ix.Source()
	budget int64
	log    *slog.Logger
	seed   maphash.Seed

	onDamage   func(string)
	prefetch   int // buffers a stream loads ahead (PrefetchDepth)
	damageOnce sync.Once
	sem        chan struct{}
	files      *filePool
	tier       diskTier // the disk cache, and the bytes counted per epoch (loader_disk.go)

	start time.Time // of Loader.clock

	mu     sync.Mutex
	used   int64
	peak   int64
	mapped int64
	bufs   map[uint64][]*Buf
	// Bufs with refs == 0, least recently used at the front.
	idle    idleList[Buf]
	largest int64  // the largest reservation so far
	waiters int    // Gets waiting for memory
	free    []*Buf // evicted Bufs whose slabs can be reused
	changed chan struct{}

	blocksRead, recordsRead                    atomic.Int64
	bytesRead, buffersLoaded                   atomic.Int64
	prefetchIssued, prefetchHits, prefetchSkip atomic.Int64
	cacheHits, stalls, stallNanos, memoryWaits atomic.Int64
	evictions, loadErrors, directBytes         atomic.Int64
	// learned holds the record count of every block of a probed index,
	// once loaded (0 before), with the blocks and records learned so far.
	learned                       []atomic.Int32
	learnedBlocks, learnedRecords atomic.Int64
	direct                        bool        // read blocks directly when not cached
	noDirect                      atomic.Bool // the file system refused a direct read
	// decoders holds *zaccess.Decoder for compressed files, kept from
	// one extent to the next.
	decoders sync.Pool
	// proof proves the probed boundaries of formats whose probe an
	// embedded record can fool before a block is served (probe_proof.go).
	proof *prover
}

// NewLoader returns a Loader for the blocks of ix.
func NewLoader(ix *index.Index, o LoaderOptions) *Loader {
	if o.InFlight <= 0 {
		o.InFlight = 32
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxOpenFiles <= 0 {
		o.MaxOpenFiles = poolSize()
	}
	var learned []atomic.Int32
	if ix.CountsUnknown {
		learned = make([]atomic.Int32, len(ix.Blocks))
	}
	l := &Loader{
		ix: ix, src: ix.Source(), budget: o.MaxMemory, log: o.Logger, seed: maphash.MakeSeed(), onDamage: o.OnDamage, learned: learned,
		direct: readsDirect(ix, o),
		sem:    make(chan struct{}, o.InFlight),
		files:  newFilePool(o.MaxOpenFiles),
		start:  time.Now(),
		bufs:   make(map[uint64][]*Buf), changed: make(chan struct{}), prefetch: prefetchDepth(o.Prefetch),
		idle: newIdleList(func(b *Buf) *links[Buf] { return &b.links }),
		tier: diskTier{disk: o.DiskCache},
	}
	l.proof = newProver(ix, learned, o.Logger, o.Proofs, func(fi int32, reason string) {
		if o.OnProbeWrong != nil {
			o.OnProbeWrong(ix.Files[fi], reason)
		} else {
			l.damaged(errors.New(reason))
		}
	})
	return l
}

// Learned returns how many blocks of a probed index have been loaded, so
// that their record counts are known, and the records they hold. For an
// index that knows every count, all of them.
func (l *Loader) Learned() (blocks int, records int64) {
	if l.learned == nil {
		return len(l.ix.Blocks), l.ix.Records
	}
	return int(l.learnedBlocks.Load()), l.learnedRecords.Load()
}

// Stats returns a snapshot of the counters.
func (l *Loader) Stats() Stats {
	l.mu.Lock()
	used, peak, mapped := l.used, l.peak, l.mapped
	l.mu.Unlock()
	s := Stats{
		BlocksRead: l.blocksRead.Load(), RecordsRead: l.recordsRead.Load(), BytesRead: l.bytesRead.Load(), DirectBytesRead: l.directBytes.Load(), BuffersLoaded: l.buffersLoaded.Load(),
		PrefetchIssued: l.prefetchIssued.Load(), PrefetchHits: l.prefetchHits.Load(), PrefetchSkipped: l.prefetchSkip.Load(),
		CacheHits: l.cacheHits.Load(), Stalls: l.stalls.Load(), StallSeconds: time.Duration(l.stallNanos.Load()).Seconds(),
		MemoryWaits: l.memoryWaits.Load(), Evictions: l.evictions.Load(), LoadErrors: l.loadErrors.Load(),
		MemoryInUse: used, MemoryPeak: peak, MemoryBudget: l.budget, MemoryMapped: mapped,
	}
	l.diskStats(&s)
	if l.learned != nil {
		blocks, records := l.learnedBlocks.Load(), l.learnedRecords.Load()
		s.BlocksLearned, s.RecordsLearned = &blocks, &records
	}
	if l.proof != nil {
		s.ProofReads, s.ProofBytes = l.proof.reads.Load(), l.proof.bytes.Load()
	}
	return s
}

// size returns the slab size u needs.
func (l *Loader) size(u Unit) int64 {
	var n int64
	if u.Records != nil {
		for _, r := range u.Records {
			n += int64(l.ix.Frames[r])
		}
		return n
	}
	for _, id := range u.Blocks {
		_, span := l.placeBlock(l.ix.Blocks[id])
		n += span
	}
	return n
}

func (l *Loader) hash(u Unit) uint64 {
	var h maphash.Hash
	h.SetSeed(l.seed)
	maphash.WriteComparable(&h, u.Records != nil)
	for _, id := range u.ids() {
		maphash.WriteComparable(&h, id)
	}
	return h.Sum64()
}

// lookup finds the Buf for u. l.mu must be held.
func (l *Loader) lookup(h uint64, u Unit) *Buf {
	for _, b := range l.bufs[h] {
		if b.unit.equal(u) {
			return b
		}
	}
	return nil
}

// Get returns the Buf holding u, reading it unless it is loaded or being
// loaded already. It waits for memory when the budget is spent.
func (l *Loader) Get(ctx context.Context, u Unit) (*Buf, error) {
	h := l.hash(u)
	n := l.size(u)
	if n > l.budget {
		return nil, fmt.Errorf("a buffer of %d bytes does not fit in the memory budget of %d bytes", n, l.budget)
	}
	l.mu.Lock()
	for {
		if b := l.lookup(h, u); b != nil {
			l.acquire(b, u.Epoch)
			l.mu.Unlock()
			return l.wait(ctx, b)
		}
		if b := l.reserve(n, true); b != nil {
			b.unit, b.hash, b.refs, b.used = u.clone(), h, 1, l.clock()
			l.bufs[h] = append(l.bufs[h], b)
			l.mu.Unlock()
			start := time.Now()
			l.load(b)
			l.stalled(b, time.Since(start), "not prefetched")
			return l.wait(ctx, b)
		}
		l.memoryWaits.Add(1)
		ch := l.changed
		l.waiters++
		l.mu.Unlock()
		// Woken by a release, or once the Bufs other readers are serving
		// may have outlived their grace.
		t := time.NewTimer(serveGrace / 4)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			l.mu.Lock()
			l.waiters--
			l.mu.Unlock()
			return nil, ctx.Err()
		}
		t.Stop()
		l.mu.Lock()
		l.waiters--
	}
}

// acquire takes a reference to a Buf found in the table. l.mu must be held.
func (l *Loader) acquire(b *Buf, epoch int) {
	l.idle.remove(b)
	b.refs++
	b.used = l.clock()
	if b.prefetched {
		b.prefetched = false
		l.prefetchHits.Add(1)
	} else {
		l.cacheHits.Add(1)
		l.fromMemory(epoch, b.unit)
	}
}

// Reacquire takes a new reference to a Buf that its user released earlier,
// if it has not been evicted since. A user that holds a Buf only while it
// reads from it leaves the memory of idle readers to the budget, so an open
// file nobody reads cannot starve the others.
func (l *Loader) Reacquire(b *Buf) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b.dropped {
		return false
	}
	l.idle.remove(b)
	b.refs++
	b.used = l.clock()
	return true
}

// wait waits for b to be loaded; on failure it drops the reference.
func (l *Loader) wait(ctx context.Context, b *Buf) (*Buf, error) {
	select {
	case <-b.ready:
	default:
		start := time.Now()
		select {
		case <-b.ready:
		case <-ctx.Done():
			l.Release(b)
			return nil, ctx.Err()
		}
		l.stalled(b, time.Since(start), "still loading")
	}
	if b.err != nil {
		err := b.err
		l.Release(b)
		return nil, err
	}
	return b, nil
}

// stalled counts a reader's wait for b.
func (l *Loader) stalled(b *Buf, d time.Duration, why string) {
	l.stalls.Add(1)
	l.stallNanos.Add(int64(d))
	l.log.Debug("a reader waited for a buffer", "why", why, "bytes", len(b.Data), "waited", d)
}

// Prefetch loads units in the background, one after the other, each only
// once the one before is loaded: the nearest is wanted first, and loads
// that share the disk would all finish late. A unit already loaded or
// loading is passed over; the rest are skipped as soon as one finds no
// memory free without waiting or evicting another prefetch, or once ctx is
// done. The first unit is in the table when Prefetch returns, so a Get right
// after finds it.
func (l *Loader) Prefetch(ctx context.Context, units ...Unit) {
	if len(units) == 0 {
		return
	}
	b, ready := l.startPrefetch(units[0])
	if ready == nil {
		return
	}
	go func() {
		for _, u := range units[1:] {
			if b != nil {
				l.load(b)
			} else {
				<-ready
			}
			if ctx.Err() != nil {
				return // nobody wants the rest any more
			}
			if b, ready = l.startPrefetch(u); ready == nil {
				return
			}
		}
		if b != nil {
			l.load(b)
		}
	}()
}

// startPrefetch enters u in the table for the caller to load, and returns
// it with the channel closed when it is loaded. If u is in the table
// already, the Buf is nil and the channel that of the Buf there; if there
// is no memory for it, both are nil.
func (l *Loader) startPrefetch(u Unit) (*Buf, <-chan struct{}) {
	h := l.hash(u)
	n := l.size(u)
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.lookup(h, u); b != nil {
		return nil, b.ready
	}
	var b *Buf
	if l.waiters == 0 {
		// Readers waiting for memory come first: a prefetch would take
		// what one of them waits for.
		b = l.reserve(n, false)
	}
	if b == nil {
		l.prefetchSkip.Add(1)
		return nil, nil
	}
	b.unit, b.hash, b.prefetched = u.clone(), h, true
	l.bufs[h] = append(l.bufs[h], b)
	l.idle.push(b) // evictable, but only after older idle Bufs
	l.prefetchIssued.Add(1)
	return b, b.ready
}

// Forget tells the loader that the prefetched units nobody has taken yet
// are no longer wanted, as when a reader closes its file midway: they stay
// cached, but as the least of the idle Bufs, and a later prefetch may take
// their memory. Without it they would hold memory no prefetch may claim.
func (l *Loader) Forget(units ...Unit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range units {
		if b := l.lookup(l.hash(u), u); b != nil && b.refs == 0 && b.prefetched {
			b.prefetched = false
		}
	}
	l.signal()
}

// serveGrace is how long a Buf that a user serves to a reader is kept
// from other users' loads after its last use. Readers that share a short
// budget then take turns: one that waits for memory waits for another to
// finish its buffer rather than evicting the buffer that reader is in,
// which it would only load again, evicting another's (8 readers with a
// budget of two buffers read each byte 6 times). A reader that holds its
// file open without reading gives its buffer up after this long, so a
// waiting read always proceeds.
const serveGrace = time.Second

// clock returns the time since the loader was made.
func (l *Loader) clock() time.Duration { return time.Since(l.start) }

// protected reports whether b is kept from loads that need memory. l.mu
// must be held.
func (l *Loader) protected(b *Buf, now time.Duration) bool {
	return b.servers > 0 && now-b.used < serveGrace
}

// Serve tells the loader that the caller, which holds b, serves it to a
// reader that goes on reading it: other loads leave b alone until the
// caller passes it, or stops using it for serveGrace. Each Serve is paired
// with a Pass.
func (l *Loader) Serve(b *Buf) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b.servers++
	b.used = l.clock()
}

// Pass tells the loader that the caller has moved on from b, which it
// served: b stays cached, but other loads may take its memory.
func (l *Loader) Pass(b *Buf) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b.servers > 0 {
		b.servers--
		if b.servers == 0 {
			l.signal()
		}
	}
}

// Release drops a reference taken by Get.
func (l *Loader) Release(b *Buf) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b.refs--
	b.used = l.clock()
	if b.refs > 0 {
		return
	}
	if b.err != nil {
		l.drop(b)
	} else {
		l.idle.push(b)
	}
	l.signal()
}

// signal wakes the Gets waiting for memory. l.mu must be held.
func (l *Loader) signal() {
	if l.waiters == 0 {
		return
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// drop removes b from the table and keeps its slab for reuse. l.mu must be held.
func (l *Loader) drop(b *Buf) {
	list := l.bufs[b.hash]
	i := slices.Index(list, b)
	list = slices.Delete(list, i, i+1)
	if len(list) == 0 {
		delete(l.bufs, b.hash)
	} else {
		l.bufs[b.hash] = list
	}
	l.idle.remove(b)
	b.dropped = true
	l.free = append(l.free, &Buf{Data: b.Data[:0], Starts: b.Starts[:0], lens: b.lens[:0], exts: b.exts[:0]})
}

// reserve returns a new Buf with room for n bytes, reusing a free slab when
// one is large enough, and evicting idle Bufs if evict is set. It returns nil
// when the budget cannot be met. l.mu must be held.
func (l *Loader) reserve(n int64, evict bool) *Buf {
	if b := l.reuse(n); b != nil {
		return b
	}
	// Recycle the slab of the least recently used idle Buf that fits, even
	// with budget to spare: fresh memory costs page faults and zeroing on
	// every load, and a sequential reader never goes back that far. Not a
	// prefetched Buf, which a reader is about to need, and not the two a
	// reader released last: its current buffer, released between reads,
	// and the one before, as the kernel's readahead sends its last
	// requests for a buffer after the first ones for the next. Recycling
	// that one costs a load, whose Get then evicts a prefetched Buf, which
	// costs another.
	// Failing that, when a new slab fits in the budget anyway, retire the
	// oldest such Buf whose slab is too small, so that the new slab
	// replaces it instead of adding to it.
	var keep [2]*Buf
	for v, i := l.idle.tail, 0; v != nil && i < len(keep); v = v.prev {
		if !v.prefetched {
			keep[i] = v
			i++
		}
	}
	now := l.clock()
	var small *Buf
	for v := l.idle.head; v != nil; v = v.next {
		if v != keep[0] && v != keep[1] && !v.prefetched && isReady(v) && !l.protected(v, now) {
			if int64(cap(v.Data)) >= n {
				l.evictions.Add(1)
				l.drop(v)
				return l.reuse(n)
			}
			if small == nil {
				small = v
			}
		}
	}
	if small != nil && l.used+n <= l.budget {
		l.evictions.Add(1)
		l.drop(small)
		if b := l.regrow(n); b != nil {
			return b
		}
		l.unmapLastFree()
	}
	// Evict nothing unless the reservation then succeeds: a prefetch that is
	// skipped anyway, or a Get that waits anyway, must not throw away
	// cached Bufs.
	if l.used+n > l.budget && !l.canFree(l.used+n-l.budget, evict, now) {
		return nil
	}
	for l.used+n > l.budget {
		if len(l.free) > 0 {
			l.unmapLastFree()
			continue
		}
		victim := l.nextVictim(nil, evict, now)
		if victim == nil {
			return nil
		}
		l.evictions.Add(1)
		l.drop(victim)
		if b := l.reuse(n); b != nil {
			return b // the victim's slab is large enough
		}
		if l.used+n-int64(cap(l.free[len(l.free)-1].Data)) <= l.budget {
			if b := l.regrow(n); b != nil {
				return b
			}
		}
		l.unmapLastFree()
	}
	// Slabs as large as the largest buffer asked for so far can be
	// recycled for any later buffer (buffers of a part differ by up to a
	// block); but the double buffer must still fit.
	l.largest = max(l.largest, n)
	c := n
	if m := l.largest; l.used+2*m <= l.budget {
		c = m
	}
	mem, err := slab.Map(c)
	if err != nil {
		l.log.Error("out of memory for a slab", "err", err)
		return nil
	}
	l.used += int64(cap(mem))
	l.mapped += int64(cap(mem))
	l.peak = max(l.peak, l.used)
	return l.ready(&Buf{Data: mem[:0]}, n)
}

// regrow makes the last free slab, the one just dropped, n bytes long and
// returns it, or nil if the system refuses. The slab keeps its pages, so
// only the added ones are faulted in and zeroed, where a new slab would
// need all of them: a buffer is often a block larger than the one before.
// l.mu must be held.
func (l *Loader) regrow(n int64) *Buf {
	f := l.free[len(l.free)-1]
	mem, err := slab.Grow(f.Data, n)
	if err != nil {
		l.log.Debug("could not grow a slab", "from", cap(f.Data), "to", n, "err", err)
		return nil
	}
	l.free = l.free[:len(l.free)-1]
	l.used += int64(cap(mem)) - int64(cap(f.Data))
	l.mapped += int64(cap(mem)) - int64(cap(f.Data))
	l.peak = max(l.peak, l.used)
	f.Data = mem[:0]
	return l.ready(f, n)
}

// unmapLastFree gives the last free slab back to the system. l.mu must be
// held.
func (l *Loader) unmapLastFree() {
	f := l.free[len(l.free)-1]
	l.free = l.free[:len(l.free)-1]
	l.used -= int64(cap(f.Data))
	slab.Unmap(f.Data)
}

func isReady(b *Buf) bool {
	select {
	case <-b.ready:
		return true
	default:
		return false
	}
}

// canFree reports whether reserve can free need bytes: the free slabs,
// then the idle Bufs nextVictim yields. l.mu must be held.
func (l *Loader) canFree(need int64, evict bool, now time.Duration) bool {
	for _, f := range l.free {
		need -= int64(cap(f.Data))
	}
	for v := l.nextVictim(nil, evict, now); need > 0 && v != nil; v = l.nextVictim(v, evict, now) {
		need -= int64(cap(v.Data))
	}
	return need <= 0
}

// nextVictim returns the idle Buf after from (from the front if from is
// nil) that a load may evict, least recently used first: one that is
// loaded and that no reader is in (see serveGrace). A prefetch (evict
// unset) evicts nothing newer than a Buf prefetched for a reader. l.mu
// must be held.
func (l *Loader) nextVictim(from *Buf, evict bool, now time.Duration) *Buf {
	v := l.idle.head
	if from != nil {
		v = from.next
	}
	for ; v != nil; v = v.next {
		if !evict && v.prefetched {
			return nil
		}
		if isReady(v) && !l.protected(v, now) {
			return v
		}
	}
	return nil
}

// reuse returns a Buf on the smallest free slab of at least n bytes, the
// one that wastes least, or nil. l.mu must be held.
func (l *Loader) reuse(n int64) *Buf {
	best := -1
	for i, f := range l.free {
		if int64(cap(f.Data)) >= n && (best < 0 || cap(f.Data) < cap(l.free[best].Data)) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	b := l.free[best]
	l.free = slices.Delete(l.free, best, best+1)
	return l.ready(b, n)
}

func (l *Loader) ready(b *Buf, n int64) *Buf {
	b.Data = b.Data[:n]
	b.ready = make(chan struct{})
	return b
}

// load reads the extents of b, several at once, and finds their records.
func (l *Loader) load(b *Buf) {
	start := time.Now()
	err := l.read(b)
	if err != nil {
		l.loadErrors.Add(1)
		l.log.Error("load failed", "err", err)
	} else {
		l.buffersLoaded.Add(1)
		l.log.Debug("buffer loaded", "bytes", len(b.Data), "extents", len(b.exts), "took", time.Since(start))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Under l.mu: a Get cancelled while it waited releases b, and Release
	// reads the error, while this load may be finishing.
	b.err = err
	close(b.ready)
	if err != nil && b.refs == 0 && !b.dropped {
		// A failed prefetch that nobody holds: forget it, so that the
		// next Get reads again instead of returning a stale error.
		l.drop(b)
	}
	// Get may be waiting for this Buf to become evictable.
	l.signal()
}

func (l *Loader) read(b *Buf) error {
	b.exts, _ = l.extents(b.unit, b.exts[:0])
	exts := b.exts
	// Files are opened as the workers reach them, not all at once: a unit
	// may span more files than the process may open.
	files := l.newFileSet(b.unit.Records == nil && l.direct)
	defer files.close()
	// Every extent's records have their place in Starts, from the index's
	// counts, so that each can be split as soon as it is read. When a
	// count is not known (a probed index), each extent is split into
	// tables of its own, put together once all are read.
	pos := make([]int, len(exts)+1)
	var own []splitter
	for i, e := range exts {
		pos[i+1] = pos[i] + int(e.records)
		if e.records == 0 && own == nil {
			own = make([]splitter, len(exts))
		}
	}
	if own == nil {
		b.Starts = slices.Grow(b.Starts[:0], pos[len(exts)])[:pos[len(exts)]]
		b.lens = slices.Grow(b.lens[:0], pos[len(exts)])[:pos[len(exts)]]
	}
	// A few workers, each issuing one pread at a time under the loader-wide
	// limit, keep the disk busy without a goroutine per record. A worker
	// checks what it read outside the limit, while the others read on.
	errs := make([]error, len(exts))
	var next atomic.Int64
	var wg sync.WaitGroup
	workers := cap(l.sem)
	if b.unit.Records == nil && !l.direct && index.IsLocal(l.src) {
		// Whole blocks through the page cache are long sequential reads
		// that the kernel's readahead keeps ahead of: a few workers do.
		// Direct reads, single records and remote GETs wait for the
		// device or the network, and gain from every read in flight.
		workers = min(workers, 4)
	}
	var order []int // the extents in the order they are read, if not theirs
	if l.compressed(exts) {
		// Decompressing keeps a core busy: more workers than cores would
		// only hold more decoders.
		workers = min(workers, max(2, runtime.GOMAXPROCS(0)))
		if b.unit.Records != nil {
			order = decodeOrder(exts)
		}
	}
	// The probed boundaries of the blocks are proven alongside their reads
	// (their record chains are walked from a proven boundary): no block is
	// served before they are (probe_proof.go).
	var proofs []error
	var pwg sync.WaitGroup
	if l.proof != nil {
		for i, e := range exts {
			if e.block >= 0 && e.records == 0 && !l.proof.ready(e.block) {
				if proofs == nil {
					proofs = make([]error, len(exts))
				}
				pwg.Go(func() { proofs[i] = l.proof.prove(e.block, false) })
			}
		}
	}
	var failed atomic.Bool
	for range min(workers, len(exts)) {
		wg.Go(func() {
			var dc decoder // kept from extent to extent: it may decode on
			defer dc.put(l)
			for k := int(next.Add(1) - 1); k < len(exts) && !failed.Load(); k = int(next.Add(1) - 1) {
				i := k
				if order != nil {
					i = order[k]
				}
				sp := &splitter{l: l, b: b, e: exts[i], lo: pos[i], hi: pos[i+1]}
				if own != nil {
					own[i] = splitter{l: l, b: b, e: exts[i], own: true}
					sp = &own[i]
				}
				l.sem <- struct{}{}
				// The file under the read slot: a worker waiting for room
				// in the pool waits for workers that are reading.
				cached, err := l.readCachedExtent(b, exts[i], sp.filled)
				if cached {
					// served from the disk cache, and checked
				} else if l.ix.Files[exts[i].file].Access != nil {
					err = l.readCompressedExtent(files, dc.get(l), exts[i], b.Data, b.unit.Records != nil, sp.filled)
				} else {
					var f *poolFile
					f, err = files.acquire(exts[i].file, exts[i].off)
					if err == nil {
						err = l.readExtent(f, exts[i], b.Data, b.unit.Records != nil, sp.filled)
						files.release(f)
					}
				}
				<-l.sem
				if !cached {
					l.fetched(b, exts[i], err)
				}
				if err != nil {
					errs[i] = err
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	pwg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	for _, err := range proofs {
		if err != nil {
			return err
		}
	}
	if own != nil {
		n := 0
		for i := range own {
			n += len(own[i].starts)
		}
		b.Starts, b.lens = slices.Grow(b.Starts[:0], n), slices.Grow(b.lens[:0], n)
		for i := range own {
			b.Starts = append(b.Starts, own[i].starts...)
			b.lens = append(b.lens, own[i].lens...)
		}
	}
	return nil
}

// splitter finds the records of extent e, loaded into b, and fills their
// entries lo to hi of b.Starts and b.lens, checking every CRC on the way.
// It is fed as the extent's bytes arrive.
type splitter struct {
	l      *Loader
	b      *Buf
	e      extent
	lo, hi int
	// own is set when the extent's record count is not known: starts
	// and lens are then its own, not b's.
	own    bool
	starts []int64
	lens   []uint32
	done   int64  // the bytes of the extent split so far
	summed int64  // the stored bytes added to crc so far
	crc    uint32 // of the stored bytes, for formats without checksums
}

// filled checks the records that lie whole in the first n bytes of the
// extent; at the last call, n is the extent's length.
func (sp *splitter) filled(n int64) error {
	l, b, e := sp.l, sp.b, sp.e
	if sp.starts == nil && !sp.own {
		// Capped at hi: more records than the index says cannot spill
		// into the next extent's entries.
		sp.starts = b.Starts[sp.lo:sp.lo:sp.hi]
	}
	f := l.ix.Fmt()
	if e.sum {
		sp.crc = formats.UpdateChecksum(sp.crc, b.Data[e.at+sp.summed:e.at+n])
		sp.summed = n
		if n == e.n && sp.crc != e.crc {
			err := fmt.Errorf("%s at offset %d: the %d bytes there no longer have the checksum the index took (CRC32C %08x, now %08x): the source changed since indexing, or rots; remount to reindex: %w",
				l.ix.Path(e.file), e.off, e.n, e.crc, sp.crc, syscall.EIO)
			l.damaged(err)
			return err
		}
	}
	span := e.n + int64(len(e.tail))
	filled := n
	if n == e.n {
		copy(b.Data[e.at+e.n:e.at+span], e.tail)
		filled = span
	}
	var err error
	sp.starts, sp.done, err = f.SplitFilled(l.ix.Files[e.file].Head, b.Data[e.at:e.at+span], filled, sp.done, e.off, sp.starts)
	if err != nil {
		if l.proof != nil && e.block >= 0 && e.records == 0 {
			// A block that does not tile: if one of its cuts is false,
			// say so (and have the file scanned whole next time).
			if perr := l.proof.prove(e.block, true); perr != nil {
				return perr
			}
		}
		if l.ix.Probed {
			err = fmt.Errorf("%s: %w; %s: %w", l.ix.Path(e.file), err, probeHint, syscall.EIO)
		} else {
			err = fmt.Errorf("%s: %w; the source changed since indexing, or its index sidecar is wrong: remount to reindex: %w", l.ix.Path(e.file), err, syscall.EIO)
		}
		l.damaged(err)
		return err
	}
	if n < e.n {
		return nil
	}
	if sp.own {
		return sp.learn(span)
	}
	if len(sp.starts) != sp.hi-sp.lo {
		err := fmt.Errorf("%s at offset %d: %d records, index says %d; remount to reindex: %w", l.ix.Path(e.file), e.off, len(sp.starts), sp.hi-sp.lo, syscall.EIO)
		l.damaged(err)
		return err
	}
	end := e.at + span
	for j := sp.hi - 1; j >= sp.lo; j-- {
		b.Starts[j] += e.at
		b.lens[j] = uint32(end - b.Starts[j])
		end = b.Starts[j]
	}
	return nil
}

// probeHint says what to do when a block of a probed index does not split
// into whole records: the probe may have taken bytes inside a record for a
// record start (a payload that embeds whole records).
const probeHint = "the records of this block of a probed index do not tile it (the probe may have cut inside a record, or the source changed): run `corgifs index --index full` on the source and mount with --index full"

// learn checks the records of an extent whose count the index does not
// know against the count learned when it was loaded before, if any, and
// learns it; then it fills the extent's own tables.
func (sp *splitter) learn(span int64) error {
	l, e := sp.l, sp.e
	n := len(sp.starts)
	if err := tooManyLearned(l.ix, e, sp.starts); err != nil {
		return err
	}
	if e.records > 0 && n != int(e.records) {
		err := fmt.Errorf("%s at offset %d: %d records, index says %d; %s: %w", l.ix.Path(e.file), e.off, n, e.records, probeHint, syscall.EIO)
		l.damaged(err)
		return err
	}
	if e.block >= 0 && l.learned != nil {
		if old := l.learned[e.block].Load(); old != 0 && int(old) != n {
			err := fmt.Errorf("%s at offset %d: %d records, %d when it was loaded before; the source changed: %w", l.ix.Path(e.file), e.off, n, old, syscall.EIO)
			l.damaged(err)
			return err
		} else if old == 0 && l.learned[e.block].CompareAndSwap(0, int32(n)) {
			l.learnedBlocks.Add(1)
			l.learnedRecords.Add(int64(n))
		}
	}
	sp.lens = make([]uint32, n)
	end := e.at + span
	for j := n - 1; j >= 0; j-- {
		sp.starts[j] += e.at
		sp.lens[j] = uint32(end - sp.starts[j])
		end = sp.starts[j]
	}
	return nil
}

// damaged reports a block that no longer matches the index to OnDamage.
func (l *Loader) damaged(err error) {
	if l.onDamage != nil {
		l.damageOnce.Do(func() { l.onDamage(err.Error()) })
	}
}

// checkChunk is how much of an extent is read through the page cache
// before its records are checked: small enough that the bytes are still in
// the CPU's cache when their CRCs are computed, large enough that the
// preads cost little.
const checkChunk = 512 << 10

// readExtent reads extent e into its place in slab, and calls check with
// the bytes read so far, last with all of them. A file in the page cache
// (source.PageCached: a local one) is read a chunk at a time, each checked
// while in the CPU's cache, and directly from the disk where most of the
// extent is not cached and the file allows it (source.DirectReader); any
// other (a remote object) with one ReadAt, one request.
func (l *Loader) readExtent(f *poolFile, e extent, slab []byte, record bool, check func(int64) error) error {
	dst := slab[e.at : e.at+e.n]
	pc, paged := f.File.(source.PageCached)
	if !paged {
		if _, err := f.ReadAt(dst, e.off); err != nil {
			// A file no longer at its indexed version (source.ErrChanged:
			// a replaced object) does not mark the index stale: the next
			// Open sees the new version and, for a probed index, indexes
			// that file alone.
			if !errors.Is(err, syscall.EIO) {
				err = fmt.Errorf("%w: %w", err, syscall.EIO)
			}
			return err
		}
		if err := check(e.n); err != nil {
			return err
		}
		l.counted(e.n, record)
		return nil
	}
	got := 0
	if d, ok := f.File.(source.DirectReader); ok && f.direct && !l.noDirect.Load() && pc.Uncached(e.off, e.n) {
		// Whole pages: the extent's first page sits at a page boundary of
		// the slab, and its pages are its own.
		from := index.AlignDown(e.off)
		win := slab[e.at-(e.off-from) : e.at-(e.off-from)+index.AlignUp(e.off+e.n)-from]
		n, err := d.ReadDirect(win, from)
		switch {
		case errors.Is(err, source.ErrNoDirect):
			l.noDirect.Store(true)
			l.log.Info("the file system refused a direct read; reading through the page cache from now on", "file", f.Name(), "err", err)
		case err != nil:
			return fmt.Errorf("read %s at offset %d: %w", f.Name(), from, err)
		default:
			l.directBytes.Add(int64(n))
			got = int(min(e.n, max(0, from+int64(n)-e.off)))
		}
	}
	for got < len(dst) {
		want := min(len(dst), got+checkChunk)
		n, err := f.ReadAt(dst[got:want], e.off+int64(got))
		got += n
		if got < want {
			return fmt.Errorf("read %s at offset %d: read %d of %d bytes: %w", f.Name(), e.off, got, len(dst), errors.Join(err, syscall.EIO))
		}
		if got < len(dst) {
			if err := check(int64(got)); err != nil {
				return err
			}
		}
	}
	if err := check(e.n); err != nil {
		return err
	}
	l.counted(e.n, record)
	return nil
}

// counted counts a record or block of n bytes read from the source.
func (l *Loader) counted(n int64, record bool) {
	if record {
		l.recordsRead.Add(1)
	} else {
		l.blocksRead.Add(1)
	}
	l.bytesRead.Add(n)
}
