// Package source is the seam between a dataset's files and the index and
// loader that read them: a Source lists the files, opens one for reads at
// offsets, and gives each a version that every read is checked against, so
// that a file changed since indexing is never served as if it were the
// one indexed.
//
// source/local reads a directory, source/s3 a bucket. What only some
// sources can do is an optional interface, found by type assertion in the
// style of go-fuse's fs/api.go: a local directory is a Local source and
// its listing can log (Logged); a local file can be read around the page
// cache (DirectReader) and asked what of it is cached (PageCached). A
// reader uses these when present and the plain methods when not, so the
// index and the loader name no concrete source: the caller opens one and
// hands it in.
package source

import (
	"context"
	"errors"
	"io"
	"log/slog"
)

// Object is one file of a dataset as listed.
type Object struct {
	Path  string // relative to the source's root, slash separated
	Size  int64
	Mtime int64 // modification time, Unix nanoseconds
	// Version changes whenever the content may have changed: the ETag of
	// an object in a store; the size, modification time, device, inode
	// and change time of a local file (local/version.go).
	Version string
}

// Source is a dataset's files in a store.
type Source interface {
	// String names the source for people: s3://bucket/prefix.
	String() string
	// ID names the source for its index sidecar: everything that says
	// which bytes it serves (the endpoint as well as bucket and prefix).
	ID() string
	// List returns the files whose base names match, sorted by path.
	List(ctx context.Context, match func(base string) bool) ([]Object, error)
	// Open returns a reader of the file at path pinned to version: the
	// open (a local file, checked once) or a read (an object, each GET
	// pinned) of a file that is no longer at that version fails with an
	// error that wraps ErrChanged, never with other bytes.
	Open(path, version string) (File, error)
}

// File is a file of a source opened for reads at offsets. ReadAt ends in
// bounded time, with the bytes or an error.
type File interface {
	io.ReaderAt
	io.Closer
	// Name names the file in messages: s3://bucket/prefix/path.
	Name() string
}

// Requester is a File whose reads are requests to a store that bills
// each (an object store's GETs): ReadAtCounted is ReadAt, and says how many
// requests it made (every range of a split read, every try), so that a
// loader counts them by epoch beside the bytes.
type Requester interface {
	ReadAtCounted(p []byte, off int64) (n int, requests int64, err error)
}

// RunRequester is a Requester that reads adjacent ranges of a file with
// one request: a store whose cost is per request serves one large range
// at several times the speed of as many small ones.
type RunRequester interface {
	Requester
	// ReadRunCounted fills ps[0], ps[1], ... with the file's bytes from
	// off on, back to back, with one request (more only to try again
	// after a failure, from the first range not yet in), and calls
	// arrived(i), in order, once ps[i] holds its bytes, checked as any
	// read's; an error of arrived ends the read with it. A range is
	// passed to arrived once. It returns the requests it made.
	ReadRunCounted(ps [][]byte, off int64, arrived func(i int) error) (requests int64, err error)
}

// ErrChanged says that a file is no longer the version that was indexed.
var ErrChanged = errors.New("changed since indexing")

// ErrNotRegular marks a source path that is not a regular file (a named
// pipe or a device put in place of a listed file): it is refused at once,
// never waited on.
var ErrNotRegular = errors.New("not a regular file")

// Local is a Source of the files of a directory of this machine (or of a
// shared file system mounted as one). Its files are named by their paths;
// no cache may be written inside it; and its reads are served by the page
// cache and the device, where a few readers keep up, not one network round
// trip each.
type Local interface {
	Source
	// Path returns the absolute path of the file at rel.
	Path(rel string) string
}

// Logged is a Source whose listing logs the names it leaves out (a path
// too long, a loop of links).
type Logged interface {
	// WithLogger returns a copy of the source that logs to log.
	WithLogger(log *slog.Logger) Source
}

// DirectAlign is the alignment ReadDirect needs: of the file offset, the
// length and the memory. A page suits every logical block size in use.
const DirectAlign = 4096

// ErrNoDirect says that a file cannot be read around the page cache (no
// O_DIRECT on its file system, or a stricter alignment): read it through
// ReadAt instead.
var ErrNoDirect = errors.New("direct I/O not supported")

// DirectReader is a File that can be read around the page cache, straight
// from the device into the caller's memory (O_DIRECT).
type DirectReader interface {
	// ReadDirect fills win, which must start at a DirectAlign-aligned
	// address and be a multiple of DirectAlign long, with the file's
	// bytes from the aligned offset off, up to the end of the file. It
	// returns the number of bytes read; an error wrapping ErrNoDirect
	// says to read through ReadAt instead.
	ReadDirect(win []byte, off int64) (int, error)
}

// PageCached is a File whose reads go through the kernel's page cache: a
// reader reads it a piece at a time (each ReadAt is cheap), and may ask
// what is cached and read ahead.
type PageCached interface {
	// Uncached reports whether most of the n bytes at off are not in the
	// page cache, so that a DirectReader's ReadDirect beats copying them
	// from it. False when it cannot be known.
	Uncached(off, n int64) bool
	// WillNeed asks the kernel to read the n bytes at off into the page
	// cache ahead of small reads of them.
	WillNeed(off, n int64)
}
