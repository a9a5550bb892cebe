package diskcache

// The write side: blocks offered, queued as copies, and written by a few
// writers, which stop at the first failure.

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/internal/slab"
)

// offer queues the bytes of extent e, read from the source and checked,
// for writing, unless the cache holds them or writes stopped. It copies
// them: the slab goes on being used. When the queue is full it waits for
// room, at most c.queue.waitFor, and then leaves the block uncached.
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
		if c.closed || c.offWhy != "" || c.entries[name] != nil || c.queue.pending[name] != nil {
			c.mu.Unlock()
			return
		}
		if c.queue.queued == 0 || c.queue.queued+n <= c.queue.maxWait {
			break
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(c.queue.waitFor)
		}
		if !now.Before(deadline) {
			c.mu.Unlock()
			c.skip(e, fmt.Sprintf("the disk cache's writes stayed %.1f MiB behind the source for %s (its disk is slower than the source)",
				float64(c.queue.maxWait)/(1<<20), c.queue.waitFor))
			return
		}
		room := c.queue.room
		c.mu.Unlock()
		t := time.NewTimer(deadline.Sub(now))
		select {
		case <-room:
		case <-t.C:
		}
		t.Stop()
		c.queue.waited.Add(int64(time.Since(now)))
		c.mu.Lock()
	}
	c.queue.queued += n
	c.mu.Unlock()
	buf, err := slab.Map(n)
	if err != nil {
		c.mu.Lock()
		c.queue.queued -= n
		c.mu.Unlock()
		c.skip(e, "no memory for its copy: "+err.Error())
		return
	}
	copy(buf, data)
	c.mu.Lock()
	if c.closed || c.queue.pending[name] != nil {
		// Closing, or the same block queued meanwhile by another load.
		c.queue.queued -= n
		c.mu.Unlock()
		slab.Unmap(buf)
		return
	}
	p := &pendingCopy{data: buf[:n]}
	c.queue.jobs = append(c.queue.jobs, diskJob{name: name, key: key, ext: e, epoch: epoch, data: buf[:n], copy: p})
	c.queue.pending[name] = p
	c.queue.work.Signal()
	c.mu.Unlock()
}

// skip counts a block not cached, and logs the first, with why.
func (c *Cache) skip(e Extent, why string) {
	c.count.skipped.Add(1)
	if c.count.skipLogged.CompareAndSwap(false, true) {
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
		for len(c.queue.jobs) == 0 && !c.closed {
			c.queue.work.Wait()
		}
		if len(c.queue.jobs) == 0 {
			c.mu.Unlock()
			return
		}
		j := c.queue.jobs[0]
		c.queue.jobs[0] = diskJob{}
		c.queue.jobs = c.queue.jobs[1:]
		c.mu.Unlock()
		c.store(j)
		c.mu.Lock()
		c.queue.queued -= int64(len(j.data))
		delete(c.queue.pending, j.name)
		j.copy.written = true
		c.unmapDoneLocked(j.copy)
		// Wake the loads waiting for room.
		close(c.queue.room)
		c.queue.room = make(chan struct{})
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
	size := entrySize(len(j.key), j.ext)
	c.mu.Lock()
	if c.closed || c.offWhy != "" || c.entries[j.name] != nil {
		// Closed: the mount is going away, and must go in seconds.
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if size > c.max || !c.reserve(j.ext.Block, j.epoch, size) {
		c.count.notAdmitted.Add(1)
		return
	}
	err := c.dir.WriteFile(j.name.String(), func(w io.Writer) error {
		h, lead := layout(len(j.key), j.ext)
		hdr := make([]byte, h+lead)
		putHeader(hdr, j.key, j.ext, formats.UpdateChecksum(0, j.data))
		if _, err := w.Write(hdr); err != nil {
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
	c.entries[j.name] = &diskEntry{block: j.ext.Block, size: size, used: c.tick}
	c.peak = max(c.peak, c.held)
	c.count.written.Add(1)
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
