package blockcache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/formats"
)

// Buf holds the blocks of one buffer read back to back into one slab, and
// where each record starts in it. A Buf is shared: every Get must be paired
// with a Release.
type Buf struct {
	Data   []byte
	Starts []int64 // offset in Data of every record, in source order

	blocks []int32
	hash   uint64
	refs   int
	ready  chan struct{}
	err    error
	// prefetched is set while a Buf loaded ahead of time waits for its first
	// user, so that the first Get counts as a prefetch hit.
	prefetched bool
	elem       *list.Element // in Loader.idle while refs == 0
	dropped    bool          // evicted: Data may belong to another Buf now
}

// RecordLen returns the frame length of record i.
func (b *Buf) RecordLen(i int) int64 {
	if i+1 < len(b.Starts) {
		return b.Starts[i+1] - b.Starts[i]
	}
	return int64(len(b.Data)) - b.Starts[i]
}

// Stats are the loader's counters.
type Stats struct {
	BlocksRead      int64   `json:"blocks_read"`
	BytesRead       int64   `json:"bytes_read"`
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
}

// LoaderOptions configure a Loader.
type LoaderOptions struct {
	MaxMemory int64 // budget for all slabs, shared by every stream
	InFlight  int   // block reads in flight at once
	Logger    *slog.Logger
}

// Loader turns lists of block ids into loaded Bufs. All memory it hands out
// comes from one budget; when the budget is spent, idle Bufs are evicted
// (least recently used first) and, failing that, Get waits for a Release.
// Prefetch never waits: it is skipped when memory is short.
type Loader struct {
	ix     *Index
	budget int64
	log    *slog.Logger
	seed   maphash.Seed
	sem    chan struct{}

	mu      sync.Mutex
	used    int64
	peak    int64
	bufs    map[uint64][]*Buf
	idle    *list.List // Bufs with refs == 0, least recently used at the front
	free    []*Buf     // evicted Bufs whose slabs can be reused
	changed chan struct{}

	blocksRead, bytesRead, buffersLoaded       atomic.Int64
	prefetchIssued, prefetchHits, prefetchSkip atomic.Int64
	cacheHits, stalls, stallNanos, memoryWaits atomic.Int64
	evictions, loadErrors                      atomic.Int64
}

