package shuffler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/corgifs/corgifs/blockcache"
)

// Stream serves one planned part as a byte stream that can be read at any
// offset. It serves one buffer at a time: the buffer's blocks, read back to
// back into one slab by the loader, and a view that lists the slab's
// records in permuted order with their offsets in the part. When the index
// knows every block's record count, a buffer is served while it loads: the
// loader reads its blocks in the order the permutation first needs them,
// and the view grows as they arrive, so a read waits only for the blocks
// its own records come from (the bytes served are the same). A read copies
// straight from the slab into the caller's buffer, so records are copied
// once, and views are reused from buffer to buffer: nothing is allocated
// per record. When a buffer is entered, the next ones are prefetched; past
// the last one, the first ones of the same part of the next epoch are.
//
// Reads run concurrently: the lock covers finding the buffer and taking a
// reference on it, not the copy, so the requests the kernel's readahead
// sends at once are copied on every CPU. A read holds its buffer only
// while it runs. Between reads the loader may evict it to serve other
// streams (the stream then loads it again), so open files that nobody
// reads cannot hold the memory budget.
type Stream struct {
	pl   *Planner
	ld   *blockcache.Loader
	plan *Plan
	next *Plan // the same part of the next epoch, once prefetching needs it
	// owned is set when the stream acquired plan from the planner (see
	// OpenStream); next is always acquired. Close releases them.
	owned bool
	// ctx ends with Close: prefetches not started by then are dropped.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	cur    *view   // the buffer entered last
	views  []*view // every view made so far, for reuse
	// firsts, order and seen are unit's scratch, under mu.
	firsts []int32
	order  []uint32
	seen   []bool

	// served is the Buf of buffer servedG, the furthest the stream has
	// entered, which the loader keeps from other streams (Loader.Serve)
	// until the stream moves past it or closes.
	served  *blockcache.Buf
	servedG int
}

// view is one loaded buffer as reads see it. Its tables are set up only
// while no read uses it; while its Buf loads, they grow (grow) past the
// entries reads use, which never change once set.
type view struct {
	g    int
	buf  *blockcache.Buf // nil once the stream let go of it
	perm []uint32        // the Buf's record served as output record k
	src  []int64         // slab offset of output record k
	out  []int64         // offset of output record k in the buffer; out[n] is its size
	// built counts the output records whose src and out entries are set
	// (out[built] too): all of them unless the Buf is still arriving.
	built atomic.Int64
	grow  sync.Mutex // held while src and out grow
	// users counts the reads using the tables now. It goes up only under
	// Stream.mu but down without it: a read that waits for memory in
	// acquire holds the lock, and the memory may be what another read of
	// the stream is about to give back.
	users atomic.Int32
}

// NewStream returns a Stream that serves plan.
func NewStream(pl *Planner, ld *blockcache.Loader, plan *Plan) *Stream {
	ctx, cancel := context.WithCancel(context.Background())
	return &Stream{pl: pl, ld: ld, plan: plan, ctx: ctx, cancel: cancel}
}

// OpenStream returns a Stream that serves part of parts in epoch, with the
// plan that the planner shares between all the streams of that part; Close
// gives it back.
func OpenStream(pl *Planner, ld *blockcache.Loader, epoch, part, parts int) (*Stream, error) {
	plan, err := pl.Acquire(epoch, part, parts)
	if err != nil {
		return nil, err
	}
	pl.uses.serve(part, parts)
	s := NewStream(pl, ld, plan)
	s.owned = true
	return s, nil
}

// Plan returns the plan the stream serves.
func (s *Stream) Plan() *Plan { return s.plan }

// Size returns the number of bytes in the stream.
func (s *Stream) Size() int64 { return s.plan.Size }

// Close gives up the prefetches of the buffers after the current one;
// those of the next epoch are kept for the reader that opens it next.
// Reads must have returned; Bufs held for ReadSlices may be given back
// to Done later.
func (s *Stream) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.cancel()
	if s.owned {
		s.pl.Release(s.plan)
	}
	// The plan of the next epoch goes back too; the prefetches it started
	// stay for the reader that opens that epoch.
	s.pl.Release(s.next)
	if s.cur != nil {
		var units []blockcache.Unit
		for _, b := range s.plan.Buffers[s.cur.g+1 : min(len(s.plan.Buffers), s.cur.g+1+s.ld.PrefetchDepth())] {
			units = append(units, b.Unit())
		}
		s.ld.Forget(units...)
	}
	s.pass()
	for _, v := range s.views {
		v.buf = nil
	}
	s.cur = nil
}

