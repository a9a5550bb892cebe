package diskcache

// The read side: an entry's key and name, the stock taken at open, and
// the reads of entries, each checked.

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/source"
)

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

// nameOf names the entry of key. The magic is hashed with the key, so
// that an entry of another format has another name: a cache filled by an
// older corgifs is never read as this format, and its entries, which name
// no block, are evicted first.
func nameOf(key []byte) diskName {
	h := fnv.New128a()
	h.Write([]byte(diskMagic))
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
// (it is then removed, with a log line). If win is not nil, dst is
// win[e.Off%source.DirectAlign:][:e.Len], and win, page-aligned and e's
// own, may be filled by a direct read (readEntry).
func (c *Cache) read(e Extent, dst, win []byte) bool {
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
	if p := c.queue.pending[name]; p != nil && len(p.data) == len(dst) {
		p.readers++
		c.mu.Unlock()
		copy(dst, p.data)
		c.mu.Lock()
		p.readers--
		c.unmapDoneLocked(p)
		c.mu.Unlock()
		c.count.hits.Add(1)
		c.count.hitBytes.Add(e.Len)
		return true
	}
	ent := c.entries[name]
	if ent != nil {
		c.tick++
		ent.used = c.tick
	}
	c.mu.Unlock()
	if ent == nil {
		c.count.misses.Add(1)
		return false
	}
	crc, direct, why := c.readEntry(name, key, e, dst, win)
	if why != "" {
		c.count.misses.Add(1)
		if why == entryGone {
			// Removed by someone else, such as another mount sharing
			// the directory: not damage.
			c.forget(name, ent)
			return false
		}
		c.count.damaged.Add(1)
		c.log.Warn("disk cache entry damaged: dropped, and the block read from the source again",
			"entry", filepath.Join(c.path, name.String()), "file", c.ix.Path(e.File), "offset", e.Off, "bytes", e.Len, "why", why)
		c.drop(name, ent)
		return false
	}
	if !c.checkBlock(name, ent, e, crc) {
		return false
	}
	c.count.hits.Add(1)
	c.count.hitBytes.Add(e.Len)
	if direct {
		c.count.directBytes.Add(e.Len)
	}
	return true
}

// readEntry reads entry name, of extent e, into dst and checks it against
// key; it returns the CRC32C of the bytes read, whether they were read
// directly, and why the entry cannot be used, or "". With win (see read),
// an entry laid out in pages (layout) that is mostly not in the page cache
// is read with O_DIRECT, header and data in one preadv into a page-aligned
// header buffer and win; any other is read through the page cache, header
// and data in one preadv too: on a cold entry the kernel sees the whole
// entry asked for at once, not a small read, whose readahead window is
// small, then the rest.
func (c *Cache) readEntry(name diskName, key []byte, e Extent, dst, win []byte) (crc uint32, direct bool, why string) {
	f, err := c.dir.Open(name.String())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, false, entryGone
		}
		return 0, false, err.Error()
	}
	defer f.Close()
	h, lead := layout(len(key), e)
	size := int64(h+lead) + e.Len
	buf, pooled := c.hdrs.get(h + lead)
	if pooled {
		defer c.hdrs.put(buf)
	}
	hdr := (*buf)[:h]
	var pad []byte
	var got int
	var rerr error
	if win != nil && e.Len >= pagedMin && !c.noDirect.Load() && uncached(f, size) {
		switch got, rerr = readEntryDirect(f, hdr, win[:index.AlignUp(int64(lead)+e.Len)]); {
		case errors.Is(rerr, source.ErrNoDirect):
			if c.noDirect.CompareAndSwap(false, true) {
				c.log.Info("disk cache: its file system refused a direct read; entries are read through the page cache from now on", "dir", c.path, "err", rerr)
			}
		default:
			direct, pad = true, win[:lead]
		}
	}
	if !direct {
		pad = (*buf)[h : h+lead]
		got, rerr = readEntryAt(f, (*buf)[:h+lead], dst)
	}
	if got < h+lead {
		return 0, false, fmt.Sprintf("header: read %d of %d bytes (%v)", got, h+lead, rerr)
	}
	crc, why = checkHeader(hdr, pad, key, e)
	if why != "" {
		return 0, false, why
	}
	if n := int64(got - h - lead); n < e.Len {
		return 0, false, fmt.Sprintf("short: %d of %d bytes (%v)", n, e.Len, rerr)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != size {
		return 0, false, "its length does not match its header"
	}
	sum := formats.UpdateChecksum(0, dst)
	if sum != crc {
		return 0, false, fmt.Sprintf("bad checksum: CRC32C %08x, header says %08x", sum, crc)
	}
	return sum, direct, ""
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
