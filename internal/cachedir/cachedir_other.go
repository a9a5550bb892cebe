//go:build !unix

package cachedir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
)

// cacheDir is never opened here: without the *at system calls, its owner
// and mode cannot be checked on a descriptor, nor its files kept from
// following a link planted in it, so no index kept in it is trusted.
type cacheDir struct{ path string }

// errNoCacheDir says why no cache directory is used on this system.
var errNoCacheDir = fmt.Errorf("index sidecars are not kept on %s (corgifs cannot check there that only you can write the cache directory); the index is built again at every mount: %w", runtime.GOOS, errors.ErrUnsupported)

// openCacheDir refuses every cache directory, with an error that does not
// wrap ErrUnsafe: Open then builds the index without saving it.
func openCacheDir(path string) (*cacheDir, error) {
	return nil, fmt.Errorf("cache directory %s: %w", path, errNoCacheDir)
}

// Resolve only makes dir absolute: openCacheDir refuses it anyway,
// so nothing is ever written in it, inside the source or elsewhere.
func Resolve(dir, _ string) (string, error) {
	return filepath.Abs(dir)
}

func (d *cacheDir) Close() error { return nil }

func (d *cacheDir) open(name string) (*os.File, error) {
	return nil, fmt.Errorf("open %s: %w", filepath.Join(d.path, name), errNoCacheDir)
}

func (d *cacheDir) exists(string) bool { return false }

func (d *cacheDir) write(name string, _ func(io.Writer) error) error {
	return fmt.Errorf("write %s: %w", filepath.Join(d.path, name), errNoCacheDir)
}

func (d *cacheDir) remove(name string) error {
	return fmt.Errorf("remove %s: %w", filepath.Join(d.path, name), errNoCacheDir)
}

func (d *cacheDir) createTemp(name string) (*os.File, string, error) {
	return nil, "", fmt.Errorf("create %s: %w", filepath.Join(d.path, name), errNoCacheDir)
}

func (d *cacheDir) rename(from, to string) error {
	return fmt.Errorf("rename %s: %w", filepath.Join(d.path, from), errNoCacheDir)
}
