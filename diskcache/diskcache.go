// Package diskcache keeps the blocks a loader read from a slow or remote
// source on local disk, so that later epochs and later mounts read them
// from there (Cache). The loader (package blockcache) reaches it through
// Tier, by Extent, and never sees its entries; it depends on the index
// alone, whose block checksums it checks every entry against.
package diskcache

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/cachedir"
	"github.com/corgifs/corgifs/internal/slab"
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
//	magic   8 bytes "corgidc1"
//	crc     4 bytes, CRC32C of the data (little endian)
//	keylen  4 bytes
//	datalen 8 bytes
//	key     keylen bytes
//	data    datalen bytes
//
// and is written as a new file renamed into place (cacheDir.write). A torn,
// truncated or rotten entry fails its length or CRC check when read; it is
// then removed, logged and the block read from the source again.
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
	diskMagic     = "corgidc1"
	diskHeader    = 24
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
	Written  int64  `json:"written"`
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

// Cache is the disk tier between a Loader and its source. Its
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
	evict   sync.Mutex
	mu      sync.Mutex
	entries map[diskName]*diskEntry
	// pending are the copies queued and not yet written: a block read
	// again meanwhile (the next epoch's first buffers are prefetched
	// while the last ones of this epoch are written) is copied from there.
	pending map[diskName]*pendingCopy
	tick    int64 // of diskEntry.used
	held    int64
	peak    int64
	offWhy  string // writes stopped, and why
	queued  int64
	closed  bool
	jobs    []diskJob  // queued copies, oldest first
	work    *sync.Cond // on mu: a job was queued, or the cache closed
	room    chan struct{}
	done    chan struct{}
	maxWait int64         // bytes queued at most
	waitFor time.Duration // for room in the queue, at most
	waited  atomic.Int64  // nanoseconds loads waited for room

	hits, hitBytes, misses, written, skipped, notAdmitted, evictions, damaged, mismatched atomic.Int64
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
	block int32
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
		entries: map[diskName]*diskEntry{}, pending: map[diskName]*pendingCopy{}, maxWait: o.MaxQueued, waitFor: o.MaxWait,
		room: make(chan struct{}), done: make(chan struct{})}
	c.work = sync.NewCond(&c.mu)
	root := ""
	if index.IsLocal(ix.Source()) {
		root = ix.Root
	}
	path, err := cachedir.Resolve(o.Dir, root)
	if err != nil {
		// Inside the source: corgifs never writes there.
		return nil, fmt.Errorf("--disk-cache %s: %w", o.Dir, err)
	}
	c.path = path
	c.dir, err = cachedir.OpenPath(path)
	if errors.Is(err, index.ErrUnsafeCacheDir) {
		return nil, fmt.Errorf("--disk-cache: %w", err)
	}
	if err != nil {
		c.dir = nil
		c.offWhy = err.Error()
		c.log.Warn("disk cache disabled: its directory cannot be used; blocks are read from the source every time", "dir", o.Dir, "err", err)
		close(c.done)
		return c, nil
	}
	c.scan()
	c.max = o.MaxBytes
	if c.max <= 0 {
		free, err := freeSpace(c.path)
		if err != nil {
			c.dir.Close()
			return nil, fmt.Errorf("--disk-cache-size %g%%: the free space of %s: %w (give a size such as 20GiB)", o.Percent, c.path, err)
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
	go func() { wg.Wait(); close(c.done) }()
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

// key returns the key of the stored bytes of extent e.
func (c *Cache) key(e Extent) []byte {
	f := &c.ix.Files[e.File]
	k := make([]byte, 0, 64+len(c.src)+len(f.Path)+len(f.Version))
	k = append(k, c.src...)
	k = append(k, 0)
	k = append(k, f.Path...)
	k = append(k, 0)
	// A local file's version holds its device, inode and change time
	// besides size and mtime: a dataset rewritten with sizes and mtimes
	// put back gets keys of its own.
	k = append(k, f.Version...)
	for _, v := range []int64{f.Size, f.Mtime, e.Off, e.Len} {
		k = append(k, 0)
		k = strconv.AppendInt(k, v, 10)
	}
	return k
}

func nameOf(key []byte) diskName {
	h := fnv.New128a()
	h.Write(key)
	var n diskName
	h.Sum(n[:0])
	return n
}

// scan takes stock of the entries in the directory, removes the temporary
// files of writes that never finished, and finds the blocks of the index
// the entries hold.
func (c *Cache) scan() {
	des, err := os.ReadDir(c.path)
	if err != nil {
		c.log.Warn("disk cache: cannot list its directory; starting empty", "dir", c.path, "err", err)
		return
	}
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, "."+diskEntryName) && strings.HasSuffix(name, ".tmp") {
			c.dir.Remove(name)
			continue
		}
		var n diskName
		if len(name) != len(diskEntryName)+32 || !strings.HasPrefix(name, diskEntryName) {
			continue
		}
		if _, err := hex.Decode(n[:], []byte(name[len(diskEntryName):])); err != nil {
			continue
		}
		fi, err := de.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		// Older entries first for LRU: their modification times say when
		// they were written.
		c.entries[n] = &diskEntry{block: -1, size: fi.Size(), used: fi.ModTime().UnixNano()}
		c.held += fi.Size()
	}
	// Renumber the times in order, so that new uses rank after them.
	var ents []*diskEntry
	for _, e := range c.entries {
		ents = append(ents, e)
	}
	sortByUsed(ents)
	for i, e := range ents {
		e.used = int64(i)
	}
	c.tick = int64(len(ents))
	if len(c.entries) == 0 {
		return
	}
	for id, blk := range c.ix.Blocks {
		if e := c.entries[nameOf(c.key(Extent{File: blk.File, Off: blk.Offset, Len: blk.Len}))]; e != nil {
			e.block = int32(id)
		}
	}
}

