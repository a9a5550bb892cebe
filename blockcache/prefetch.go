package blockcache

// Prefetch: units loaded ahead of the reader, never waiting for memory.

import (
	"context"
)

// DefaultPrefetch is the buffers a stream loads ahead by default. With
// one, a reader that is served about as fast as the disk loads waits
// whenever a load runs a little slow; with two, the loader keeps working
// while the reader catches up.
const DefaultPrefetch = 2

// DefaultPrefetchBytes bounds, by default (LoaderOptions.PrefetchBytes),
// the bytes of the buffers a stream loads ahead: the next buffer is always
// prefetched, and more, up to the prefetch depth, while the buffers ahead
// hold at most this many bytes. With buffers of a few MiB the depth of two
// rides out a slow load; with buffers of hundreds of MiB (a part that fits
// memory is a few buffers), the first one ahead keeps every read slot
// busy, and a second would read most of the next epoch while this one is
// served (issue 25: 894 MB read from the store for a cold epoch of 537 MB).
const DefaultPrefetchBytes = 128 << 20

// NoPrefetch as LoaderOptions.Prefetch turns prefetching off: a buffer
// is loaded when a reader reaches it.
const NoPrefetch = -1

// PrefetchDepth returns how many buffers a stream loads ahead of the one
// it serves (LoaderOptions.Prefetch), 0 for none.
func (l *Loader) PrefetchDepth() int { return l.prefetch }

// PrefetchBytes returns how many bytes the buffers a stream loads ahead
// may hold beyond the first (LoaderOptions.PrefetchBytes).
func (l *Loader) PrefetchBytes() int64 { return l.ahead }

// prefetchDepth is the depth LoaderOptions.Prefetch o asks for.
func prefetchDepth(o int) int {
	switch {
	case o == 0:
		return DefaultPrefetch
	case o < 0:
		return 0
	}
	return o
}

// Prefetch loads units in the background, one after the other, each only
// once the one before is loaded: the nearest is wanted first, and loads
// that share the disk would all finish late. A unit already loaded or
// loading is passed over; the rest are skipped as soon as one finds no
// memory free without waiting or evicting another prefetch, or once ctx is
// done. The first unit is in the table when Prefetch returns, so a Get right
// after finds it.
func (l *Loader) Prefetch(ctx context.Context, units ...Unit) {
	l.prefetchUnits(ctx, nil, units)
}

// prefetchUnits is Prefetch, whose loads begin once after is closed (at once
// if it is nil).
func (l *Loader) prefetchUnits(ctx context.Context, after <-chan struct{}, units []Unit) {
	if len(units) == 0 {
		return
	}
	b, ready := l.startPrefetch(units[0])
	if ready == nil {
		return
	}
	go func() {
		if after != nil {
			<-after // a load always ends
		}
		for _, u := range units[1:] {
			if b != nil {
				l.load(b)
			} else {
				<-ready
			}
			if ctx.Err() != nil {
				return // nobody wants the rest any more
			}
			if b, ready = l.startPrefetch(u); ready == nil {
				return
			}
		}
		if b != nil {
			l.load(b)
		}
	}()
}

// startPrefetch enters u in the table for the caller to load, and returns
// it with the channel closed when it is loaded. If u is in the table
// already, the Buf is nil and the channel that of the Buf there; if there
// is no memory for it, both are nil.
func (l *Loader) startPrefetch(u Unit) (*Buf, <-chan struct{}) {
	h := l.hash(u)
	n := l.size(u)
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.lookupLocked(h, u); b != nil {
		return nil, b.ready
	}
	var b *Buf
	if l.mem.waiters == 0 {
		// Readers waiting for memory come first: a prefetch would take
		// what one of them waits for.
		b = l.reserveLocked(n, false)
	}
	if b == nil {
		l.count.prefetchSkip.Add(1)
		return nil, nil
	}
	b.unit, b.hash, b.prefetched = u.clone(), h, true
	l.bufs[h] = append(l.bufs[h], b)
	l.idle.push(b) // evictable, but only after older idle Bufs
	l.count.prefetchIssued.Add(1)
	return b, b.ready
}

// Forget tells the loader that the prefetched units nobody has taken yet
// are no longer wanted, as when a reader closes its file midway: they stay
// cached, but as the least of the idle Bufs, and a later prefetch may take
// their memory. Without it they would hold memory no prefetch may claim.
func (l *Loader) Forget(units ...Unit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range units {
		if b := l.lookupLocked(l.hash(u), u); b != nil && b.refs == 0 && b.prefetched {
			b.prefetched = false
		}
	}
	l.signalLocked()
}
