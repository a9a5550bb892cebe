package cachedir

import (
	"io"
	"os"
	"strings"
	"time"
)

// Dir is a directory that corgifs writes, opened with the checks of
// the index's cache directory (owner and mode checked on the descriptor,
// files opened relative to it and never through a link, written as new
// files renamed into place), for the packages above that keep files of
// their own there (feedback vectors, orders). Names are single path
// elements.
type Dir struct{ d *cacheDir }

// Open resolves dir as the index's cache directory is resolved
// (never root, the local source, nor inside it; root "" for a remote
// source), creates it with mode 0700 when missing and opens it. A
// directory that another user owns or others may write gives an error
// wrapping ErrUnsafe.
func Open(dir, root string) (*Dir, error) {
	path, err := Resolve(dir, root)
	if err != nil {
		return nil, err
	}
	d, err := openCacheDir(path)
	if err != nil {
		// Its users keep their directories inside --cache-dir.
		return nil, ForFlag(err, "{cache-dir}", "files of this mount (feedback, orders)")
	}
	return &Dir{d: d}, nil
}

// OpenPath creates (with mode 0700) and opens the directory path, which
// Resolve returned. A directory that another user owns or that others may
// write gives an error wrapping ErrUnsafe that names no flag (see ForFlag).
func OpenPath(path string) (*Dir, error) {
	d, err := openCacheDir(path)
	if err != nil {
		return nil, err
	}
	return &Dir{d: d}, nil
}

// Exists reports whether the directory has an entry name, of any type.
func (c *Dir) Exists(name string) bool { return c.d.exists(name) }

// Path is the resolved path of the directory.
func (c *Dir) Path() string { return c.d.path }

// Close closes the directory's descriptor.
func (c *Dir) Close() error { return c.d.Close() }

// ReadFile reads at most limit bytes of name (a regular file of the user
// that only the user can write, not a link).
func (c *Dir) ReadFile(name string, limit int64) ([]byte, error) {
	return c.d.readSmall(name, limit)
}

// Open opens name for reading, with the checks of ReadFile.
func (c *Dir) Open(name string) (*os.File, error) { return c.d.open(name) }

// WriteFile replaces name with what fill writes, atomically: readers see
// the old file or the whole new one.
func (c *Dir) WriteFile(name string, fill func(io.Writer) error) error {
	return c.d.write(name, fill)
}

// CreateTemp creates a new, empty file to be renamed to name later with
// Rename, and returns it (open for reading and writing) and its name.
func (c *Dir) CreateTemp(name string) (*os.File, string, error) {
	return c.d.createTemp(name)
}

// Rename renames from to to, replacing to.
func (c *Dir) Rename(from, to string) error { return c.d.rename(from, to) }

// Remove removes name; a missing name is not an error.
func (c *Dir) Remove(name string) error { return c.d.remove(name) }

// RemoveTemps removes the temporary files that CreateTemp or WriteFile
// left for names starting with prefix and that nobody wrote for age (a
// process that died while writing; another may be writing the younger
// ones).
func (c *Dir) RemoveTemps(prefix string, age time.Duration) error {
	ents, err := os.ReadDir(c.d.path)
	if err != nil {
		return err
	}
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, "."+strings.TrimPrefix(prefix, ".")) || !strings.HasSuffix(n, ".tmp") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > age {
			if err := c.d.remove(n); err != nil {
				return err
			}
		}
	}
	return nil
}