// read fills dst with the bytes of extent e from the cache and reports
// whether it did: false if there is no entry, or if the entry was damaged
// (it is then removed, with a log line).
func (c *Cache) read(e Extent, dst []byte) bool {
	if c == nil || c.dir == nil {
		return false
	}
	key := c.key(e)
	name := nameOf(key)
	c.mu.Lock()
	if c.closed {
		// Loads may outlive the mount by a moment; the directory's
		// descriptor is closed.
		c.mu.Unlock()
		return false
	}
	if p := c.pending[name]; p != nil && len(p.data) == len(dst) {
		p.readers++
		c.mu.Unlock()
		copy(dst, p.data)
		c.mu.Lock()
		p.readers--
		c.unmapDoneLocked(p)
		c.mu.Unlock()
		c.hits.Add(1)
		c.hitBytes.Add(e.Len)
		return true
	}
	ent := c.entries[name]
	if ent != nil {
		c.tick++
		ent.used = c.tick
	}
	c.mu.Unlock()
	if ent == nil {
		c.misses.Add(1)
		return false
	}
	crc, why := c.readEntry(name, key, dst)
	if why != "" {
		c.misses.Add(1)
		if why == entryGone {
			// Removed by someone else, such as another mount sharing
			// the directory: not damage.
			c.forget(name, ent)
			return false
		}
		c.damaged.Add(1)
		c.log.Warn("disk cache entry damaged: dropped, and the block read from the source again",
			"entry", filepath.Join(c.path, name.String()), "file", c.ix.Path(e.File), "offset", e.Off, "bytes", e.Len, "why", why)
		c.drop(name, ent)
		return false
	}
	if !c.checkBlock(name, ent, e, crc) {
		return false
	}
	c.hits.Add(1)
	c.hitBytes.Add(e.Len)
	return true
}

