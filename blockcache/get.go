package blockcache

// The read path: Get finds or loads the Buf of a unit and waits for it.

import (
	"context"
	"fmt"
	"hash/maphash"
	"time"
)

// size returns the slab size u needs.
func (l *Loader) size(u Unit) int64 {
	var n int64
	if u.Records != nil {
		for _, r := range u.Records {
			n += int64(l.ix.Frames[r])
		}
		return n
	}
	for _, id := range u.Blocks {
		_, span := l.placeBlock(l.ix.Blocks[id])
		n += span
	}
	return n
}

func (l *Loader) hash(u Unit) uint64 {
	var h maphash.Hash
	h.SetSeed(l.seed)
	maphash.WriteComparable(&h, u.Records != nil)
	for _, id := range u.ids() {
		maphash.WriteComparable(&h, id)
	}
	return h.Sum64()
}

// lookupLocked finds the Buf for u. l.mu must be held.
func (l *Loader) lookupLocked(h uint64, u Unit) *Buf {
	for _, b := range l.bufs[h] {
		if b.unit.equal(u) {
			return b
		}
	}
	return nil
}

// Get returns the Buf holding u, reading it unless it is loaded or being
// loaded already. It waits for memory when the budget is spent.
func (l *Loader) Get(ctx context.Context, u Unit) (*Buf, error) {
	return l.get(ctx, u, false)
}

// get is Get, and with partial set Begin.
func (l *Loader) get(ctx context.Context, u Unit, partial bool) (*Buf, error) {
	h := l.hash(u)
	n := l.size(u)
	if n > l.mem.budget {
		return nil, fmt.Errorf("a buffer of %d bytes does not fit in the memory budget of %d bytes", n, l.mem.budget)
	}
	l.mu.Lock()
	for {
		if b := l.lookupLocked(h, u); b != nil {
			l.acquireLocked(b, u.Epoch)
			l.mu.Unlock()
			if partial {
				return l.waitLaid(ctx, b)
			}
			return l.wait(ctx, b)
		}
		if b := l.reserveLocked(n, true); b != nil {
			b.unit, b.hash, b.refs, b.used = u.clone(), h, 1, l.clock()
			l.bufs[h] = append(l.bufs[h], b)
			l.mu.Unlock()
			if partial {
				// The load runs on, like a prefetch; its reader waits
				// for the records it needs (Await).
				go l.load(b)
				return l.waitLaid(ctx, b)
			}
			start := time.Now()
			l.load(b)
			l.stalled(b, time.Since(start), "not prefetched")
			return l.wait(ctx, b)
		}
		l.count.memoryWaits.Add(1)
		ch := l.mem.changed
		l.mem.waiters++
		l.mu.Unlock()
		// Woken by a release, or once the Bufs other readers are serving
		// may have outlived their grace.
		t := time.NewTimer(serveGrace / 4)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			l.mu.Lock()
			l.mem.waiters--
			l.mu.Unlock()
			return nil, ctx.Err()
		}
		t.Stop()
		l.mu.Lock()
		l.mem.waiters--
	}
}

// acquireLocked takes a reference to a Buf found in the table. l.mu must be held.
func (l *Loader) acquireLocked(b *Buf, epoch int) {
	l.idle.remove(b)
	b.refs++
	b.used = l.clock()
	if b.prefetched {
		b.prefetched = false
		l.count.prefetchHits.Add(1)
	} else {
		l.count.cacheHits.Add(1)
		l.fromMemory(epoch, b.unit)
	}
}

// waitLaid waits for b's layout; a Buf that cannot be served while it
// loads is waited for whole (wait). On failure it drops the reference.
func (l *Loader) waitLaid(ctx context.Context, b *Buf) (*Buf, error) {
	select {
	case <-b.laid:
	default:
		start := time.Now()
		select {
		case <-b.laid:
		case <-ctx.Done():
			l.Release(b)
			return nil, ctx.Err()
		}
		if !b.partial {
			// The whole load was waited for; a partial Buf's reader
			// waits for its records in Await.
			l.stalled(b, time.Since(start), "still loading")
		}
	}
	if !b.partial || isReady(b) {
		return l.wait(ctx, b)
	}
	l.count.servedLoading.Add(1)
	return b, nil
}

// wait waits for b to be loaded; on failure it drops the reference.
func (l *Loader) wait(ctx context.Context, b *Buf) (*Buf, error) {
	select {
	case <-b.ready:
	default:
		start := time.Now()
		select {
		case <-b.ready:
		case <-ctx.Done():
			l.Release(b)
			return nil, ctx.Err()
		}
		l.stalled(b, time.Since(start), "still loading")
	}
	if b.err != nil {
		err := b.err
		l.Release(b)
		return nil, err
	}
	return b, nil
}
