package shuffler

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/corgifs/corgifs/blockcache"
)

// Stream serves one planned part as a byte stream that can be read at any
// offset. It holds one buffer at a time: the buffer's blocks, read back to
// back into one slab by the loader, and a table that lists the slab's records
// in permuted order with their offsets in the part. A read copies straight
// from the slab into the caller's buffer, so records are copied once and the
// tables are reused from buffer to buffer: nothing is allocated per record.
// When a buffer is entered, the next one is prefetched; when the last one is
// entered, the first buffer of the same part of the next epoch is.
//
// The stream pins its buffer only while a read runs. Between reads the
// loader may evict it to serve other streams (the stream then loads it
// again), so open files that nobody reads cannot hold the memory budget.
type Stream struct {
	pl   *Planner
	ld   *blockcache.Loader
	plan *Plan
	next *Plan // the same part of the next epoch, once prefetching needs it
	// ctx ends with Close: prefetches not started by then are dropped.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	cur    int // index of the buffer in buf, or -1
	buf    *blockcache.Buf
	pinned bool // buf is referenced; else it may have been evicted
	perm   []uint32
	src    []int64 // slab offset of output record k
	out    []int64 // offset of output record k in the buffer; out[n] is its size
}

// NewStream returns a Stream that serves plan.
func NewStream(pl *Planner, ld *blockcache.Loader, plan *Plan) *Stream {
	ctx, cancel := context.WithCancel(context.Background())
	return &Stream{pl: pl, ld: ld, plan: plan, cur: -1, ctx: ctx, cancel: cancel}
}

// Plan returns the plan the stream serves.
func (s *Stream) Plan() *Plan { return s.plan }

// Size returns the number of bytes in the stream.
func (s *Stream) Size() int64 { return s.plan.Size }

// Close releases the stream's buffer and gives up the prefetches of the
// buffers after it; those of the next epoch are kept for the reader that
// opens it next.
func (s *Stream) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancel()
	s.unpin()
	if s.cur >= 0 {
		var units []blockcache.Unit
		for _, b := range s.plan.Buffers[s.cur+1 : min(len(s.plan.Buffers), s.cur+1+prefetchDepth)] {
			units = append(units, b.Unit())
		}
		s.ld.Forget(units...)
	}
	s.buf, s.cur = nil, -1
}

// unpin releases the current buffer to the loader, keeping it for Reacquire.
func (s *Stream) unpin() {
	if s.pinned {
		s.ld.Release(s.buf)
		s.pinned = false
	}
}

// ReadAt fills p with the bytes at off. It returns fewer bytes than len(p)
// only at the end of the stream (and 0 past it) or on error.
func (s *Stream) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at negative offset %d", off)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.unpin()
	n := 0
	for n < len(p) && off < s.plan.Size {
		g, _ := slices.BinarySearchFunc(s.plan.Buffers, off, func(b Buffer, off int64) int {
			switch {
			case off < b.Start:
				return 1
			case off >= b.Start+b.Size:
				return -1
			}
			return 0
		})
		if err := s.enter(ctx, g); err != nil {
			return n, err
		}
		rel := off - s.plan.Buffers[g].Start
		k, found := slices.BinarySearch(s.out, rel)
		if !found {
			k--
		}
		for ; k < len(s.src) && n < len(p); k++ {
			from := s.src[k] + rel - s.out[k]
			to := s.src[k] + s.out[k+1] - s.out[k]
			c := copy(p[n:], s.buf.Data[from:to])
			n += c
			rel += int64(c)
		}
		off = s.plan.Buffers[g].Start + rel
	}
	return n, nil
}

// enter makes buffer g the current one.
func (s *Stream) enter(ctx context.Context, g int) error {
	if s.cur == g && s.buf != nil {
		if s.pinned || s.ld.Reacquire(s.buf) {
			s.pinned = true
			return nil
		}
	}
	// Released first: the Buf stays cached, so a reader going back finds
	// it, but the budget can reclaim it for this stream.
	s.unpin()
	s.buf, s.cur = nil, -1
	b := &s.plan.Buffers[g]
	buf, err := s.ld.Get(ctx, b.Unit())
	if err != nil {
		return fmt.Errorf("epoch %d part %d of %d, buffer %d: %w", s.plan.Epoch, s.plan.Part, s.plan.Parts, g, err)
	}
	if len(buf.Starts) != b.Count {
		s.ld.Release(buf)
		return fmt.Errorf("epoch %d part %d of %d, buffer %d: %d records loaded, plan says %d", s.plan.Epoch, s.plan.Part, s.plan.Parts, g, len(buf.Starts), b.Count)
	}
	s.buf, s.cur, s.pinned = buf, g, true
	n := b.Count
	s.perm = slices.Grow(s.perm[:0], n)[:n]
	s.src = slices.Grow(s.src[:0], n)[:n]
	s.out = slices.Grow(s.out[:0], n+1)[:n+1]
	if b.Shuffle {
		permute(s.perm, b.Seed)
	} else {
		for i := range s.perm {
			s.perm[i] = uint32(i)
		}
	}
	s.out[0] = 0
	for k, r := range s.perm {
		s.src[k] = buf.Starts[r]
		s.out[k+1] = s.out[k] + buf.RecordLen(int(r))
	}
	s.prefetch(g)
	return nil
}

// prefetchDepth is how many buffers a stream loads ahead of the one it
// serves. With one, a reader that is served about as fast as the disk
// loads waits whenever a load runs a little slow; with two, the loader
// keeps working while the reader catches up.
const prefetchDepth = 2

// prefetch starts loading what a sequential reader needs after buffer g:
// the next buffers, and past the last one, the first ones of the same part
// of the next epoch.
func (s *Stream) prefetch(g int) {
	units := make([]blockcache.Unit, 0, prefetchDepth)
	for i := g + 1; i < len(s.plan.Buffers) && len(units) < prefetchDepth; i++ {
		units = append(units, s.plan.Buffers[i].Unit())
	}
	if len(units) < prefetchDepth {
		if s.next == nil {
			s.next, _ = s.pl.Plan(s.plan.Epoch+1, s.plan.Part, s.plan.Parts)
		}
		for i := 0; s.next != nil && i < len(s.next.Buffers) && len(units) < prefetchDepth; i++ {
			units = append(units, s.next.Buffers[i].Unit())
		}
	}
	s.ld.Prefetch(s.ctx, units...)
}

// RecordRef locates a served record in its source file.
type RecordRef struct {
	File   int32
	Offset int64
	Len    int64
}

// Walk calls fn for every record of the stream, in served order.
func (s *Stream) Walk(ctx context.Context, fn func(RecordRef) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.unpin()
	for g := range s.plan.Buffers {
		if err := s.enter(ctx, g); err != nil {
			return err
		}
		for k := range s.src {
			f, off := s.buf.Locate(s.src[k])
			if err := fn(RecordRef{f, off, s.out[k+1] - s.out[k]}); err != nil {
				return err
			}
		}
	}
	return nil
}
