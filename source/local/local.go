// Package local is the Source of a dataset in a local directory (or a
// shared file system mounted as one: NFS, Lustre). It lists the files under
// the directory by the symbolic-link rules of corgifs, opens them without
// blocking and only if they are regular files, beneath the directory unless
// links are followed, and checks every file opened against its version: its
// size, modification time, device, inode and change time when it was
// indexed (version.go).
//
// Its files have the fast paths of local storage as optional methods
// (source.DirectReader, source.PageCached): O_DIRECT reads that leave the
// page cache alone, cachestat(2) to know what is cached, and
// posix_fadvise(WILLNEED). They are Linux's (the _linux.go files); on
// other systems files are read through the page cache.
package local

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/corgifs/corgifs/source"
)

// Source is the files of a dataset under a local directory.
type Source struct {
	root   string // absolute, symbolic links resolved
	follow bool
	log    *slog.Logger
}

// The optional interfaces a local directory has.
var (
	_ source.Local  = (*Source)(nil)
	_ source.Logged = (*Source)(nil)
)

// New returns the source of the directory root, which must be absolute
// with its symbolic links resolved (see Resolve). With follow, listing
// follows symbolic links, which may lead out of root, and files are opened
// by path; without it, nothing outside root is ever listed or read. log
// gets a line for every name the listing leaves out; nil discards them.
func New(root string, follow bool, log *slog.Logger) *Source {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Source{root: root, follow: follow, log: log}
}

// WithLogger returns a copy of s that logs to log (source.Logged).
func (s *Source) WithLogger(log *slog.Logger) source.Source {
	c := *s
	if log != nil {
		c.log = log
	}
	return &c
}

// Resolve returns the absolute path of the directory root with its
// symbolic links resolved: root itself may be a link, named by the user.
func Resolve(root string) (string, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("source: %w", err)
	}
	return real, nil
}

// OpenDir returns the source of the directory root as a user names it:
// its symbolic links resolved (Resolve), and checked to be a directory.
// follow and log are New's.
func OpenDir(root string, follow bool, log *slog.Logger) (*Source, error) {
	root, err := Resolve(root)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("source: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("source %s is not a directory", root)
	}
	return New(root, follow, log), nil
}

// String returns the directory.
func (s *Source) String() string { return s.root }

// ID returns the directory: its files' versions say the rest.
func (s *Source) ID() string { return s.root }

// Path returns the absolute path of the file at rel (source.Local).
func (s *Source) Path(rel string) string { return filepath.Join(s.root, filepath.FromSlash(rel)) }

// Version returns the version of a local file of size bytes last modified
// at mtime (Unix nanoseconds), without the device, inode and change time
// that List adds where the system has them (see versionOf). Open checks
// a version of this form on size and modification time alone.
func Version(size, mtime int64) string {
	return strconv.FormatInt(size, 10) + "-" + strconv.FormatInt(mtime, 10)
}

// Open opens the file at rel for reading, checking that it is a regular
// file still at version: its size, modification time, device, inode and
// change time when it was listed. A file changed or gone since gives an error wrapping
// source.ErrChanged; one that is not a regular file (a named pipe put in
// its place) an error wrapping ErrNotRegular and EIO. The descriptor
// reads the very file that was checked, whatever happens to its path
// since; a file rewritten in place after Open is caught by the checksums
// of the records read.
func (s *Source) Open(rel, version string) (source.File, error) {
	size, mtime, id, err := parseVersion(version)
	if err != nil {
		return nil, err
	}
	root, name := s.root, rel
	if s.follow {
		root, name = "", s.Path(rel)
	}
	f, fi, err := openRegular(root, name)
	switch {
	case errors.Is(err, ErrNotRegular):
		return nil, err
	case errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE):
		return nil, fmt.Errorf("%w (out of file descriptors: raise the open-file limit, ulimit -n)", err)
	case changedSource(err):
		return nil, fmt.Errorf("%w (the source %w; remount to reindex)", err, source.ErrChanged)
	case err != nil:
		return nil, err
	}
	if err := checkVersion(fi, size, mtime, id); err != nil {
		f.Close()
		return nil, fmt.Errorf("file %w (%w); remount to reindex", source.ErrChanged, err)
	}
	return &File{f: f}, nil
}

// File is a local file opened by Source.Open.
type File struct {
	f *os.File

	once sync.Once
	dio  *os.File // the O_DIRECT twin, opened by the first ReadDirect
	derr error
}

// ReadAt reads through the page cache.
func (f *File) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }

// Name returns the path the file was opened by.
func (f *File) Name() string { return f.f.Name() }

// Close closes the file and its O_DIRECT twin, if opened.
func (f *File) Close() error {
	if f.dio != nil {
		f.dio.Close()
	}
	return f.f.Close()
}

// ReadDirect implements source.DirectReader. The first call opens the
// file a second time with O_DIRECT: a caller that bounds its descriptors
// counts two for a file it reads directly.
func (f *File) ReadDirect(win []byte, off int64) (int, error) {
	f.once.Do(func() { f.dio, f.derr = openDirect(f.f) })
	if f.derr != nil {
		return 0, f.derr
	}
	return readDirect(f.dio, win, off)
}

// Uncached implements source.PageCached.
func (f *File) Uncached(off, n int64) bool { return uncached(f.f, off, n) }

// WillNeed implements source.PageCached.
func (f *File) WillNeed(off, n int64) { willNeed(f.f, off, n) }

// openRegular opens a file for reading without blocking, and refuses it
// unless it is a regular file: opening a named pipe put in place of a
// source file would wait for a writer forever, and reading a device could
// too. name is relative to root, or absolute if root is empty (symbolic
// links are followed then).
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
			ErrNotRegular, fileKind(fi.Mode()), syscall.EIO)
	}
	return f, fi, nil
}

// ErrNotRegular marks a source path that is not a regular file; it is
// source.ErrNotRegular, named here too for the callers of this package.
var ErrNotRegular = source.ErrNotRegular

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

// changedSource reports whether an error opening a source file says that
// the file is no longer where, or what, the index found. Running out of
// descriptors or memory says nothing about the source.
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