// ReadAt fills p with the bytes at off. It returns fewer bytes than len(p)
// only at the end of the stream (and 0 past it) or on error.
func (s *Stream) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at negative offset %d", off)
	}
	n := 0
	pro, epi, end := s.plan.Prologue, s.plan.Epilogue, s.plan.recordsEnd()
	for n < len(p) && off < s.plan.Size {
		if off < int64(len(pro)) || off >= end {
			var c int
			if off < int64(len(pro)) {
				c = copy(p[n:], pro[off:])
			} else {
				c = copy(p[n:], epi[off-end:])
			}
			n += c
			off += int64(c)
			continue
		}
		g := s.find(off)
		v, err := s.acquire(ctx, g)
		if err != nil {
			return n, err
		}
		rel := off - s.plan.Buffers[g].Start
		want := rel + int64(len(p)-n)
		have, err := v.ensure(ctx, s.ld, want)
		if err != nil {
			s.release(v, true)
			return n, s.failed(g, err)
		}
		c := v.copyTo(p[n:], rel, min(have, want))
		s.release(v, true)
		n += c
		off += int64(c)
	}
	return n, nil
}

// failed names the buffer in err, a failure to load it.
func (s *Stream) failed(g int, err error) error {
	return fmt.Errorf("epoch %d part %d of %d, buffer %d: %w", s.plan.Epoch, s.plan.Part, s.plan.Parts, g, err)
}

// MaxSlices bounds the slices ReadSlices returns. The kernel pins the
// pages of every slice and takes a lock for each. Warm corgipile epochs,
// 1 MiB replies: with 1 KiB records (1000 slices a reply) slices were 20%
// slower than copying, with 4 KiB records (250) as fast, with 16 KiB (65)
// as fast or faster, with 100 KiB (11) 8% faster, for 12% less CPU.
const MaxSlices = 128

// ReadSlices serves the bytes at off, up to len(p), the way that costs
// least. When they lie in one buffer and take at most MaxSlices slices of
// its slab, it appends those slices to vecs, so that the kernel can copy
// them straight from the slab, and returns the Buf that holds them until
// the caller passes it to Done. Otherwise it copies them into p, as ReadAt
// does, and hold is nil. n is the number of bytes either way.
func (s *Stream) ReadSlices(ctx context.Context, p []byte, vecs [][]byte, off int64) (_ [][]byte, n int, hold *blockcache.Buf, err error) {
	if off < int64(len(s.plan.Prologue)) || off >= s.plan.recordsEnd() {
		// The prologue and epilogue are a few bytes: copied.
		n, err = s.ReadAt(ctx, p, off)
		return vecs, n, nil, err
	}
	g := s.find(off)
	b := &s.plan.Buffers[g]
	rel := off - b.Start
	end := min(b.Size, rel+int64(len(p)))
	if end-rel < int64(len(p)) && b.Start+b.Size < s.plan.Size {
		n, err = s.ReadAt(ctx, p, off) // spans two buffers
		return vecs, n, nil, err
	}
	v, err := s.acquire(ctx, g)
	if err != nil {
		return vecs, 0, nil, err
	}
	have, err := v.ensure(ctx, s.ld, end)
	if err != nil {
		s.release(v, true)
		return vecs, 0, nil, s.failed(g, err)
	}
	end = min(end, have)
	base := len(vecs)
	var first, last int64 = -1, -1 // slab range of the last slice
	for from, to := range v.pieces(rel, end) {
		// Records that lie back to back in the slab (the source order) go
		// in one slice.
		if from == last {
			vecs[len(vecs)-1] = v.buf.Data[first:to]
			last = to
			continue
		}
		if len(vecs)-base == MaxSlices {
			// Too many: copy, from where the slices began.
			n = v.copyTo(p, rel, end)
			s.release(v, true)
			clear(vecs[base:])
			return vecs[:base], n, nil, nil
		}
		vecs = append(vecs, v.buf.Data[from:to])
		first, last = from, to
	}
	hold = v.buf // before release: then acquire may reuse v
	s.release(v, false)
	return vecs, int(end - rel), hold, nil
}

