package blockcache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Source files are opened by the loader's workers as they reach them, and
// kept open in a pool of bounded size shared by all loads: a buffer of
// 25,000 one-record files, or many readers loading at once, must not run
// the process out of descriptors. A descriptor is only ever used by the
// load that opened it, so that every load checks every file it reads
// against the index (a file changed or replaced between loads is seen),
// as when each load opened its files itself.

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
	*os.File
	file   int32
	set    *fileSet
	slots  int // descriptors counted: 2 where a direct twin may be opened
	refs   int
	opened chan struct{} // closed once File or err is set
	err    error

	direct bool
	once   sync.Once
	dio    *os.File

	links[poolFile] // in filePool.idle while no load uses it
}

// directFile returns the O_DIRECT twin of f, or nil if direct reads are off
// or cannot be had. Its descriptor is counted in f.slots.
func (f *poolFile) directFile() *os.File {
	if !f.direct {
		return nil
	}
	f.once.Do(func() {
		if dio, err := openDirect(f.File); err == nil {
			f.dio = dio
		}
	})
	return f.dio
}

func (f *poolFile) close() {
	if f.File != nil {
		f.File.Close()
	}
	if f.dio != nil {
		f.dio.Close()
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
	p := s.l.files
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
	p := s.l.files
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
	p := s.l.files
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

// openRegular opens a source file for reading without blocking, and
// refuses it unless it is a regular file: opening a named pipe put in place
// of a source file would wait for a writer forever, and reading a device
// could too. name is relative to root, or absolute if root is empty
// (symbolic links are followed then).
func openRegular(root, name string) (*os.File, fs.FileInfo, error) {
	flag := os.O_RDONLY | syscall.O_NONBLOCK
	var f *os.File
	var err error
	if root == "" {
		f, err = os.OpenFile(name, flag, 0)
	} else {
		// Beneath the root only: a file replaced by a symbolic link out of
		// the source after indexing is not followed out of it.
		var r *os.Root
		if r, err = os.OpenRoot(root); err == nil {
			f, err = r.OpenFile(filepath.FromSlash(name), flag, 0)
			r.Close()
		}
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fi, fmt.Errorf("%w: it is a %s, not a regular file (replaced since indexing?); refusing to read it: %w",
			errNotRegular, fileKind(fi.Mode()), syscall.EIO)
	}
	return f, fi, nil
}

// errNotRegular marks a source path that is not a regular file.
var errNotRegular = errors.New("not a regular file")

// fileKind names the type of a file mode for a message.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "special file"
}

// open opens source file i, to read at off first, after checking that it
// is the file that was indexed. Only errors that say the file is not what
// was indexed are reported as a changed source: running out of
// descriptors or memory says nothing about the source.
func (l *Loader) open(i int32, off int64) (*os.File, error) {
	path := l.ix.Path(i)
	root, name := l.ix.Root, l.ix.Files[i].Path
	if l.ix.FollowSymlinks {
		root, name = "", path
	}
	f, fi, err := openRegular(root, name)
	switch {
	case errors.Is(err, errNotRegular):
		l.log.Error("source file is not a regular file; its records give EIO", "file", path, "type", fileKind(fi.Mode()))
		return nil, fmt.Errorf("read %s at offset %d: %w", path, off, err)
	case errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE):
		return nil, fmt.Errorf("read %s at offset %d: %w (out of file descriptors: raise the open-file limit, ulimit -n)", path, off, err)
	case changedSource(err):
		return nil, fmt.Errorf("read %s at offset %d: %w (the source changed since indexing; remount to reindex)", path, off, err)
	case err != nil:
		return nil, fmt.Errorf("read %s at offset %d: %w", path, off, err)
	}
	want := l.ix.Files[i]
	if fi.Size() != want.Size || fi.ModTime().UnixNano() != want.Mtime {
		f.Close()
		return nil, fmt.Errorf("read %s at offset %d: file changed since indexing (size %d, was %d; modified %s, was %s); remount to reindex: %w",
			path, off, fi.Size(), want.Size, fi.ModTime().Format(time.RFC3339Nano), time.Unix(0, want.Mtime).Format(time.RFC3339Nano), syscall.ESTALE)
	}
	return f, nil
}

// changedSource reports whether an error opening a source file says that
// the file is no longer where, or what, the index found.
func changedSource(err error) bool {
	for _, e := range []error{fs.ErrNotExist, syscall.ENOTDIR, syscall.ELOOP, syscall.ESTALE, syscall.EISDIR} {
		if errors.Is(err, e) {
			return true
		}
	}
	// os.Root refuses a path that now leads out of the root, with an
	// error of its own that is not exported.
	return err != nil && strings.Contains(err.Error(), "escapes from parent")
}