// readEntry reads entry name into dst and checks it against key; it
// returns the CRC32C of the bytes read and why the entry cannot be used,
// or "".
func (c *Cache) readEntry(name diskName, key, dst []byte) (uint32, string) {
	f, err := c.dir.Open(name.String())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, entryGone
		}
		return 0, err.Error()
	}
	defer f.Close()
	hdr := make([]byte, diskHeader+len(key))
	// Header and data in one read: on a cold entry the kernel sees the
	// whole entry asked for at once, not a small read, whose readahead
	// window is small, then the rest.
	got, rerr := readEntryAt(f, hdr, dst)
	if got < len(hdr) {
		return 0, fmt.Sprintf("header: read %d of %d bytes (%v)", got, len(hdr), rerr)
	}
	if string(hdr[:8]) != diskMagic {
		return 0, "not an entry (bad magic)"
	}
	crc := binary.LittleEndian.Uint32(hdr[8:])
	klen := binary.LittleEndian.Uint32(hdr[12:])
	dlen := binary.LittleEndian.Uint64(hdr[16:])
	if int(klen) != len(key) || !bytes.Equal(hdr[diskHeader:], key) {
		return 0, "holds another block (key differs)"
	}
	if dlen != uint64(len(dst)) {
		return 0, fmt.Sprintf("holds %d bytes, the block has %d", dlen, len(dst))
	}
	if n := got - len(hdr); n < len(dst) {
		return 0, fmt.Sprintf("short: %d of %d bytes (%v)", n, len(dst), rerr)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != int64(len(hdr)+len(dst)) {
		return 0, "its length does not match its header"
	}
	sum := formats.UpdateChecksum(0, dst)
	if sum != crc {
		return 0, fmt.Sprintf("bad checksum: CRC32C %08x, header says %08x", sum, crc)
	}
	return sum, ""
}

// entryGone is readEntry's answer for an entry whose file is not there.
const entryGone = "gone"

// forget removes ent, the entry name, from the table, unless it went
// already (evicted, and maybe written again since).
func (c *Cache) forget(name diskName, ent *diskEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries[name] == ent {
		delete(c.entries, name)
		c.held -= ent.size
	}
}

// drop removes ent, the entry name, and its file. While ent is in the
// table no new entry of that name is written (offer), so the file removed
// is ent's.
func (c *Cache) drop(name diskName, ent *diskEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries[name] != ent {
		return
	}
	delete(c.entries, name)
	c.held -= ent.size
	if err := c.dir.Remove(name.String()); err != nil {
		c.log.Debug("disk cache: remove", "err", err)
	}
}

// offer queues the bytes of extent e, read from the source and checked,
// for writing, unless the cache holds them or writes stopped. It copies
// them: the slab goes on being used. When the queue is full it waits for
// room, at most c.waitFor, and then leaves the block uncached.
func (c *Cache) offer(e Extent, epoch int, data []byte) {
	if c == nil || c.dir == nil || e.Block < 0 {
		return
	}
	key := c.key(e)
	name := nameOf(key)
	n := int64(len(data))
	c.mu.Lock()
	var deadline time.Time
	for {
		if c.closed || c.offWhy != "" || c.entries[name] != nil || c.pending[name] != nil {
			c.mu.Unlock()
			return
		}
		if c.queued == 0 || c.queued+n <= c.maxWait {
			break
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(c.waitFor)
		}
		if !now.Before(deadline) {
			c.mu.Unlock()
			c.skip(e, fmt.Sprintf("the disk cache's writes stayed %.1f MiB behind the source for %s (its disk is slower than the source)",
				float64(c.maxWait)/(1<<20), c.waitFor))
			return
		}
		room := c.room
		c.mu.Unlock()
		t := time.NewTimer(deadline.Sub(now))
		select {
		case <-room:
		case <-t.C:
		}
		t.Stop()
		c.waited.Add(int64(time.Since(now)))
		c.mu.Lock()
	}
	c.queued += n
	c.mu.Unlock()
	buf, err := slab.Map(n)
	if err != nil {
		c.mu.Lock()
		c.queued -= n
		c.mu.Unlock()
		c.skip(e, "no memory for its copy: "+err.Error())
		return
	}
	copy(buf, data)
	c.mu.Lock()
	if c.closed || c.pending[name] != nil {
		// Closing, or the same block queued meanwhile by another load.
		c.queued -= n
		c.mu.Unlock()
		slab.Unmap(buf)
		return
	}
	p := &pendingCopy{data: buf[:n]}
	c.jobs = append(c.jobs, diskJob{name: name, key: key, block: e.Block, epoch: epoch, data: buf[:n], copy: p})
	c.pending[name] = p
	c.work.Signal()
	c.mu.Unlock()
}