// pieces yields the slab ranges that hold bytes rel to end of the buffer,
// in served order: a range per record, the first and last cut to fit.
func (v *view) pieces(rel, end int64) func(yield func(from, to int64) bool) {
	return func(yield func(from, to int64) bool) {
		k, found := slices.BinarySearch(v.out[:v.built.Load()+1], rel)
		if !found {
			k--
		}
		for ; rel < end; k++ {
			from := v.src[k] + rel - v.out[k]
			to := v.src[k] + min(v.out[k+1], end) - v.out[k]
			if !yield(from, to) {
				return
			}
			rel += to - from
		}
	}
}

// copyTo copies bytes rel to end of the buffer into p and returns how many.
func (v *view) copyTo(p []byte, rel, end int64) int {
	n := 0
	for from, to := range v.pieces(rel, end) {
		n += copy(p[n:], v.buf.Data[from:to])
	}
	return n
}

// ensure grows v's tables until they reach byte end of the buffer, or
// its last record, waiting for the records it needs to arrive, and
// returns how far they reach. Records are taken in served order, each once
// its block has arrived, so what a read sees is what it would see once the
// whole buffer had loaded.
func (v *view) ensure(ctx context.Context, ld *blockcache.Loader, end int64) (int64, error) {
	n := int64(len(v.perm))
	for {
		k := v.built.Load()
		if k == n || v.out[k] >= end {
			return v.out[k], nil
		}
		v.grow.Lock()
		k = v.built.Load()
		for k < n && v.buf.Arrived(int(v.perm[k])) {
			r := int(v.perm[k])
			v.src[k] = v.buf.Starts[r]
			v.out[k+1] = v.out[k] + v.buf.RecordLen(r)
			k++
		}
		v.built.Store(k)
		v.grow.Unlock()
		if k == n || v.out[k] >= end {
			return v.out[k], nil
		}
		if err := ld.Await(ctx, v.buf, int(v.perm[k])); err != nil {
			return 0, err
		}
	}
}

// Done releases a Buf returned by ReadSlices.
func (s *Stream) Done(b *blockcache.Buf) { s.ld.Release(b) }

// find returns the index of the buffer that holds the byte at off.
func (s *Stream) find(off int64) int {
	g, _ := slices.BinarySearchFunc(s.plan.Buffers, off, func(b Buffer, off int64) int {
		switch {
		case off < b.Start:
			return 1
		case off >= b.Start+b.Size:
			return -1
		}
		return 0
	})
	return g
}

