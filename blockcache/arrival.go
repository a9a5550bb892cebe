package blockcache

// Arrival: a Buf served while it loads. When the index knows every
// extent's record count, each record's place in Starts is known before a
// byte is read, so a reader need not wait for the whole buffer: Begin
// returns the Buf as soon as its layout is set, and Await waits for the
// extent of one record. The loader reads the extents in the order the
// caller's permutation first needs them (Unit.Order), so that serving
// overlaps loading; what is served, and where, does not change.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// arrivals tracks the extents of a Buf read so far.
type arrivals struct {
	// first[i] is the index in Starts of extent i's first record;
	// first[len(exts)] is the record count. Set before laid closes.
	first []int
	// complete is set once every extent has arrived: Arrived then needs
	// no lock.
	complete atomic.Bool
	mu       sync.Mutex
	done     []bool // by extent
	// changed, made by the first Await that waits, is closed at the next
	// arrival: no channel is made for extents nobody waits for.
	changed chan struct{}
}

// layOut prepares a for n extents whose records start at first.
func (a *arrivals) layOut(first []int, n int) {
	a.first = first
	a.complete.Store(false)
	a.mu.Lock()
	a.done = slices.Grow(a.done[:0], n)[:n]
	clear(a.done)
	a.changed = nil
	a.mu.Unlock()
}

// arrive marks extent i read, checked and split.
func (a *arrivals) arrive(i int) {
	a.mu.Lock()
	a.done[i] = true
	if a.changed != nil {
		close(a.changed)
		a.changed = nil
	}
	a.mu.Unlock()
}

// extent returns the extent that holds record r.
func (a *arrivals) extent(r int) int {
	// The first extent whose first record is past r, less one: extents
	// of no records (first[i] == first[i+1]) are passed over.
	i, _ := slices.BinarySearch(a.first, r+1)
	return i - 1
}

// Partial reports whether some of b's extents may still be arriving: its
// records must then be awaited (Await) before they are read. A Buf
// returned by Get, or whose index does not know its record counts (a
// probed index), is never partial.
func (b *Buf) Partial() bool { return b.partial && !b.arr.complete.Load() }

// Arrived reports whether record r of b (numbered as in Starts) has been
// read and checked, so that Starts[r], RecordLen(r) and its bytes may be
// used.
func (b *Buf) Arrived(r int) bool {
	if !b.partial || b.arr.complete.Load() {
		return true
	}
	a := &b.arr
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.done[a.extent(r)]
}

// Begin is Get, but returns as soon as the Buf's layout is known (Starts
// has its length) rather than once it is loaded, when the index knows the
// record count of every extent; the caller then calls Await before it
// reads a record. Otherwise it waits for the whole Buf, as Get does.
func (l *Loader) Begin(ctx context.Context, u Unit) (*Buf, error) {
	return l.get(ctx, u, true)
}

// Await waits until record r of b has arrived. It fails if b's load
// failed before the record's extent was read, with the load's error (which
// names the file and offset that failed), or when ctx is done.
func (l *Loader) Await(ctx context.Context, b *Buf, r int) error {
	var start time.Time
	for {
		if !b.partial || b.arr.complete.Load() {
			break
		}
		a := &b.arr
		a.mu.Lock()
		done := a.done[a.extent(r)]
		if !done && a.changed == nil {
			a.changed = make(chan struct{})
		}
		ch := a.changed
		a.mu.Unlock()
		if done {
			break
		}
		if start.IsZero() {
			start = time.Now()
		}
		select {
		case <-ch:
		case <-b.ready:
			// Every extent that arrived did so before ready closed.
			if b.Arrived(r) {
				continue
			}
			if b.err != nil {
				return b.err
			}
			return fmt.Errorf("record %d of a buffer: its load ended without it: %w", r, syscall.EIO)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !start.IsZero() {
		l.stalled(b, time.Since(start), "its records still arriving")
	}
	return nil
}

// PrefetchAfter is Prefetch, but the loads begin once after has loaded: a
// buffer served while it loads keeps every read slot for its own blocks,
// which its reader waits for, rather than sharing them with the buffers
// after it. The first unit is in the table when PrefetchAfter returns, as
// with Prefetch, so that a reader that gets there first waits for it
// rather than loading it a second time.
func (l *Loader) PrefetchAfter(ctx context.Context, after *Buf, units ...Unit) {
	if after == nil || isReady(after) {
		l.Prefetch(ctx, units...)
		return
	}
	l.prefetchUnits(ctx, after.ready, units)
}

// Failed reports whether b's load has ended in an error: a user that kept
// b (Reacquire) loads its unit again rather than serve from it.
func (b *Buf) Failed() bool { return isReady(b) && b.err != nil }
