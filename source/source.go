// Package source is the seam between a dataset's files and the index and
// loader that read them: a Source lists the files, opens one for reads at
// offsets, and gives each a version that every read is checked against, so
// that a file changed since indexing is never served as if it were the
// one indexed.
//
// Local directories are still read by blockcache itself (O_DIRECT,
// cachestat, a descriptor pool, os.Root), which is the fast path; sources
// in other stores (source/s3) implement Source.
package source

import (
	"context"
	"errors"
	"io"
)

// Object is one file of a dataset as listed.
type Object struct {
	Path  string // relative to the source's root, slash separated
	Size  int64
	Mtime int64 // modification time, Unix nanoseconds
	// Version changes whenever the content may have changed: the ETag of
	// an object in a store.
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
	// Open returns a reader of the file at path pinned to version: a read
	// of a file that is no longer at that version fails with an error
	// that wraps ErrChanged, never with other bytes.
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

// ErrChanged says that a file is no longer the version that was indexed.
var ErrChanged = errors.New("changed since indexing")
