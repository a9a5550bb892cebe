package blockcache

// The memory budget: slabs reserved, reused, grown and given back, and
// the idle Bufs evicted to make room.

import (
	"slices"
	"time"

	"github.com/corgifs/corgifs/internal/slab"
)

// memory is the loader's budget and its slabs. Guarded by Loader.mu.
type memory struct {
	budget  int64 // LoaderOptions.MaxMemory
	used    int64 // by the slabs mapped, in use or free
	peak    int64
	mapped  int64         // fresh memory given to slabs, ever (Stats.MemoryMapped)
	largest int64         // the largest reservation so far
	free    []*Buf        // evicted Bufs whose slabs can be reused
	waiters int           // Gets waiting for memory
	changed chan struct{} // closed when memory may have been freed, for the waiters
}

// dropLocked removes b from the table and keeps its slab for reuse. l.mu must be held.
func (l *Loader) dropLocked(b *Buf) {
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
	l.mem.free = append(l.mem.free, &Buf{Data: b.Data[:0], Starts: b.Starts[:0], lens: b.lens[:0], exts: b.exts[:0]})
}

// reserveLocked returns a new Buf with room for n bytes, reusing a free slab when
// one is large enough, and evicting idle Bufs if evict is set. It returns nil
// when the budget cannot be met. l.mu must be held.
func (l *Loader) reserveLocked(n int64, evict bool) *Buf {
	if b := l.reuseLocked(n); b != nil {
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
	// The one before is kept only while those late requests may still
	// come (serveGrace): a reader that left it longer ago is done with it,
	// and its slab spares a fresh one the system must fault in and zero
	// (half of a cold epoch's daemon CPU, BENCHMARKS.md, issue 25).
	// Failing that, when a new slab fits in the budget anyway, retire the
	// oldest such Buf whose slab is too small, so that the new slab
	// replaces it instead of adding to it.
	now := l.clock()
	var keep [2]*Buf
	for v, i := l.idle.tail, 0; v != nil && i < len(keep); v = v.prev {
		if !v.prefetched {
			if i == 0 || now-v.used < serveGrace {
				keep[i] = v
			}
			i++
		}
	}
	var small *Buf
	for v := l.idle.head; v != nil; v = v.next {
		if v != keep[0] && v != keep[1] && !v.prefetched && isReady(v) && !l.protectedLocked(v, now) {
			if int64(cap(v.Data)) >= n {
				l.count.evictions.Add(1)
				l.dropLocked(v)
				return l.reuseLocked(n)
			}
			if small == nil {
				small = v
			}
		}
	}
	if small != nil && l.mem.used+n <= l.mem.budget {
		l.count.evictions.Add(1)
		l.dropLocked(small)
		if b := l.regrowLocked(n); b != nil {
			return b
		}
		l.unmapLastFreeLocked()
	}
	// Evict nothing unless the reservation then succeeds: a prefetch that is
	// skipped anyway, or a Get that waits anyway, must not throw away
	// cached Bufs.
	if l.mem.used+n > l.mem.budget && !l.canFreeLocked(l.mem.used+n-l.mem.budget, evict, now) {
		return nil
	}
	for l.mem.used+n > l.mem.budget {
		if len(l.mem.free) > 0 {
			l.unmapLastFreeLocked()
			continue
		}
		// Blocks a walk kept go before any Buf: a buffer's memory is
		// the budget's first use.
		if l.dropWalkedLocked() {
			continue
		}
		victim := l.nextVictimLocked(nil, evict, now)
		if victim == nil {
			return nil
		}
		l.count.evictions.Add(1)
		l.dropLocked(victim)
		if b := l.reuseLocked(n); b != nil {
			return b // the victim's slab is large enough
		}
		if l.mem.used+n-int64(cap(l.mem.free[len(l.mem.free)-1].Data)) <= l.mem.budget {
			if b := l.regrowLocked(n); b != nil {
				return b
			}
		}
		l.unmapLastFreeLocked()
	}
	// Slabs as large as the largest buffer asked for so far can be
	// recycled for any later buffer (buffers of a part differ by up to a
	// block); but the double buffer must still fit.
	l.mem.largest = max(l.mem.largest, n)
	c := n
	if m := l.mem.largest; l.mem.used+2*m <= l.mem.budget {
		c = m
	}
	mem, err := slab.Map(c)
	if err != nil {
		l.log.Error("out of memory for a slab", "err", err)
		return nil
	}
	l.mem.used += int64(cap(mem))
	l.mem.mapped += int64(cap(mem))
	l.mem.peak = max(l.mem.peak, l.mem.used)
	return l.ready(&Buf{Data: mem[:0]}, n)
}

// regrowLocked makes the last free slab, the one just dropped, n bytes long and
// returns it, or nil if the system refuses. The slab keeps its pages, so
// only the added ones are faulted in and zeroed, where a new slab would
// need all of them: a buffer is often a block larger than the one before.
// l.mu must be held.
func (l *Loader) regrowLocked(n int64) *Buf {
	f := l.mem.free[len(l.mem.free)-1]
	mem, err := slab.Grow(f.Data, n)
	if err != nil {
		l.log.Debug("could not grow a slab", "from", cap(f.Data), "to", n, "err", err)
		return nil
	}
	l.mem.free = l.mem.free[:len(l.mem.free)-1]
	l.mem.used += int64(cap(mem)) - int64(cap(f.Data))
	l.mem.mapped += int64(cap(mem)) - int64(cap(f.Data))
	l.mem.peak = max(l.mem.peak, l.mem.used)
	f.Data = mem[:0]
	return l.ready(f, n)
}

// unmapLastFreeLocked gives the last free slab back to the system. l.mu must be
// held.
func (l *Loader) unmapLastFreeLocked() {
	f := l.mem.free[len(l.mem.free)-1]
	l.mem.free = l.mem.free[:len(l.mem.free)-1]
	l.mem.used -= int64(cap(f.Data))
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

// canFreeLocked reports whether reserveLocked can free need bytes: the free slabs,
// then the idle Bufs nextVictimLocked yields. l.mu must be held.
func (l *Loader) canFreeLocked(need int64, evict bool, now time.Duration) bool {
	for _, f := range l.mem.free {
		need -= int64(cap(f.Data))
	}
	need -= l.walkedFreeLocked()
	for v := l.nextVictimLocked(nil, evict, now); need > 0 && v != nil; v = l.nextVictimLocked(v, evict, now) {
		need -= int64(cap(v.Data))
	}
	return need <= 0
}

// nextVictimLocked returns the idle Buf after from (from the front if from is
// nil) that a load may evict, least recently used first: one that is
// loaded and that no reader is in (see serveGrace). A prefetch (evict
// unset) evicts nothing newer than a Buf prefetched for a reader. l.mu
// must be held.
func (l *Loader) nextVictimLocked(from *Buf, evict bool, now time.Duration) *Buf {
	v := l.idle.head
	if from != nil {
		v = from.next
	}
	for ; v != nil; v = v.next {
		if !evict && v.prefetched {
			return nil
		}
		if isReady(v) && !l.protectedLocked(v, now) {
			return v
		}
	}
	return nil
}

// reuseLocked returns a Buf on the smallest free slab of at least n bytes, the
// one that wastes least, or nil. l.mu must be held.
func (l *Loader) reuseLocked(n int64) *Buf {
	best := -1
	for i, f := range l.mem.free {
		if int64(cap(f.Data)) >= n && (best < 0 || cap(f.Data) < cap(l.mem.free[best].Data)) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	b := l.mem.free[best]
	l.mem.free = slices.Delete(l.mem.free, best, best+1)
	return l.ready(b, n)
}

func (l *Loader) ready(b *Buf, n int64) *Buf {
	b.Data = b.Data[:n]
	b.ready = make(chan struct{})
	b.laid = make(chan struct{})
	return b
}
