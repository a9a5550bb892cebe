package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/corgifs/corgifs/source"
)

// List returns the regular files under the directory whose base names
// match, sorted by path, each at its version (Version). Symbolic links are
// not followed unless the source follows them, so the listing cannot
// escape the directory. When it follows them, links to files and to
// directories are followed; a directory reached a second time (a symlink
// loop, or two links to one directory) is skipped with a log line, and so
// is a link that leads nowhere.
//
// A file is listed once however many names lead to it (a symbolic link to
// a file already listed, a hard link): its records must be served once per
// epoch. The name met first in the walk, which visits names in order, is
// kept and the others are logged. A path longer than the kernel takes
// (PATH_MAX) is skipped with a log line naming it, rather than failing the
// whole listing: the files are read by their paths.
func (s *Source) List(ctx context.Context, match func(base string) bool) ([]source.Object, error) {
	root, log := s.root, s.log
	var files []source.Object
	first := map[[2]uint64]string{} // path of every file listed, by device and inode
	add := func(path string, fi fs.FileInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if key, ok := fileKey(fi); ok {
			if p, dup := first[key]; dup {
				log.Warn("file reached again under another name; skipped so that its records are served once", "path", rel, "same_as", p)
				return nil
			}
			first[key] = rel
		}
		mtime := fi.ModTime().UnixNano()
		files = append(files, source.Object{Path: rel, Size: fi.Size(), Mtime: mtime, Version: versionOf(fi)})
		return nil
	}
	var err error
	if s.follow {
		err = walkFollow(root, match, add, map[[2]uint64]bool{}, s)
	} else {
		err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if tooLong(err) && d != nil {
					return s.skipTooLong(path, d.IsDir())
				}
				return fmt.Errorf("list %s: %w", path, err)
			}
			if !d.Type().IsRegular() || !match(d.Name()) {
				return nil
			}
			fi, err := d.Info()
			if tooLong(err) {
				return s.skipTooLong(path, false)
			}
			if err != nil {
				return fmt.Errorf("stat %s: %w", path, err)
			}
			return add(path, fi)
		})
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(files, func(a, b source.Object) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// tooLong reports whether err is the kernel refusing a path longer than
// PATH_MAX.
func tooLong(err error) bool { return errors.Is(err, syscall.ENAMETOOLONG) }

// skipTooLong logs that path is left out of the listing because it is
// longer than PATH_MAX, and tells filepath.WalkDir to go on without it.
func (s *Source) skipTooLong(path string, dir bool) error {
	what := "file"
	if dir {
		what = "directory"
	}
	s.log.Warn(what+" path longer than PATH_MAX (4096 bytes); skipped, its records are not indexed (move it higher in the tree to include it)", "path", path, "bytes", len(path))
	if dir {
		return filepath.SkipDir
	}
	return nil
}

// walkFollow lists dir like filepath.WalkDir, following symbolic links.
// seen holds the (device, inode) of every directory entered, so that each
// is listed once and a loop ends.
func walkFollow(dir string, match func(string) bool, add func(string, fs.FileInfo) error, seen map[[2]uint64]bool, s *Source) error {
	fi, err := os.Stat(dir)
	if tooLong(err) {
		s.skipTooLong(dir, true)
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	if key, ok := fileKey(fi); ok {
		if seen[key] {
			s.log.Warn("directory reached again through a symbolic link; skipped (a loop or a second link)", "path", dir)
			return nil
		}
		seen[key] = true
	}
	entries, err := os.ReadDir(dir)
	if tooLong(err) {
		s.skipTooLong(dir, true)
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		fi, err := os.Stat(path)
		if tooLong(err) {
			s.skipTooLong(path, e.IsDir())
			continue
		}
		if err != nil {
			if e.Type()&fs.ModeSymlink != 0 {
				s.log.Warn("symbolic link leads nowhere; skipped", "path", path, "err", err)
				continue
			}
			return fmt.Errorf("stat %s: %w", path, err)
		}
		switch {
		case fi.IsDir():
			if err := walkFollow(path, match, add, seen, s); err != nil {
				return err
			}
		case fi.Mode().IsRegular() && match(e.Name()):
			if err := add(path, fi); err != nil {
				return err
			}
		}
	}
	return nil
}
