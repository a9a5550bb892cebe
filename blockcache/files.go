package blockcache

import (
	"errors"
	"fmt"
	"sync"

	"github.com/corgifs/corgifs/source"
)

// Source files are opened (source.Source.Open) by the loader's workers as
// they reach them, and kept open in a pool of bounded size shared by all
// loads: a buffer of 25,000 one-record local files, or many readers
// loading at once, must not run the process out of descriptors. A file is
// only ever used by the load that opened it, so that every load checks
// every file it reads against the index (a file changed or replaced
// between loads is seen), as when each load opened its files itself. A
// remote file holds no descriptor; counting it costs nothing, since idle
// ones are closed to make room.

// maxPoolFiles bounds the pool whatever the open-file limit: a worker holds
// one file at a time, and the loader runs at most a few dozen workers.
const maxPoolFiles = 1024

// filePool bounds the source descriptors open at once across all loads.
// Idle descriptors stay open for their load until the pool needs room.
type filePool struct {
	mu    sync.Mutex
	limit int // descriptors
	open  int // descriptors open or being opened
	// Files with refs == 0, least recently used at the front.
	idle    idleList[poolFile]
	waiters int
	freed   chan struct{}
}

func newFilePool(limit int) *filePool {
	return &filePool{limit: max(limit, 2), freed: make(chan struct{}), idle: newIdleList(func(f *poolFile) *links[poolFile] { return &f.links })}
}

// poolFile is one source file opened for one load.
type poolFile struct {
	source.File
	file   int32
	set    *fileSet
	slots  int // descriptors counted: 2 where a direct twin may be opened
	refs   int
	opened chan struct{} // closed once File or err is set
	err    error
	// direct is set when the load may read the file with ReadDirect (a
	// source.DirectReader), whose descriptor is counted in slots.
	direct bool

	links[poolFile] // in filePool.idle while no load uses it
}

func (f *poolFile) close() {
	if f.File != nil {
		f.File.Close()
	}
}

// fileSet is the files one load has open in the pool.
type fileSet struct {
	l      *Loader
	files  map[int32]*poolFile
	direct bool
}

func (l *Loader) newFileSet(direct bool) *fileSet {
	return &fileSet{l: l, files: make(map[int32]*poolFile), direct: direct}
}

// acquire returns source file i open for reading, opening it (and checking
// it against the index) if the set does not hold it, after waiting for room
// in the pool if it is full. off is where the caller reads first, for
// errors. Every acquire is paired with a release.
func (s *fileSet) acquire(i int32, off int64) (*poolFile, error) {
	p := s.l.fetch.files
	slots := 1
	if s.direct {
		slots = 2
	}
	p.mu.Lock()
	for {
		if f := s.files[i]; f != nil {
			p.idle.remove(f)
			f.refs++
			p.mu.Unlock()
			<-f.opened
			if f.err != nil {
				s.release(f)
				return nil, f.err
			}
			return f, nil
		}
		if p.makeRoomLocked(slots) {
			break
		}
		// Every descriptor is in use by a worker, which gives it back
		// once its read is done: wait for one.
		ch := p.freed
		p.waiters++
		p.mu.Unlock()
		<-ch
		p.mu.Lock()
		p.waiters--
	}
	f := &poolFile{file: i, set: s, slots: slots, refs: 1, opened: make(chan struct{}), direct: s.direct}
	p.open += slots
	s.files[i] = f
	p.mu.Unlock()
	f.File, f.err = s.l.open(i, off)
	close(f.opened)
	if f.err != nil {
		s.release(f)
		return nil, f.err
	}
	return f, nil
}

// release gives back a file taken by acquire.
func (s *fileSet) release(f *poolFile) {
	p := s.l.fetch.files
	p.mu.Lock()
	defer p.mu.Unlock()
	f.refs--
	if f.refs > 0 {
		return
	}
	if f.err != nil {
		// Not kept: a later acquire opens the file again.
		p.closeLocked(f)
		return
	}
	p.idle.push(f)
	p.signalLocked()
}

// close closes the set's files; none may be in use.
func (s *fileSet) close() {
	p := s.l.fetch.files
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range s.files {
		p.closeLocked(f)
	}
}

// makeRoomLocked makes room for n more descriptors, closing idle files,
// least recently used first. It reports whether there is room.
func (p *filePool) makeRoomLocked(n int) bool {
	for p.open+n > p.limit {
		f := p.idle.head
		if f == nil {
			return false
		}
		p.closeLocked(f)
	}
	return true
}

// closeLocked closes f and removes it from its set and the pool.
func (p *filePool) closeLocked(f *poolFile) {
	p.idle.remove(f)
	if f.set.files[f.file] == f {
		delete(f.set.files, f.file)
	}
	f.close()
	p.open -= f.slots
	f.slots = 0
	p.signalLocked()
}

func (p *filePool) signalLocked() {
	if p.waiters == 0 {
		return
	}
	close(p.freed)
	p.freed = make(chan struct{})
}

// open opens source file i, to read at off first, pinned to the version
// that was indexed (for a local file: checked now against its size and
// modification time, the descriptor then reads that very file).
func (l *Loader) open(i int32, off int64) (source.File, error) {
	fl := &l.ix.Files[i]
	f, err := l.src.Open(fl.Path, fl.Version)
	if err != nil {
		path := l.ix.Path(i)
		if errors.Is(err, source.ErrNotRegular) {
			l.log.Error("source file is not a regular file; its records give EIO", "file", path, "err", err)
		}
		return nil, fmt.Errorf("read %s at offset %d: %w", path, off, err)
	}
	return f, nil
}