// acquire returns the view of buffer g, loading the buffer if it is not
// loaded, with a reference on its Buf and its tables in use; release gives
// both back.
func (s *Stream) acquire(ctx context.Context, g int) (*view, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var free *view
	for _, v := range s.views {
		if v.g == g && v.buf != nil && s.ld.Reacquire(v.buf) {
			if v.buf.Failed() {
				// Its load failed: load it again, in a fresh view.
				s.ld.Release(v.buf)
				v.buf = nil
				continue
			}
			v.users.Add(1)
			return v, nil
		}
		// Not one that a read still uses, nor the one entered last,
		// which a reader going on in it may want again.
		if v.users.Load() == 0 && v != s.cur && free == nil {
			free = v
		}
	}
	if free == nil {
		free = &view{}
		s.views = append(s.views, free)
	}
	// Views are made when reads of different buffers overlap, at buffer
	// boundaries. Their tables (16 bytes a record) are heap, outside the
	// slabs' budget, so idle ones beyond maxViews go.
	for i := 0; len(s.views) > maxViews && i < len(s.views); {
		if w := s.views[i]; w != free && w != s.cur && w.users.Load() == 0 {
			s.views = slices.Delete(s.views, i, i+1)
			continue
		}
		i++
	}
	v := free
	v.buf = nil
	if v.users.Load() > 0 {
		panic("shuffler: view reused while in use")
	}
	// Moving on: other streams may have the buffer left, and this one
	// waits for memory, if it must, without holding on to it. Not when
	// going back, as the kernel's readahead does for the end of the
	// buffer before: the reader is still in the one served.
	ahead := s.served == nil || g >= s.servedG
	if ahead {
		s.pass()
	}
	b := &s.plan.Buffers[g]
	buf, err := s.ld.Begin(ctx, s.unit(b))
	if err != nil {
		return nil, s.failed(g, err)
	}
	// A count unknown at planning (-1, a probed index) is the one loaded:
	// the permutation depends on the seed and the count only.
	n := len(buf.Starts)
	if b.Subset {
		n = len(b.Perm)
		if slices.ContainsFunc(b.Perm, func(k int32) bool { return int(k) >= len(buf.Starts) }) {
			s.ld.Release(buf)
			return nil, fmt.Errorf("epoch %d part %d of %d, buffer %d: %d records loaded, fewer than the plan serves from", s.plan.Epoch, s.plan.Part, s.plan.Parts, g, len(buf.Starts))
		}
	} else if b.Count >= 0 && n != b.Count {
		s.ld.Release(buf)
		return nil, fmt.Errorf("epoch %d part %d of %d, buffer %d: %d records loaded, plan says %d", s.plan.Epoch, s.plan.Part, s.plan.Parts, g, n, b.Count)
	}
	v.perm = slices.Grow(v.perm[:0], n)[:n]
	v.src = slices.Grow(v.src[:0], n)[:n]
	v.out = slices.Grow(v.out[:0], n+1)[:n+1]
	b.order(v.perm)
	v.out[0] = 0
	v.built.Store(0)
	v.g, v.buf = g, buf
	if !buf.Partial() {
		for k, r := range v.perm {
			v.src[k] = buf.Starts[r]
			v.out[k+1] = v.out[k] + buf.RecordLen(int(r))
		}
		v.built.Store(int64(n))
	}
	v.users.Store(1)
	if ahead {
		s.ld.Serve(buf)
		s.served, s.servedG = buf, g
	}
	s.cur = v
	s.prefetch(g, buf)
	return v, nil
}

// order fills perm, of the buffer's record count, with the buffer's
// record served at each place.
func (b *Buffer) order(perm []uint32) {
	switch {
	case b.Perm != nil:
		for i, k := range b.Perm {
			perm[i] = uint32(k)
		}
	case b.Shuffle:
		permute(perm, b.Seed)
	default:
		for i := range perm {
			perm[i] = uint32(i)
		}
	}
}

// unit returns the unit of buffer b, with the order in which the loader
// reads its blocks (or records): the order the permutation first needs
// them in, when the index knows how many records each block holds.
// s.mu must be held.
func (s *Stream) unit(b *Buffer) blockcache.Unit {
	u := b.Unit()
	n := len(b.Records)
	if b.Records == nil {
		// firsts[i]: the first record of block i, then the record count.
		s.firsts = append(s.firsts[:0], 0)
		for _, id := range b.Blocks {
			c := s.pl.ix.Blocks[id].Records
			if c <= 0 {
				return u // a probed index: counts learned as blocks load
			}
			s.firsts = append(s.firsts, s.firsts[len(s.firsts)-1]+c)
		}
		n = int(s.firsts[len(s.firsts)-1])
	}
	if b.Subset {
		n = len(b.Perm)
	} else if b.Count >= 0 && n != b.Count {
		return u // the loader's count check says what is wrong
	}
	perm := slices.Grow(s.order[:0], n)[:n]
	s.order = perm
	b.order(perm)
	ext := len(b.Blocks) + len(b.Records)
	seen := slices.Grow(s.seen[:0], ext)[:ext]
	s.seen = seen
	clear(seen)
	u.Order = make([]int32, 0, ext)
	for _, r := range perm {
		i := int32(r)
		if b.Records == nil {
			j, _ := slices.BinarySearch(s.firsts, int32(r)+1)
			i = int32(j - 1)
		}
		if int(i) < ext && !seen[i] {
			seen[i] = true
			u.Order = append(u.Order, i)
		}
	}
	// A subset leaves some unread by the permutation: last.
	for i := range ext {
		if !seen[i] {
			u.Order = append(u.Order, int32(i))
		}
	}
	return u
}

// pass ends the loader's keeping of the buffer served last. s.mu must be
// held.
func (s *Stream) pass() {
	if s.served != nil {
		s.ld.Pass(s.served)
		s.served = nil
	}
}

// maxViews is how many views a stream keeps: the buffer a reader is in,
// the one before for late readahead requests, and one being entered.
const maxViews = 3

