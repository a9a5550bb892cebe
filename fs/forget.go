package fs

import (
	"sync"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// forgetter has the kernel drop names that it should not cache. A name
// with a timeout of 0 is looked up again on its next use, but the kernel
// keeps it (and so the daemon its node) until memory runs short; a
// notification that the entry is invalid drops it as soon as nobody uses
// it, and the kernel then FORGETs its node. The notifications go from one
// goroutine, after the lookup's reply: the kernel takes them with the
// directory locked, which the lookup itself holds until its reply.
type forgetter struct {
	mu      sync.Mutex
	pending []dirEntry
	wake    chan struct{}
}

type dirEntry struct {
	dir  *gofs.Inode
	name string
}

func newForgetter() *forgetter {
	return &forgetter{wake: make(chan struct{}, 1)}
}

// add queues the name in dir to be dropped. It never blocks: a lookup
// that waited here could hold the lock of a directory that the
// notifications wait for.
func (f *forgetter) add(dir *gofs.Inode, name string) {
	f.mu.Lock()
	f.pending = append(f.pending, dirEntry{dir, name})
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// run sends the notifications until stop is closed.
func (f *forgetter) run(stop <-chan struct{}) {
	var batch []dirEntry
	for {
		select {
		case <-stop:
			return
		case <-f.wake:
		}
		f.mu.Lock()
		batch, f.pending = f.pending, batch[:0]
		f.mu.Unlock()
		for i, e := range batch {
			// ENOENT (the kernel has already dropped the name) and, after
			// unmount, ENODEV are expected; nothing else can be done.
			e.dir.NotifyEntry(e.name)
			batch[i] = dirEntry{}
		}
	}
}
