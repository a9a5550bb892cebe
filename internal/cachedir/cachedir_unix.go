//go:build unix

package cachedir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// cacheDir is an open cache directory whose owner and mode were checked on
// the descriptor. Its files are opened relative to that descriptor and
// never through a symbolic link, and are written as new files renamed into
// place, so that a rename of the directory or a link planted in it cannot
// redirect a read or a write.
type cacheDir struct {
	path string
	f    *os.File
}

// openCacheDir creates (with mode 0700) and opens the cache directory path,
// which Resolve returned. A directory that another user owns or
// that others may write gives an *unsafeDirError, which names no flag
// (see ForFlag).
func openCacheDir(path string) (*cacheDir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, err
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if why := untrusted(&st); why != "" {
		f.Close()
		return nil, &unsafeDirError{path: path, why: why}
	}
	return &cacheDir{path: path, f: f}, nil
}

func (d *cacheDir) Close() error { return d.f.Close() }

// untrusted says why a file or directory with status st may have been
// written by someone other than the user running corgifs, or "".
func untrusted(st *unix.Stat_t) string {
	if uid := uint32(os.Geteuid()); st.Uid != uid {
		return fmt.Sprintf("is owned by uid %d, not by uid %d that runs corgifs", st.Uid, uid)
	}
	if perm := st.Mode & 0o777; perm&0o022 != 0 {
		who := "others"
		if perm&0o020 != 0 {
			who = "its group"
			if perm&0o002 != 0 {
				who += " and others"
			}
		}
		return fmt.Sprintf("is writable by %s (mode %#o)", who, perm)
	}
	return ""
}

// open opens name in the directory for reading. It refuses a symbolic
// link, anything but a regular file, and a file that untrusted rejects,
// checked on the opened descriptor; the error says which and why.
func (d *cacheDir) open(name string) (*os.File, error) {
	path := filepath.Join(d.path, name)
	fd, err := unix.Openat(int(d.f.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s is a symbolic link; not trusted: %w", path, err)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	why := untrusted(&st)
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		why = "is not a regular file"
	}
	if why != "" {
		f.Close()
		return nil, fmt.Errorf("%s %s; not trusted", path, why)
	}
	return f, nil
}

// exists reports whether the directory has an entry name, of any type.
func (d *cacheDir) exists(name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(int(d.f.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// write replaces name with what fill writes: into a new file (O_EXCL, mode
// 0600, never through a link) that is renamed over name, so that readers
// see the old file or the whole new one, and a link planted at name is
// replaced rather than followed.
func (d *cacheDir) write(name string, fill func(io.Writer) error) error {
	f, tmp, err := d.createTemp(name)
	if err != nil {
		return err
	}
	err = fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.rename(tmp, name)
	}
	if err != nil {
		d.remove(tmp)
		return err
	}
	return nil
}

// createTemp creates a new file for name, to be renamed over it: opened
// for reading and writing, with O_EXCL, mode 0600 and never through a
// link. It returns the file and its name in the directory.
func (d *cacheDir) createTemp(name string) (*os.File, string, error) {
	dfd := int(d.f.Fd())
	for range 100 {
		var r [8]byte
		rand.Read(r[:])
		tmp := "." + strings.TrimPrefix(name, ".") + "-" + hex.EncodeToString(r[:]) + ".tmp"
		fd, err := unix.Openat(dfd, tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == nil {
			return os.NewFile(uintptr(fd), filepath.Join(d.path, tmp)), tmp, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return nil, "", &os.PathError{Op: "create", Path: filepath.Join(d.path, tmp), Err: err}
		}
	}
	return nil, "", fmt.Errorf("create a temporary file in %s: %w", d.path, fs.ErrExist)
}

// rename renames the entry from over to (replacing a link at to, never
// following it).
func (d *cacheDir) rename(from, to string) error {
	dfd := int(d.f.Fd())
	if err := unix.Renameat(dfd, from, dfd, to); err != nil {
		return &os.LinkError{Op: "rename", Old: filepath.Join(d.path, from), New: filepath.Join(d.path, to), Err: err}
	}
	return nil
}

// remove removes the entry name (a link itself, never its target).
func (d *cacheDir) remove(name string) error {
	err := unix.Unlinkat(int(d.f.Fd()), name, 0)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove", Path: filepath.Join(d.path, name), Err: err}
	}
	return nil
}

// Resolve returns the cache directory dir as the kernel will reach
// it (absolute, symbolic links and ".." resolved as far as it exists), and
// refuses one that is root, the source, or inside it. The check compares
// device and inode numbers of the deepest existing directory of the path
// and of each of its parents with those of root, so that neither a link
// nor a bind mount into the source gets past it; the rest of the path does
// not exist yet, so it cannot be the source. An empty root (a remote
// source) skips that check.
func Resolve(dir, root string) (string, error) {
	if !filepath.IsAbs(dir) {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		// Not filepath.Join: it would clean "link/.." lexically, where the
		// kernel goes to the parent of the link's target.
		dir = wd + string(filepath.Separator) + dir
	}
	resolved := "/"
	for c := range strings.SplitSeq(dir, string(filepath.Separator)) {
		switch c {
		case "", ".":
			continue
		case "..":
			// resolved has no links left: its parent is the real one.
			resolved = filepath.Dir(resolved)
		default:
			next := filepath.Join(resolved, c)
			if r, err := filepath.EvalSymlinks(next); err == nil {
				resolved = r
			} else {
				resolved = next
			}
		}
	}
	existing := resolved
	for existing != "/" {
		if _, err := os.Stat(existing); err == nil {
			break
		}
		existing = filepath.Dir(existing)
	}
	if root == "" {
		// A remote source: no local directory to keep the cache out of.
		return resolved, nil
	}
	rootFI, err := os.Stat(root)
	if err != nil {
		return "", fmt.Errorf("source: %w", err)
	}
	for p := existing; ; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && os.SameFile(fi, rootFI) {
			return "", fmt.Errorf("cache directory %s is inside the source %s (it resolves to %s); corgifs never writes inside the source (choose another {cache-dir})", dir, root, resolved)
		}
		if p == "/" {
			break
		}
	}
	return resolved, nil
}
