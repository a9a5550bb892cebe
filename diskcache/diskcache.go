// Package diskcache keeps the blocks a loader read from a slow or remote
// source on local disk, so that later epochs and later mounts read them
// from there (Cache). The loader (package blockcache) reaches it through
// Tier, by Extent, and never sees its entries; it depends on the index
// alone, whose block checksums it checks every entry against.
package diskcache

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/cachedir"
)

// The disk cache keeps blocks read from a slow or remote source on local
// disk, one file per block, so that later epochs and later mounts read
// them from there. An entry is named by a hash of its key: the source's
// identity, the file's path and version (an object's ETag; a local file's
// size, modification time, device, inode and change time) and the block's
// byte range, so a changed file never meets an entry of its old bytes. The
// key is also stored in the entry and compared, so that neither a hash
// collision nor a file renamed into the directory is served as another
// block. And every entry read is checked against the CRC32C that the index
// took of the block when it scanned the source (checkBlock): an entry of
// other bytes under a key that did not change is a miss.
//
// An entry is
//
//	magic   8 bytes "corgidc2"
//	crc     4 bytes, CRC32C of the data (little endian)
//	keylen  4 bytes
//	datalen 8 bytes
//	lead    4 bytes
//	key     keylen bytes
//	zeros   up to a page boundary, and lead more (paged entries only)
//	data    datalen bytes
//
// and is written as a new file renamed into place (cacheDir.write). A torn,
// truncated or rotten entry fails its length or CRC check when read; it is
// then removed, logged and the block read from the source again.
//
// An entry of a block of at least half index.MinDirectBlock is paged
// (layout): its data sits at the same offset within a page (lead) as the
// block in its source file, where a loader of such blocks places it in its
// slab (blockcache's placeBlock), so that a cold entry is read with
// O_DIRECT, header and data in one preadv, straight into the block's own
// pages (ReadExtentPages). Read through the page cache, as the first format
// ("corgidc1": the data right after the key) was, a cold entry cost the
// kernel three times the CPU (page-cache pages allocated, then copied:
// issue 25's profile, 85% pread) and ran at a third of the speed
// (BenchmarkColdEntries). An entry found mostly in the page cache (just
// written) is still copied from there. A smaller block's entry is compact
// (lead 0, no padding): a page of padding would double it. Entries of the
// first format are never read: names are hashed with the magic (nameOf),
// so theirs name no block of this format; they are evicted before any
// other (no plan reads them) and their blocks cached again.
//
// Entries are written by a few goroutines from copies of the loaded bytes,
// so a load does not wait for each write. The copies waiting are bounded
// (Options.MaxQueued); a block that finds the queue full waits
// for room, at most Options.MaxWait, and only then is not cached
// (counted in write_skipped, the first one logged with the reason). Without
// the wait, a burst of loads (--s3-concurrency GETs finishing together,
// more bytes than the queue) lost blocks even on a disk much faster than
// the source: issue 25 measured 89 of 538 blocks of a first epoch not
// cached, and the next mount fetched them again. A write that fails (a
// full file system, a directory that cannot be written) stops all further
// writes with one log line: the entries already kept are still served.

const (
	diskMagic     = "corgidc2"
	diskHeader    = 28  // the fixed fields, before the key
	diskEntryName = "b" // + 32 hex digits
	// DefaultQueue bounds the memory of the block copies waiting to
	// be written to the disk cache.
	DefaultQueue = 64 << 20
	// diskWriters write entries at once: one alone falls behind a source
	// that serves hundreds of MB/s.
	diskWriters = 4
	// DefaultWait is how long a load waits for room in the write
	// queue before it leaves its block uncached: a disk that cannot
	// write MaxQueued bytes in that time is slower than the source, and
	// waiting longer would only slow the epoch to the disk's speed.
	DefaultWait = 5 * time.Second
)

// Options configure a Cache.
type Options struct {
	Dir string
	// MaxBytes bounds the bytes of the entries (headers included). If 0,
	// Percent of the space free in Dir's file system when the cache is
	// opened, counting the space of the entries it holds as free.
	MaxBytes int64
	Percent  float64
	// NextUse says when each block is read next, for eviction by
	// Belady's rule; nil evicts the least recently used entry.
	NextUse NextUse
	// MaxQueued bounds the bytes of block copies waiting to be written
	// (DefaultQueue if 0); a block larger than that is still taken
	// when nothing waits.
	MaxQueued int64
	// MaxWait is how long a load waits for room in a full queue before
	// its block is not cached (DefaultWait if 0; negative: never).
	MaxWait time.Duration
	Logger  *slog.Logger
}

