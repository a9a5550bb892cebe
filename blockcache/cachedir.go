package blockcache

import (
	"errors"
	"io"
)

// The cache directory's checks are made on descriptors, with the *at
// system calls of Unix (cachedir_unix.go). Where they are missing
// (cachedir_other.go), no cache directory is used: the index is built
// again at every mount.

// ErrUnsafeCacheDir marks a cache directory that corgifs refuses to use:
// anyone else who can write it could plant an index that serves records
// twice or never, or a symbolic link that makes corgifs overwrite a file.
var ErrUnsafeCacheDir = errors.New("unsafe cache directory")

// readSmall reads at most limit bytes of name, opened as open does.
func (d *cacheDir) readSmall(name string, limit int64) ([]byte, error) {
	f, err := d.open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}
