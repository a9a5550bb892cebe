package blockcache

// Fetching: the reads of a unit's extents from the source, several at
// once, directly or through the page cache.

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/source"
)

// fetcher is the loader's means of reading from the source.
type fetcher struct {
	sem      chan struct{} // a slot per read in flight (LoaderOptions.InFlight)
	files    *filePool
	direct   bool        // read blocks directly when not cached
	noDirect atomic.Bool // the file system refused a direct read
	runBytes int64       // LoaderOptions.RunBytes; 0: never coalesce
	// decoders holds *zaccess.Decoder for compressed files, kept from
	// one extent to the next.
	decoders sync.Pool
}

// load reads the extents of b, several at once, and finds their records.
func (l *Loader) load(b *Buf) {
	start := time.Now()
	err := l.read(b)
	if err != nil {
		l.count.loadErrors.Add(1)
		l.log.Error("load failed", "err", err)
	} else {
		l.count.buffersLoaded.Add(1)
		l.log.Debug("buffer loaded", "bytes", len(b.Data), "extents", len(b.exts), "took", time.Since(start))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Under l.mu: a Get cancelled while it waited releases b, and Release
	// reads the error, while this load may be finishing.
	b.err = err
	if b.partial && err == nil {
		b.arr.complete.Store(true)
	}
	close(b.ready)
	if !b.partial {
		// After ready: a Begin woken by laid finds b loaded. A partial
		// Buf's was closed by read.
		close(b.laid)
	}
	if err != nil && b.refs == 0 && !b.dropped {
		// A failed prefetch that nobody holds: forget it, so that the
		// next Get reads again instead of returning a stale error.
		l.dropLocked(b)
	}
	// Get may be waiting for this Buf to become evictable.
	l.signalLocked()
}

func (l *Loader) read(b *Buf) error {
	b.exts, _ = l.extents(b.unit, b.exts[:0])
	exts := b.exts
	// Files are opened as the workers reach them, not all at once: a unit
	// may span more files than the process may open.
	files := l.newFileSet(b.unit.Records == nil && l.fetch.direct)
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
		// Every record has its place: a reader may take each extent's
		// records as soon as it arrives (arrival.go).
		b.arr.layOut(pos, len(exts))
		b.partial = true
		close(b.laid)
	}
	// A few workers, each issuing one pread at a time under the loader-wide
	// limit, keep the disk busy without a goroutine per record. A worker
	// checks what it read outside the limit, while the others read on.
	errs := make([]error, len(exts))
	var next atomic.Int64
	var wg sync.WaitGroup
	workers := cap(l.fetch.sem)
	if b.unit.Records == nil && !l.fetch.direct && index.IsLocal(l.src) {
		// Whole blocks through the page cache are long sequential reads
		// that the kernel's readahead keeps ahead of: a few workers do.
		// Direct reads, single records and remote GETs wait for the
		// device or the network, and gain from every read in flight.
		workers = min(workers, 4)
	}
	var order []int // the extents in the order they are read, if not theirs
	if own == nil && isOrder(b.unit.Order, len(exts)) {
		order = make([]int, len(exts))
		for k, i := range b.unit.Order {
			order[k] = int(i)
		}
	}
	if l.compressed(exts) {
		// Decompressing keeps a core busy: more workers than cores would
		// only hold more decoders.
		workers = min(workers, max(2, runtime.GOMAXPROCS(0)))
		if b.unit.Records != nil {
			order = decodeOrder(exts)
		} else {
			// A compressed file decodes on from the last access point:
			// in file order, not the reader's.
			order = nil
		}
	}
	// The extents in the groups they are read in: adjacent blocks of a
	// store that bills requests with one GET (runs.go), any other extent
	// with a read of its own.
	// Any other load reads its extents one by one in order, with no
	// table of groups (a load's allocations are bounded per buffer:
	// shuffler's TestStreamSequentialReadDoesNotAllocatePerRecord).
	var groups [][]int
	n := len(exts)
	if l.coalesces(b.unit, exts) {
		groups = runs(exts, order, true, l.fetch.runBytes)
		n = len(groups)
	}
	split := func(i int) *splitter {
		if own != nil {
			own[i] = splitter{l: l, b: b, e: exts[i], own: true}
			return &own[i]
		}
		return &splitter{l: l, b: b, e: exts[i], lo: pos[i], hi: pos[i+1]}
	}
	// What the walks after the reads will cross, and this load's blocks
	// among it, read first in large runs and kept (chain_ahead.go).
	if ids := l.unproven(exts); ids != nil {
		l.proof.aheadOfLoad(ids)
	}
	var failed atomic.Bool
	for range min(workers, n) {
		wg.Go(func() {
			var dc decoder // kept from extent to extent: it may decode on
			defer dc.put(l)
			for k := int(next.Add(1) - 1); k < n && !failed.Load(); k = int(next.Add(1) - 1) {
				if groups != nil && len(groups[k]) > 1 {
					g := groups[k]
					l.fetch.sem <- struct{}{}
					i, err := l.readRun(b, files, exts, g, split)
					<-l.fetch.sem
					if err != nil {
						errs[i] = err
						failed.Store(true)
					}
					continue
				}
				i := k
				switch {
				case groups != nil:
					i = groups[k][0]
				case order != nil:
					i = order[k]
				}
				// Built here, not by split: a splitter that does not
				// leave this goroutine stays off the heap (a load's
				// allocations are per buffer, not per block).
				sp := &splitter{l: l, b: b, e: exts[i], lo: pos[i], hi: pos[i+1]}
				if own != nil {
					own[i] = splitter{l: l, b: b, e: exts[i], own: true}
					sp = &own[i]
				}
				l.fetch.sem <- struct{}{}
				// The file under the read slot: a worker waiting for room
				// in the pool waits for workers that are reading.
				cached, err := l.readCachedExtent(b, exts[i], sp.filled)
				var gets int64 // the requests of a read from a store
				if cached {
					// served from the disk cache, and checked
				} else if l.ix.Files[exts[i].file].Access != nil {
					err = l.readCompressedExtent(files, dc.get(l), exts[i], b.Data, b.unit.Records != nil, sp.filled)
				} else {
					var f *poolFile
					f, err = files.acquire(exts[i].file, exts[i].off)
					if err == nil {
						gets, err = l.readExtent(f, exts[i], b.Data, b.unit.Records != nil, sp.filled)
						files.release(f)
					}
				}
				<-l.fetch.sem
				if !cached {
					l.fetched(b, exts[i], gets, err)
				}
				if err != nil {
					errs[i] = err
					failed.Store(true)
				} else if b.partial {
					b.arr.arrive(i)
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	if err := l.proveRead(exts); err != nil {
		return err
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

// isOrder reports whether order lists each of 0..n-1 once.
func isOrder(order []int32, n int) bool {
	if len(order) != n {
		return false
	}
	seen := make([]bool, n)
	for _, i := range order {
		if i < 0 || int(i) >= n || seen[i] {
			return false
		}
		seen[i] = true
	}
	return true
}

// proveRead proves the probed boundaries of the blocks of exts, read and
// tiled (their record chains are walked from a proven boundary): no block
// is served before they are (probe_proof.go). After the reads, not beside
// them: a walk jumps over every block that tiled from a proven start,
// those of this buffer too, so it reads only the gaps between this
// buffer's blocks and those loaded before. Beside the reads, it read the
// bytes of the buffer's own blocks a second time (issue 25: 8% of a
// 38 MB dataset in GETs that were not blocks', in its first epoch).
func (l *Loader) proveRead(exts []extent) error {
	ids := l.unproven(exts)
	if ids == nil {
		return nil
	}
	// Each file walked once, as far as this buffer needs, all at once:
	// a walk that reads ahead (chain_ahead.go) then sees the whole gap.
	l.proof.walkAll(ids)
	for _, id := range ids {
		if err := l.proof.prove(id, false); err != nil {
			return err
		}
	}
	return nil
}

// unproven returns the blocks of exts whose probed boundaries are still
// to be proven, or nil.
func (l *Loader) unproven(exts []extent) []int32 {
	if l.proof == nil {
		return nil
	}
	var ids []int32
	for _, e := range exts {
		if e.block >= 0 && e.records == 0 && !l.proof.ready(e.block) {
			ids = append(ids, e.block)
		}
	}
	return ids
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
// other (a remote object) with one ReadAt, one request (or, split, a
// few at once). It returns the requests a source.Requester made.
func (l *Loader) readExtent(f *poolFile, e extent, slab []byte, record bool, check func(int64) error) (int64, error) {
	dst := slab[e.at : e.at+e.n]
	pc, paged := f.File.(source.PageCached)
	if !paged {
		var gets int64
		var err error
		if rq, ok := f.File.(source.Requester); ok {
			_, gets, err = rq.ReadAtCounted(dst, e.off)
		} else {
			_, err = f.ReadAt(dst, e.off)
		}
		if err != nil {
			// A file no longer at its indexed version (source.ErrChanged:
			// a replaced object) does not mark the index stale: the next
			// Open sees the new version and, for a probed index, indexes
			// that file alone.
			if !errors.Is(err, syscall.EIO) {
				err = fmt.Errorf("%w: %w", err, syscall.EIO)
			}
			return gets, err
		}
		if err := check(e.n); err != nil {
			return gets, err
		}
		l.counted(e.n, record)
		return gets, nil
	}
	got := 0
	if d, ok := f.File.(source.DirectReader); ok && f.direct && !l.fetch.noDirect.Load() && pc.Uncached(e.off, e.n) {
		// Whole pages: the extent's first page sits at a page boundary of
		// the slab, and its pages are its own.
		from := index.AlignDown(e.off)
		win := slab[e.at-(e.off-from) : e.at-(e.off-from)+index.AlignUp(e.off+e.n)-from]
		n, err := d.ReadDirect(win, from)
		switch {
		case errors.Is(err, source.ErrNoDirect):
			l.fetch.noDirect.Store(true)
			l.log.Info("the file system refused a direct read; reading through the page cache from now on", "file", f.Name(), "err", err)
		case err != nil:
			return 0, fmt.Errorf("read %s at offset %d: %w", f.Name(), from, err)
		default:
			l.count.directBytes.Add(int64(n))
			got = int(min(e.n, max(0, from+int64(n)-e.off)))
		}
	}
	for got < len(dst) {
		want := min(len(dst), got+checkChunk)
		n, err := f.ReadAt(dst[got:want], e.off+int64(got))
		got += n
		if got < want {
			return 0, fmt.Errorf("read %s at offset %d: read %d of %d bytes: %w", f.Name(), e.off, got, len(dst), errors.Join(err, syscall.EIO))
		}
		if got < len(dst) {
			if err := check(int64(got)); err != nil {
				return 0, err
			}
		}
	}
	if err := check(e.n); err != nil {
		return 0, err
	}
	l.counted(e.n, record)
	return 0, nil
}
