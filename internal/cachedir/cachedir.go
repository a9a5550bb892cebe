// Package cachedir opens the directories corgifs writes its own files in
// (the index's sidecars, the disk cache's entries, feedback vectors and
// orders) with checks that nobody else can write them: owner and mode
// checked on the descriptor, files opened relative to it and never through
// a link, written as new files renamed into place.
package cachedir

import (
	"errors"
	"fmt"
	"io"
)

// The cache directory's checks are made on descriptors, with the *at
// system calls of Unix (cachedir_unix.go). Where they are missing
// (cachedir_other.go), no cache directory is used: the index is built
// again at every mount.

// ErrUnsafe marks a cache directory that corgifs refuses to use:
// anyone else who can write it could plant an index that serves records
// twice or never, or a symbolic link that makes corgifs overwrite a file.
var ErrUnsafe = errors.New("unsafe cache directory")

// unsafeDirError refuses the directory path for the reason why. Several
// flags name directories that openCacheDir checks (--cache-dir for the
// index, feedback and orders; --disk-cache for blocks): the message names
// no flag unless the caller says which one with ForFlag, so that a refused
// --disk-cache is not blamed on --cache-dir and the index.
type unsafeDirError struct {
	path, why string
	// flag and keeps, when set, name the flag that gave the directory
	// and what corgifs keeps in it.
	flag, keeps string
}

func (e *unsafeDirError) Error() string {
	if e.flag == "" {
		return fmt.Sprintf("%v: directory %s %s; corgifs must be the only one able to write the files it keeps there: use a directory that you own and only you can write (corgifs creates a missing one with mode 0700), or fix this one (chown/chmod go-w)", ErrUnsafe, e.path, e.why)
	}
	return fmt.Sprintf("%v: cache directory %s %s; corgifs keeps %s there and must be the only one able to write it: pass a %s that you own and only you can write (corgifs creates a missing one with mode 0700), or fix this one (chown/chmod go-w)", ErrUnsafe, e.path, e.why, e.keeps, e.flag)
}

func (e *unsafeDirError) Unwrap() error { return ErrUnsafe }

// ForFlag makes an unsafeDirError in err name flag (a placeholder of
// package option, {cache-dir}) and what corgifs keeps
// in the directory; other errors are returned as they are.
func ForFlag(err error, flag, keeps string) error {
	var u *unsafeDirError
	if errors.As(err, &u) {
		c := *u
		c.flag, c.keeps = flag, keeps
		return &c
	}
	return err
}

// readSmall reads at most limit bytes of name, opened as open does.
func (d *cacheDir) readSmall(name string, limit int64) ([]byte, error) {
	f, err := d.open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}