// release ends a read's use of v's tables and, if buf is set, drops its
// reference on the Buf. It takes no lock (see view.users).
func (s *Stream) release(v *view, buf bool) {
	b := v.buf // before the count drops: then acquire may reuse v
	v.users.Add(-1)
	if buf {
		s.ld.Release(b)
	}
}

// prefetch starts loading what a sequential reader needs after buffer g,
// once buf, g's, has loaded: the next ld.PrefetchDepth() buffers, and past
// the last one, the first ones of the same part of the next epoch. Beyond
// the first buffer ahead, which keeps every read slot busy while g is
// served, the depth is counted in bytes too (Loader.PrefetchBytes): a
// second buffer of hundreds of MiB ahead only takes memory and, on a
// loaded machine, CPU from the one being served.
func (s *Stream) prefetch(g int, buf *blockcache.Buf) {
	depth := s.ld.PrefetchDepth()
	if depth == 0 {
		return
	}
	units := make([]blockcache.Unit, 0, min(depth, 8))
	var ahead int64
	more := func(b *Buffer) bool {
		if len(units) >= depth || (len(units) > 0 && ahead+b.Size > s.ld.PrefetchBytes()) {
			return false
		}
		ahead += b.Size
		units = append(units, s.unit(b))
		return true
	}
	i := g + 1
	for i < len(s.plan.Buffers) && more(&s.plan.Buffers[i]) {
		i++
	}
	if i == len(s.plan.Buffers) && len(units) < depth {
		// A feedback strategy's next epoch is planned once its feedback is
		// complete: asking earlier would wait, under s.mu (grab.go).
		if s.next == nil && !s.closed && s.pl.Ready(s.plan.Epoch+1, s.plan.Parts) {
			s.next, _ = s.pl.Acquire(s.plan.Epoch+1, s.plan.Part, s.plan.Parts)
		}
		if s.next != nil {
			for i := range s.next.Buffers {
				if !more(&s.next.Buffers[i]) {
					break
				}
			}
		}
	}
	s.ld.PrefetchAfter(s.ctx, buf, units...)
}

// RecordRef locates a served record in its source file: Len is its served
// length, Stored the length of its bytes in the file, which is shorter for
// the last record of a text file without a line end (see formats.Head.Tail).
type RecordRef struct {
	ID     int32 // the record's id in the index (Index.Record)
	File   int32
	Offset int64
	Len    int64
	Stored int64
}

// Walk calls fn for every record of the stream, in served order.
func (s *Stream) Walk(ctx context.Context, fn func(RecordRef) error) error {
	return s.pl.Walk(ctx, s.plan, fn)
}

// Walk calls fn for every record of plan, in served order. It is a walk of
// the plan over the index: no data is read.
func (pl *Planner) Walk(ctx context.Context, plan *Plan, fn func(RecordRef) error) error {
	ix := pl.ix
	if ix.Probed {
		return fmt.Errorf("the records of a plan are listed from the index of every record, which a probed index lacks: use {index} full")
	}
	var perm []uint32
	var ids []int32
	for g := range plan.Buffers {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := &plan.Buffers[g]
		ids = ids[:0]
		if b.Records != nil {
			ids = append(ids, b.Records...)
		} else {
			for _, id := range b.Blocks {
				first := int32(ix.BlockRecords(id))
				for r := range ix.Blocks[id].Records {
					ids = append(ids, first+r)
				}
			}
		}
		n := len(ids)
		if b.Subset {
			n = len(b.Perm)
		}
		perm = slices.Grow(perm[:0], n)[:n]
		if b.Perm != nil {
			for i, k := range b.Perm {
				perm[i] = uint32(k)
			}
		} else if b.Shuffle {
			permute(perm, b.Seed)
		} else {
			for i := range perm {
				perm[i] = uint32(i)
			}
		}
		for _, k := range perm {
			f, off, n := ix.Record(ids[k])
			stored := n
			if h := &ix.Files[f].Head; len(h.Tail) > 0 && off+n > h.End {
				stored -= int64(len(h.Tail))
			}
			if err := fn(RecordRef{ID: ids[k], File: f, Offset: off, Len: n, Stored: stored}); err != nil {
				return err
			}
		}
	}
	return nil
}
