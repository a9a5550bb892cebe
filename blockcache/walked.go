package blockcache

// Walked blocks: the blocks a first epoch's record-chain walk read whole
// (chain_ahead.go), kept for the later buffers that hold them.
//
// Why. The walk that proves a buffer's probed cuts reads the gaps between
// its blocks and the blocks loaded before: in a first epoch, most of each
// file, blocks that belong to the epoch's later buffers. Dropped after
// their check, each was fetched again when its buffer loaded: by hand,
// 512 MiB of 100 KiB records on MinIO read 347 MB of walks beside the
// epoch's 537 MB of blocks (BENCHMARKS.md, issue 25). Kept, a later load
// copies them from memory instead of a GET.
//
// What it may hold. Only memory the budget has spare beside the next
// buffer (walkRoom), charged to it as a slab is; a reservation that needs
// it drops the oldest kept reads first, before any Buf (reserveLocked).
// A kept block is served only through the same checks as bytes from the
// source or the disk cache (readCachedExtent): the extent must be the
// block's bytes exactly, read from the file at its indexed version (the
// walk opens it so), and its records are split and checked as they would
// be.

import (
	"github.com/corgifs/corgifs/internal/slab"
)

// walkedRun is one gap read a walk kept: a slab of the source's bytes
// from off.
type walkedRun struct {
	data   []byte // a slab, charged to the budget
	off    int64  // file offset of data[0]
	blocks []int32
	left   int  // blocks still kept
	pinned int  // takes copying out of data now
	gone   bool // dropped: unmapped once no take copies from it
}

// walkedBlock is where a kept block's bytes are.
type walkedBlock struct {
	run    *walkedRun
	off, n int64 // the block's bytes in its file
}

// walked is the loader's kept blocks. Guarded by Loader.mu.
type walked struct {
	blocks map[int32]walkedBlock
	runs   []*walkedRun // oldest first
	kept   int64        // bytes of blocks kept, ever (Stats.WalkKeptBytes)
	taken  int64        // blocks served from here (Stats.WalkTaken)
}

// walkRoom returns a slab of n bytes for a gap read to be kept, or nil when
// the budget has no room for it beside a buffer as large as the largest so
// far (the next prefetch): a kept read never takes a buffer's memory.
func (l *Loader) walkRoom(n int64) *walkedRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mem.used+n+l.mem.largest > l.mem.budget {
		return nil
	}
	mem, err := slab.Map(n)
	if err != nil {
		return nil
	}
	l.mem.used += int64(cap(mem))
	l.mem.mapped += int64(cap(mem))
	l.mem.peak = max(l.mem.peak, l.mem.used)
	return &walkedRun{data: mem}
}

// keepWalked keeps the blocks of run, read from file offset off, whose
// bytes it holds whole. With no block to keep the slab is given back.
func (l *Loader) keepWalked(run *walkedRun, off int64, blocks []int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	run.off = off
	if l.walk.blocks == nil {
		l.walk.blocks = make(map[int32]walkedBlock)
	}
	for _, id := range blocks {
		b := l.ix.Blocks[id]
		if _, ok := l.walk.blocks[id]; ok || b.Offset < off || b.Offset+b.Len > off+int64(len(run.data)) {
			continue // kept by another walk's read, or not all here
		}
		l.walk.blocks[id] = walkedBlock{run: run, off: b.Offset, n: b.Len}
		run.blocks = append(run.blocks, id)
		run.left++
		l.walk.kept += b.Len
	}
	if run.left == 0 {
		l.unmapWalkedLocked(run)
		return
	}
	l.walk.runs = append(l.walk.runs, run)
}

// takeWalked copies the kept bytes of extent e into dst and forgets them,
// reporting whether it had them.
func (l *Loader) takeWalked(e extent, dst []byte) bool {
	if e.block < 0 || l.proof == nil || l.proof.ahead == nil || l.proof.ahead.keep == nil {
		return false // nothing is kept: no lock for it
	}
	l.mu.Lock()
	w, ok := l.walk.blocks[e.block]
	if !ok || w.off != e.off || w.n != e.n || int64(len(dst)) != e.n {
		l.mu.Unlock()
		return false
	}
	delete(l.walk.blocks, e.block)
	w.run.pinned++
	l.mu.Unlock()
	// Outside the lock: a megabyte's copy must not hold up the readers.
	// Pinned, the slab is not unmapped under it.
	copy(dst, w.run.data[w.off-w.run.off:w.off-w.run.off+w.n])
	l.mu.Lock()
	defer l.mu.Unlock()
	w.run.pinned--
	w.run.left--
	l.walk.taken++
	if w.run.left == 0 || w.run.gone {
		l.retireWalkedLocked(w.run)
	}
	return true
}

// dropWalkedLocked drops the oldest kept read that no take copies from,
// reporting whether there was one. l.mu must be held.
func (l *Loader) dropWalkedLocked() bool {
	for _, r := range l.walk.runs {
		if r.pinned == 0 {
			for _, id := range r.blocks {
				if w, ok := l.walk.blocks[id]; ok && w.run == r {
					delete(l.walk.blocks, id)
				}
			}
			l.retireWalkedLocked(r)
			return true
		}
	}
	return false
}

// walkedFreeLocked is what dropWalkedLocked can free. l.mu must be held.
func (l *Loader) walkedFreeLocked() int64 {
	var n int64
	for _, r := range l.walk.runs {
		if r.pinned == 0 {
			n += int64(cap(r.data))
		}
	}
	return n
}

// retireWalkedLocked forgets run, and gives its slab back once no take
// copies from it. l.mu must be held.
func (l *Loader) retireWalkedLocked(r *walkedRun) {
	r.gone = true
	if r.pinned > 0 {
		return // the last take retires it
	}
	for i, x := range l.walk.runs {
		if x == r {
			l.walk.runs = append(l.walk.runs[:i], l.walk.runs[i+1:]...)
			break
		}
	}
	l.unmapWalkedLocked(r)
	// Get may be waiting for memory.
	l.signalLocked()
}

func (l *Loader) unmapWalkedLocked(r *walkedRun) {
	if r.data == nil {
		return
	}
	l.mem.used -= int64(cap(r.data))
	slab.Unmap(r.data)
	r.data = nil
}