// skip counts a block not cached, and logs the first, with why.
func (c *Cache) skip(e Extent, why string) {
	c.skipped.Add(1)
	if c.skipLogged.CompareAndSwap(false, true) {
		c.log.Warn("disk cache: a block read from the source was not cached; it will be read from the source again (counted in write_skipped of stats.json; later ones not logged)",
			"file", c.ix.Path(e.File), "offset", e.Off, "bytes", e.Len, "why", why)
	}
}

// writer writes the queued blocks until Close; after Close it drops
// those still queued, unwritten, so that an unmount never waits for the
// cache's disk.
func (c *Cache) writer() {
	for {
		c.mu.Lock()
		for len(c.jobs) == 0 && !c.closed {
			c.work.Wait()
		}
		if len(c.jobs) == 0 {
			c.mu.Unlock()
			return
		}
		j := c.jobs[0]
		c.jobs[0] = diskJob{}
		c.jobs = c.jobs[1:]
		c.mu.Unlock()
		c.store(j)
		c.mu.Lock()
		c.queued -= int64(len(j.data))
		delete(c.pending, j.name)
		j.copy.written = true
		c.unmapDoneLocked(j.copy)
		// Wake the loads waiting for room.
		close(c.room)
		c.room = make(chan struct{})
		c.mu.Unlock()
	}
}

// unmapDoneLocked unmaps p once it is written and no reader copies from
// it. c.mu must be held.
func (c *Cache) unmapDoneLocked(p *pendingCopy) {
	if p.readers == 0 && p.written && p.data != nil {
		slab.Unmap(p.data)
		p.data = nil
	}
}

// store writes job j as an entry, evicting others to make room.
func (c *Cache) store(j diskJob) {
	size := int64(diskHeader + len(j.key) + len(j.data))
	c.mu.Lock()
	if c.closed || c.offWhy != "" || c.entries[j.name] != nil {
		// Closed: the mount is going away, and must go in seconds.
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if size > c.max || !c.reserve(j.block, j.epoch, size) {
		c.notAdmitted.Add(1)
		return
	}
	err := c.dir.WriteFile(j.name.String(), func(w io.Writer) error {
		var hdr [diskHeader]byte
		copy(hdr[:], diskMagic)
		binary.LittleEndian.PutUint32(hdr[8:], formats.UpdateChecksum(0, j.data))
		binary.LittleEndian.PutUint32(hdr[12:], uint32(len(j.key)))
		binary.LittleEndian.PutUint64(hdr[16:], uint64(len(j.data)))
		if _, err := w.Write(append(hdr[:], j.key...)); err != nil {
			return err
		}
		_, err := w.Write(j.data)
		return err
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.held -= size
		c.stopLocked(err)
		return
	}
	c.tick++
	c.entries[j.name] = &diskEntry{block: j.block, size: size, used: c.tick}
	c.peak = max(c.peak, c.held)
	c.written.Add(1)
}

// stopLocked stops all further writes after a failed one, with one log
// line. c.mu must be held.
func (c *Cache) stopLocked(err error) {
	if c.offWhy != "" {
		return
	}
	what := "the disk cache's directory cannot be written"
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		what = "the disk cache's file system is full"
	}
	c.offWhy = what + ": " + err.Error()
	c.log.Warn(what+"; no more blocks are cached (those cached are still served), reads go on from the source", "dir", c.path, "err", err)
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
	c.work.Broadcast()
	close(c.room)
	c.room = make(chan struct{})
	c.mu.Unlock()
	<-c.done
	return c.dir.Close()
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Dir: c.path, Hits: c.hits.Load(), HitBytes: c.hitBytes.Load(), Misses: c.misses.Load(),
		Written: c.written.Load(), WriteSkipped: c.skipped.Load(), WriteWaitSeconds: time.Duration(c.waited.Load()).Seconds(), NotAdmitted: c.notAdmitted.Load(), Evictions: c.evictions.Load(),
		Damaged: c.damaged.Load(), Mismatched: c.mismatched.Load(), Entries: len(c.entries), BytesHeld: c.held, PeakHeld: c.peak, MaxBytes: c.max, Disabled: c.offWhy}
}