// Stats are the disk cache's counters, in stats.json.
type Stats struct {
	Dir      string `json:"dir"`
	Hits     int64  `json:"hits"`
	HitBytes int64  `json:"hit_bytes"`
	Misses   int64  `json:"misses"`
	// DirectBytes are the HitBytes read with O_DIRECT, around the page
	// cache (the rest were copied from it, or from a copy waiting to be
	// written).
	DirectBytes int64 `json:"direct_bytes"`
	Written     int64 `json:"written"`
	// WriteSkipped are the blocks not cached because the write queue
	// stayed full for MaxWait (the disk slower than the source), or a
	// copy of the block could not be mapped; the first is logged.
	WriteSkipped int64 `json:"write_skipped"`
	// WriteWaitSeconds is the time loads waited for room in the write
	// queue: the cost of caching every block of an epoch.
	WriteWaitSeconds float64 `json:"write_wait_seconds"`
	NotAdmitted      int64   `json:"not_admitted"` // read again later than every entry kept
	Evictions        int64   `json:"evictions"`
	Damaged          int64   `json:"damaged"` // entries dropped for a bad length or checksum
	// Mismatched counts the entries dropped, though intact, because their
	// bytes are not those the index checksummed (checkBlock).
	Mismatched int64 `json:"mismatched"`
	Entries    int   `json:"entries"`
	BytesHeld  int64 `json:"bytes_held"`
	PeakHeld   int64 `json:"peak_bytes_held"`
	MaxBytes   int64 `json:"max_bytes"`
	// Disabled says why the cache stopped writing, if it did.
	Disabled string `json:"disabled,omitempty"`
}

// Cache is the disk tier between a loader (blockcache.Loader) and its source. Its
// methods are safe for concurrent use; Close stops its writer.
type Cache struct {
	ix   *index.Index
	dir  *cachedir.Dir // nil: disabled from the start
	path string
	max  int64
	nu   NextUse
	log  *slog.Logger
	src  string // the source's identity, the first field of every key

	// evict serializes reservations of room (reserve), which rank the
	// entries without holding mu.
	evict sync.Mutex
	// mu guards the fields below and those of queue; the methods named
	// …Locked must be called with it held.
	mu      sync.Mutex
	entries map[diskName]*diskEntry
	tick    int64 // of diskEntry.used
	held    int64
	peak    int64
	offWhy  string // writes stopped, and why
	closed  bool
	queue   writeQueue
	count   counters
	// hdrs are the aligned buffers of headers read with O_DIRECT;
	// noDirect is set once the file system refused such a read.
	hdrs     headers
	noDirect atomic.Bool
}

// writeQueue holds the copies of blocks waiting for the writers
// (write.go). Guarded by Cache.mu, but for waited.
type writeQueue struct {
	// pending are the copies queued and not yet written: a block read
	// again meanwhile (the next epoch's first buffers are prefetched
	// while the last ones of this epoch are written) is copied from there.
	pending map[diskName]*pendingCopy
	queued  int64
	jobs    []diskJob  // queued copies, oldest first
	work    *sync.Cond // on Cache.mu: a job was queued, or the cache closed
	room    chan struct{}
	done    chan struct{} // closed when the writers have stopped
	maxWait int64         // bytes queued at most
	waitFor time.Duration // for room in the queue, at most
	waited  atomic.Int64  // nanoseconds loads waited for room
}

// counters are the cache's counts for Stats.
type counters struct {
	hits, hitBytes, directBytes, misses, written, skipped, notAdmitted, evictions, damaged, mismatched atomic.Int64
	// mismatchLogged: the first entry of other bytes is logged, the
	// rest only counted; skipLogged likewise for skipped writes.
	mismatchLogged, skipLogged atomic.Bool
}

type diskName [16]byte

func (n diskName) String() string { return diskEntryName + hex.EncodeToString(n[:]) }

// pendingCopy is a queued copy that readers may copy from; the last of
// the writer and its readers to let go unmaps it.
type pendingCopy struct {
	data    []byte
	readers int
	written bool
}

type diskEntry struct {
	block int32 // in the index, -1 if none
	size  int64 // of the file
	used  int64 // Cache.tick when last read or written
}

