package blockcache

// The references to Bufs: taken again, served to a reader, released.

import "time"

// Reacquire takes a new reference to a Buf that its user released earlier,
// if it has not been evicted since. A user that holds a Buf only while it
// reads from it leaves the memory of idle readers to the budget, so an open
// file nobody reads cannot starve the others.
func (l *Loader) Reacquire(b *Buf) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b.dropped {
		return false
	}
	l.idle.remove(b)
	b.refs++
	b.used = l.clock()
	return true
}

// serveGrace is how long a Buf that a user serves to a reader is kept
// from other users' loads after its last use. Readers that share a short
// budget then take turns: one that waits for memory waits for another to
// finish its buffer rather than evicting the buffer that reader is in,
// which it would only load again, evicting another's (8 readers with a
// budget of two buffers read each byte 6 times). A reader that holds its
// file open without reading gives its buffer up after this long, so a
// waiting read always proceeds.
const serveGrace = time.Second

// clock returns the time since the loader was made.
func (l *Loader) clock() time.Duration { return time.Since(l.start) }

// protectedLocked reports whether b is kept from loads that need memory. l.mu
// must be held.
func (l *Loader) protectedLocked(b *Buf, now time.Duration) bool {
	return b.servers > 0 && now-b.used < serveGrace
}

// Serve tells the loader that the caller, which holds b, serves it to a
// reader that goes on reading it: other loads leave b alone until the
// caller passes it, or stops using it for serveGrace. Each Serve is paired
// with a Pass.
func (l *Loader) Serve(b *Buf) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b.servers++
	b.used = l.clock()
}

// Pass tells the loader that the caller has moved on from b, which it
// served: b stays cached, but other loads may take its memory.
func (l *Loader) Pass(b *Buf) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b.servers > 0 {
		b.servers--
		if b.servers == 0 {
			l.signalLocked()
		}
	}
}

// Release drops a reference taken by Get.
func (l *Loader) Release(b *Buf) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b.refs--
	b.used = l.clock()
	if b.refs > 0 {
		return
	}
	if b.err != nil {
		l.dropLocked(b)
	} else {
		l.idle.push(b)
	}
	l.signalLocked()
}

// signalLocked wakes the Gets waiting for memory. l.mu must be held.
func (l *Loader) signalLocked() {
	if l.mem.waiters == 0 {
		return
	}
	close(l.mem.changed)
	l.mem.changed = make(chan struct{})
}