// NewLoader returns a Loader for the blocks of ix.
func NewLoader(ix *Index, o LoaderOptions) *Loader {
	if o.InFlight <= 0 {
		o.InFlight = 4
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Loader{
		ix: ix, budget: o.MaxMemory, log: o.Logger, seed: maphash.MakeSeed(),
		sem:  make(chan struct{}, o.InFlight),
		bufs: make(map[uint64][]*Buf), idle: list.New(), changed: make(chan struct{}),
	}
}

// Stats returns a snapshot of the counters.
func (l *Loader) Stats() Stats {
	l.mu.Lock()
	used, peak := l.used, l.peak
	l.mu.Unlock()
	return Stats{
		BlocksRead: l.blocksRead.Load(), BytesRead: l.bytesRead.Load(), BuffersLoaded: l.buffersLoaded.Load(),
		PrefetchIssued: l.prefetchIssued.Load(), PrefetchHits: l.prefetchHits.Load(), PrefetchSkipped: l.prefetchSkip.Load(),
		CacheHits: l.cacheHits.Load(), Stalls: l.stalls.Load(), StallSeconds: time.Duration(l.stallNanos.Load()).Seconds(),
		MemoryWaits: l.memoryWaits.Load(), Evictions: l.evictions.Load(), LoadErrors: l.loadErrors.Load(),
		MemoryInUse: used, MemoryPeak: peak, MemoryBudget: l.budget,
	}
}

func (l *Loader) size(blocks []int32) int64 {
	var n int64
	for _, b := range blocks {
		n += l.ix.Blocks[b].Len
	}
	return n
}

func (l *Loader) hash(blocks []int32) uint64 {
	var h maphash.Hash
	h.SetSeed(l.seed)
	for _, b := range blocks {
		maphash.WriteComparable(&h, b)
	}
	return h.Sum64()
}

// lookup finds the Buf for blocks. l.mu must be held.
func (l *Loader) lookup(h uint64, blocks []int32) *Buf {
	for _, b := range l.bufs[h] {
		if slices.Equal(b.blocks, blocks) {
			return b
		}
	}
	return nil
}

// Get returns the Buf holding blocks, reading them unless they are loaded or
// being loaded already. It waits for memory when the budget is spent.
func (l *Loader) Get(ctx context.Context, blocks []int32) (*Buf, error) {
	h := l.hash(blocks)
	n := l.size(blocks)
	if n > l.budget {
		return nil, fmt.Errorf("a buffer of %d bytes does not fit in the memory budget of %d bytes", n, l.budget)
	}
	l.mu.Lock()
	for {
		if b := l.lookup(h, blocks); b != nil {
			l.acquire(b)
			l.mu.Unlock()
			return l.wait(ctx, b)
		}
		if b := l.reserve(n, true); b != nil {
			b.blocks, b.hash, b.refs = slices.Clone(blocks), h, 1
			l.bufs[h] = append(l.bufs[h], b)
			l.mu.Unlock()
			start := time.Now()
			l.load(b)
			l.stalls.Add(1)
			l.stallNanos.Add(int64(time.Since(start)))
			return l.wait(ctx, b)
		}
		l.memoryWaits.Add(1)
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		l.mu.Lock()
	}
}

// acquire takes a reference to a Buf found in the table. l.mu must be held.
func (l *Loader) acquire(b *Buf) {
	if b.elem != nil {
		l.idle.Remove(b.elem)
		b.elem = nil
	}
	b.refs++
	if b.prefetched {
		b.prefetched = false
		l.prefetchHits.Add(1)
	} else {
		l.cacheHits.Add(1)
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
	if b.elem != nil {
		l.idle.Remove(b.elem)
		b.elem = nil
	}
	b.refs++
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
		l.stalls.Add(1)
		l.stallNanos.Add(int64(time.Since(start)))
	}
	if b.err != nil {
		err := b.err
		l.Release(b)
		return nil, err
	}
	return b, nil
}

// Prefetch starts loading blocks in the background if they are not loaded
// and memory is free without waiting or evicting another prefetch.
func (l *Loader) Prefetch(blocks []int32) {
	h := l.hash(blocks)
	n := l.size(blocks)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lookup(h, blocks) != nil {
		return
	}
	b := l.reserve(n, false)
	if b == nil {
		l.prefetchSkip.Add(1)
		return
	}
	b.blocks, b.hash, b.prefetched = slices.Clone(blocks), h, true
	l.bufs[h] = append(l.bufs[h], b)
	b.elem = l.idle.PushBack(b) // evictable, but only after older idle Bufs
	l.prefetchIssued.Add(1)
	go l.load(b)
}

// Release drops a reference taken by Get.
func (l *Loader) Release(b *Buf) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b.refs--
	if b.refs > 0 {
		return
	}
	if b.err != nil {
		l.drop(b)
	} else {
		b.elem = l.idle.PushBack(b)
	}
	l.signal()
}

func (l *Loader) signal() {
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
	if b.elem != nil {
		l.idle.Remove(b.elem)
		b.elem = nil
	}
	b.dropped = true
	l.free = append(l.free, &Buf{Data: b.Data[:0], Starts: b.Starts[:0]})
}

