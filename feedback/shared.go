package feedback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Shared is the place every node of a job reaches, where the nodes of a
// feedback strategy coordinate (docs/coordinate.md): write-once objects
// under slash-separated names. A directory (DirShared) is one; a prefix of
// an object store, with conditional PUT (If-None-Match: *), is another.
// Its methods are safe for concurrent use.
type Shared interface {
	// Create writes name once, with the size bytes of r: a reader sees
	// all of them or no name at all. When name exists already it writes
	// nothing and returns an error matching fs.ErrExist.
	Create(ctx context.Context, name string, r io.Reader, size int64) error
	// Open returns the bytes of name; an error matching fs.ErrNotExist
	// when there is no such name.
	Open(ctx context.Context, name string) (io.ReadCloser, error)
	// List returns the names directly under dir ("a/b"), sorted; none
	// when there is nothing under it.
	List(ctx context.Context, dir string) ([]string, error)
	// String names the place, for messages.
	String() string
}

// DirShared is a Shared in a directory that every node reaches (NFS, a
// cluster file system, or a local directory for nodes on one machine).
// Create writes a temporary file beside the name and links it to the
// name: link(2) fails with EEXIST when the name exists, so a name is
// written once, and whole.
type DirShared struct{ dir string }

// tempPrefix starts the names of the files Create stages; List skips them.
const tempPrefix = ".tmp-"

// OpenDirShared checks that dir is a directory this process can write.
func OpenDirShared(dir string) (*DirShared, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("{coordinate} %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("{coordinate} %s: cannot create the directory: %w (give a directory every node can write)", dir, err)
	}
	f, err := os.CreateTemp(abs, tempPrefix+"check-*")
	if err != nil {
		return nil, fmt.Errorf("{coordinate} %s: cannot write in it: %w (give a directory every node can write)", dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return &DirShared{dir: abs}, nil
}

func (d *DirShared) String() string { return d.dir }

func (d *DirShared) path(name string) (string, error) {
	if name == "" || strings.HasPrefix(name, "/") || slices.Contains(strings.Split(name, "/"), "..") {
		return "", fmt.Errorf("shared name %q: want a relative path with no '..' element", name)
	}
	return filepath.Join(d.dir, filepath.FromSlash(name)), nil
}

func (d *DirShared) Create(ctx context.Context, name string, r io.Reader, size int64) error {
	p, err := d.path(name)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(p); err == nil {
		return fmt.Errorf("create %s: %w", p, fs.ErrExist)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), tempPrefix+filepath.Base(p)+"-*")
	if err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, readerCtx{ctx, r})
	if err == nil && n != size {
		err = fmt.Errorf("%d bytes instead of %d", n, size)
	}
	if err == nil {
		err = f.Sync() // the link must not name a file a crash leaves empty
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("create %s: writing %s: %w", p, f.Name(), err)
	}
	if err := os.Link(f.Name(), p); err != nil {
		// Over NFS a retransmitted LINK whose first reply was lost fails
		// with EEXIST although it linked: the staged file then has two
		// links, and the name is ours.
		if st, serr := os.Stat(f.Name()); serr == nil {
			if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink == 2 {
				return nil
			}
		}
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create %s: %w", p, fs.ErrExist)
		}
		return fmt.Errorf("create %s: %w", p, err)
	}
	return nil
}

func (d *DirShared) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	p, err := d.path(name)
	if err != nil {
		return nil, err
	}
	return os.Open(p)
}

func (d *DirShared) List(ctx context.Context, dir string) ([]string, error) {
	p, err := d.path(dir)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), tempPrefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// readerCtx stops a copy when ctx ends.
type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