// diskJob is a block waiting to be written: a copy of its bytes outside
// the Go heap, released after the write.
type diskJob struct {
	name  diskName
	key   []byte
	ext   Extent
	epoch int
	data  []byte
	copy  *pendingCopy
}

// Open opens (creating it with mode 0700) the disk cache in
// o.Dir for the blocks of ix, and takes stock of the entries there. A
// directory that another user owns or that others may write is refused
// with an error wrapping ErrUnsafeCacheDir; any other failure to open it
// gives a cache that caches nothing, with one log line.
func Open(ix *index.Index, o Options) (*Cache, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxQueued <= 0 {
		o.MaxQueued = DefaultQueue
	}
	switch {
	case o.MaxWait == 0:
		o.MaxWait = DefaultWait
	case o.MaxWait < 0:
		o.MaxWait = 0
	}
	c := &Cache{ix: ix, path: o.Dir, nu: o.NextUse, log: o.Logger, src: sourceIdentity(ix),
		entries: map[diskName]*diskEntry{},
		queue: writeQueue{pending: map[diskName]*pendingCopy{}, maxWait: o.MaxQueued, waitFor: o.MaxWait,
			room: make(chan struct{}), done: make(chan struct{})}}
	c.queue.work = sync.NewCond(&c.mu)
	root := ""
	if index.IsLocal(ix.Source()) {
		root = ix.Root
	}
	path, err := cachedir.Resolve(o.Dir, root)
	if err != nil {
		// Inside the source: corgifs never writes there.
		return nil, fmt.Errorf("{disk-cache} %s: %w", o.Dir, err)
	}
	c.path = path
	c.dir, err = cachedir.OpenPath(path)
	if errors.Is(err, index.ErrUnsafeCacheDir) {
		return nil, fmt.Errorf("{disk-cache}: %w", err)
	}
	if err != nil {
		c.dir = nil
		c.offWhy = err.Error()
		c.log.Warn("disk cache disabled: its directory cannot be used; blocks are read from the source every time", "dir", o.Dir, "err", err)
		close(c.queue.done)
		return c, nil
	}
	c.scan()
	c.max = o.MaxBytes
	if c.max <= 0 {
		free, err := freeSpace(c.path)
		if err != nil {
			c.dir.Close()
			return nil, fmt.Errorf("{disk-cache-size} %g%%: the free space of %s: %w (give a size such as 20GiB)", o.Percent, c.path, err)
		}
		c.max = int64(float64(free+c.held) * o.Percent / 100)
	}
	c.reserve(-1, 0, 0)
	c.mu.Lock()
	c.peak = c.held
	c.mu.Unlock()
	var wg sync.WaitGroup
	for range diskWriters {
		wg.Go(c.writer)
	}
	go func() { wg.Wait(); close(c.queue.done) }()
	c.log.Info("disk cache", "dir", c.path, "entries", len(c.entries), "bytes_held", c.held, "max_bytes", c.max)
	return c, nil
}

// sourceIdentity names the source of ix in the keys: its ID for a remote
// source, the absolute root for a local one.
func sourceIdentity(ix *index.Index) string {
	if !index.IsLocal(ix.Source()) {
		return "remote:" + ix.Source().ID()
	}
	return "local:" + ix.Root
}

// Close stops the writer; blocks still queued are not written, so that
// an unmount never waits for the cache's disk.
func (c *Cache) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.closed || c.dir == nil {
		c.closed = true
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.queue.work.Broadcast()
	close(c.queue.room)
	c.queue.room = make(chan struct{})
	c.mu.Unlock()
	<-c.queue.done
	return c.dir.Close()
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Dir: c.path, Hits: c.count.hits.Load(), HitBytes: c.count.hitBytes.Load(), Misses: c.count.misses.Load(), DirectBytes: c.count.directBytes.Load(),
		Written: c.count.written.Load(), WriteSkipped: c.count.skipped.Load(), WriteWaitSeconds: time.Duration(c.queue.waited.Load()).Seconds(), NotAdmitted: c.count.notAdmitted.Load(), Evictions: c.count.evictions.Load(),
		Damaged: c.count.damaged.Load(), Mismatched: c.count.mismatched.Load(), Entries: len(c.entries), BytesHeld: c.held, PeakHeld: c.peak, MaxBytes: c.max, Disabled: c.offWhy}
}