// reserve returns a new Buf with room for n bytes, reusing a free slab when
// one is large enough, and evicting idle Bufs if evict is set. It returns nil
// when the budget cannot be met. l.mu must be held.
func (l *Loader) reserve(n int64, evict bool) *Buf {
	// The smallest free slab that fits wastes the least.
	best := -1
	for i, f := range l.free {
		if int64(cap(f.Data)) >= n && (best < 0 || cap(f.Data) < cap(l.free[best].Data)) {
			best = i
		}
	}
	if best >= 0 {
		b := l.free[best]
		l.free = slices.Delete(l.free, best, best+1)
		return l.ready(b, n)
	}
	for l.used+n > l.budget {
		if len(l.free) > 0 {
			f := l.free[len(l.free)-1]
			l.free = l.free[:len(l.free)-1]
			l.used -= int64(cap(f.Data))
			continue
		}
		e := l.idle.Front()
		if e == nil || !evict && e.Value.(*Buf).prefetched {
			return nil
		}
		victim := e.Value.(*Buf)
		select {
		case <-victim.ready:
		default:
			return nil // still loading; cannot evict
		}
		l.evictions.Add(1)
		l.drop(victim)
		f := l.free[len(l.free)-1]
		l.free = l.free[:len(l.free)-1]
		l.used -= int64(cap(f.Data))
	}
	l.used += n
	l.peak = max(l.peak, l.used)
	return l.ready(&Buf{Data: make([]byte, 0, n)}, n)
}

func (l *Loader) ready(b *Buf, n int64) *Buf {
	b.Data = b.Data[:n]
	b.ready = make(chan struct{})
	return b
}

// load reads the blocks of b, several at once, and finds their records.
func (l *Loader) load(b *Buf) {
	defer func() {
		close(b.ready)
		// Get may be waiting for this Buf to become evictable.
		l.mu.Lock()
		l.signal()
		l.mu.Unlock()
	}()
	offs := make([]int64, len(b.blocks)+1)
	for i, id := range b.blocks {
		offs[i+1] = offs[i] + l.ix.Blocks[id].Len
	}
	errs := make([]error, len(b.blocks))
	var wg sync.WaitGroup
	for i, id := range b.blocks {
		l.sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-l.sem }()
			errs[i] = l.readBlock(id, b.Data[offs[i]:offs[i+1]])
		})
	}
	wg.Wait()
	b.Starts = b.Starts[:0]
	for i, id := range b.blocks {
		if errs[i] == nil {
			errs[i] = l.split(b, id, offs[i])
		}
		if errs[i] != nil {
			b.err = errs[i]
			l.loadErrors.Add(1)
			l.log.Error("block load failed", "err", b.err)
			return
		}
	}
	l.buffersLoaded.Add(1)
}

// readBlock reads one block with one pread, after checking that its file is
// the one that was indexed.
func (l *Loader) readBlock(id int32, dst []byte) error {
	blk := l.ix.Blocks[id]
	path := l.ix.Path(blk.File)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read block %d of %s: %w (the source changed since indexing; remount to reindex)", id, path, err)
	}
	defer f.Close()
	want := l.ix.Files[blk.File]
	if fi, err := f.Stat(); err == nil && (fi.Size() != want.Size || fi.ModTime().UnixNano() != want.Mtime) {
		return fmt.Errorf("read block %d of %s at offset %d: file changed since indexing (size %d, was %d); remount to reindex: %w",
			id, path, blk.Offset, fi.Size(), want.Size, syscall.ESTALE)
	}
	n, err := f.ReadAt(dst, blk.Offset)
	if n < len(dst) {
		return fmt.Errorf("read block %d of %s at offset %d: read %d of %d bytes: %w", id, path, blk.Offset, n, len(dst), errors.Join(err, syscall.EIO))
	}
	l.blocksRead.Add(1)
	l.bytesRead.Add(int64(n))
	return nil
}

// split records where each record of block id starts, checking both CRCs.
func (l *Loader) split(b *Buf, id int32, at int64) error {
	blk := l.ix.Blocks[id]
	before := len(b.Starts)
	starts, err := formats.Split(b.Data[at:at+blk.Len], blk.Offset, b.Starts)
	if err != nil {
		return fmt.Errorf("block %d of %s: %w; the source changed since indexing, remount to reindex", id, l.ix.Path(blk.File), err)
	}
	for i := before; i < len(starts); i++ {
		starts[i] += at
	}
	b.Starts = starts
	if got := len(starts) - before; got != int(blk.Records) {
		return fmt.Errorf("block %d of %s at offset %d: %d records, index says %d; remount to reindex", id, l.ix.Path(blk.File), blk.Offset, got, blk.Records)
	}
	return nil
}
