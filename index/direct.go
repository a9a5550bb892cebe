package index

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/corgifs/corgifs/internal/slab"
	"github.com/corgifs/corgifs/source"
)

// Blocks that are not in the page cache are read with O_DIRECT, straight
// from the disk into the slab. On the machines measured, a cold buffered
// read of a large file spent most of its time in the kernel inserting pages
// into the page cache (several CPU seconds per GiB on two vCPUs) and ran at
// a third of the disk's speed, while direct reads ran at the disk's speed
// for almost no CPU, and leave the page cache to the reader. Blocks that are
// cached are still copied from the page cache: a warm dataset is served at
// memory speed, not at disk speed. Direct reads and the page-cache query
// are capabilities of local files (source.DirectReader, source.PageCached,
// in source/local), Linux's; other files are read through ReadAt.

// MinDirectBlock is the smallest block size read with O_DIRECT. A block
// read directly takes whole pages of a slab, up to two more than its bytes:
// at most 0.8% more memory from this size on.
const MinDirectBlock = 1 << 20

// dioAlign is the alignment of direct reads: of the file offset, the length
// and the memory.
const dioAlign = source.DirectAlign

func AlignDown(n int64) int64 { return n &^ (dioAlign - 1) }
func AlignUp(n int64) int64   { return (n + dioAlign - 1) &^ (dioAlign - 1) }

// scanChunk is the unit of an aheadReader's reads.
const scanChunk = 8 << 20

// aheadReader is the io.ReaderAt of a Scanner that indexes a file front to
// back: it reads the file a chunk at a time (with O_DIRECT where the file
// is a source.DirectReader), the next chunk
// while the scanner works on the current one, so that indexing runs at the
// disk's speed and leaves the page cache alone. It keeps the chunk before
// the current one too, since a scanner's window may start a record before
// where the last one ended; anything further back is read through the page
// cache. Its three slabs are reused from file to file.
type aheadReader struct {
	f      source.File
	direct source.DirectReader // nil to read through f
	size   int64
	slots  [3]*aheadChunk
}

// noChunk is the chunk number of a slab that holds nothing.
const noChunk = math.MinInt64

type aheadChunk struct {
	k    int64 // chunk number: it holds the bytes from k*scanChunk, or noChunk
	buf  []byte
	n    int
	err  error
	done chan struct{}
}

// reset points r at a new file, read with direct's ReadDirect where it
// can be (nil: through f; from a remote file each chunk is then one
// ranged request).
func (r *aheadReader) reset(f source.File, direct source.DirectReader, size int64) {
	r.wait()
	r.f, r.direct, r.size = f, direct, size
	for _, c := range r.slots {
		if c != nil {
			c.k = noChunk
		}
	}
}

// wait waits for every read in flight.
func (r *aheadReader) wait() {
	for _, c := range r.slots {
		if c != nil {
			<-c.done
		}
	}
}

// free waits for the reads in flight and unmaps the slabs.
func (r *aheadReader) free() {
	r.wait()
	for i, c := range r.slots {
		if c != nil {
			slab.Unmap(c.buf)
			r.slots[i] = nil
		}
	}
}

// ReadAt implements io.ReaderAt.
func (r *aheadReader) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		if pos >= r.size {
			return n, io.EOF
		}
		k := pos / scanChunk
		if cur := r.newest(); cur != noChunk && k < cur-1 {
			m, err := r.f.ReadAt(p[n:], pos)
			return n + m, err
		}
		c := r.chunk(k, k)
		if (k+1)*scanChunk < r.size {
			r.chunk(k+1, k)
		}
		<-c.done
		if c.err != nil {
			return n, fmt.Errorf("read %s at offset %d: %w", r.f.Name(), k*scanChunk, c.err)
		}
		at := int(pos - k*scanChunk)
		if at >= c.n {
			return n, fmt.Errorf("read %s at offset %d: file shorter than expected: %w", r.f.Name(), pos, io.ErrUnexpectedEOF)
		}
		n += copy(p[n:], c.buf[at:c.n])
	}
	return n, nil
}

// view returns the n bytes at off in place, without copying, when one
// chunk that has been read holds them all: the bytes a scanner has just
// read. The slice is valid until the next ReadAt.
func (r *aheadReader) view(off, n int64) ([]byte, bool) {
	k := off / scanChunk
	if n <= 0 || (off+n-1)/scanChunk != k {
		return nil, false
	}
	for _, c := range r.slots {
		if c == nil || c.k != k {
			continue
		}
		select {
		case <-c.done:
		default:
			return nil, false
		}
		at := off - k*scanChunk
		if c.err != nil || at+n > int64(c.n) {
			return nil, false
		}
		return c.buf[at : at+n], true
	}
	return nil, false
}

// newest returns the highest chunk number held, or noChunk.
func (r *aheadReader) newest() int64 {
	k := int64(noChunk)
	for _, c := range r.slots {
		if c != nil {
			k = max(k, c.k)
		}
	}
	return k
}

// chunk returns chunk k, starting its read if it is not held, in the slab
// of the oldest chunk but the current one, cur, and the one before it.
func (r *aheadReader) chunk(k, cur int64) *aheadChunk {
	var victim *aheadChunk
	for i, c := range r.slots {
		switch {
		case c == nil:
			if victim == nil {
				buf, err := slab.Map(scanChunk)
				if err != nil {
					// Without a slab the chunk fails like a read would.
					c := &aheadChunk{k: k, err: err, done: make(chan struct{})}
					close(c.done)
					return c
				}
				victim = &aheadChunk{k: noChunk, buf: buf, done: make(chan struct{})}
				close(victim.done)
				r.slots[i] = victim
			}
		case c.k == k:
			return c
		case c.k != cur && c.k != cur-1 && (victim == nil || c.k < victim.k):
			victim = c
		}
	}
	<-victim.done
	victim.k, victim.n, victim.err, victim.done = k, 0, nil, make(chan struct{})
	go r.fetch(victim)
	return victim
}

// fetch reads chunk c, directly if it can.
func (r *aheadReader) fetch(c *aheadChunk) {
	defer close(c.done)
	off := c.k * scanChunk
	want := min(scanChunk, r.size-off)
	if r.direct != nil {
		n, err := r.direct.ReadDirect(c.buf[:AlignUp(want)], off)
		if !errors.Is(err, source.ErrNoDirect) {
			c.n, c.err = n, err
			return
		}
	}
	n, err := r.f.ReadAt(c.buf[:want], off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	c.n, c.err = n, err
}
