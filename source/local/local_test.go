package local

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/source"
)

// listed returns the version of the file at rel as List gives it.
func listed(t *testing.T, s *Source, rel string) string {
	t.Helper()
	objs, err := s.List(t.Context(), func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Path == rel {
			return o.Version
		}
	}
	t.Fatalf("%s not listed in %+v", rel, objs)
	return ""
}

// TestOpenOfAFileChangedSinceListingWrapsErrChanged opens a file at the
// version listed after rewriting it (new size, or same size with a new
// modification time): Open must fail with an error wrapping
// source.ErrChanged that shows both versions, never give a reader.
func TestOpenOfAFileChangedSinceListingWrapsErrChanged(t *testing.T) {
	root := t.TempDir()
	path := writeFile(t, root, "a.tfrecord", []byte("0123456789"))
	s := New(root, false, nil)
	v := listed(t, s, "a.tfrecord")
	f, err := s.Open("a.tfrecord", v)
	if err != nil {
		t.Fatalf("Open at the listed version: %v", err)
	}
	f.Close()
	for _, tc := range []struct {
		name   string
		change func()
	}{
		{"new size", func() { os.WriteFile(path, []byte("01234567890"), 0o644) }},
		{"same size, new mtime", func() {
			os.WriteFile(path, []byte("abcdefghij"), 0o644)
			os.Chtimes(path, time.Now(), time.Now().Add(time.Hour))
		}},
		{"removed", func() { os.Remove(path) }},
	} {
		tc.change()
		f, err := s.Open("a.tfrecord", v)
		if err == nil {
			f.Close()
			t.Fatalf("%s: Open succeeded", tc.name)
		}
		if !errors.Is(err, source.ErrChanged) {
			t.Errorf("%s: %v, want an error wrapping ErrChanged", tc.name, err)
		}
	}
}

// TestOpenRefusesANamedPipeAtOnce opens a named pipe with no writer put
// in place of a listed file: Open must return at once (O_NONBLOCK) with
// ErrNotRegular and EIO, not wait for a writer.
func TestOpenRefusesANamedPipeAtOnce(t *testing.T) {
	root := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(root, "p.tfrecord"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := New(root, false, nil).Open("p.tfrecord", Version(0, 0))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("Open of a named pipe: %v, want ErrNotRegular and EIO", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open of a named pipe did not return within 10s")
	}
}

// TestOpenWithoutFollowNeverLeavesTheRoot replaces a listed file by a
// symbolic link out of the directory: without follow, Open refuses it as
// a changed file; with follow, it is read by path.
func TestOpenWithoutFollowNeverLeavesTheRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "src")
	writeFile(t, root, "a.tfrecord", []byte("inside"))
	out := writeFile(t, base, "secret", []byte("outside"))
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	v := Version(fi.Size(), fi.ModTime().UnixNano())
	os.Remove(filepath.Join(root, "a.tfrecord"))
	if err := os.Symlink(out, filepath.Join(root, "a.tfrecord")); err != nil {
		t.Fatal(err)
	}
	if f, err := New(root, false, nil).Open("a.tfrecord", v); err == nil {
		f.Close()
		t.Fatal("Open without follow read a file outside the root")
	} else if !errors.Is(err, source.ErrChanged) {
		t.Errorf("Open without follow: %v, want ErrChanged", err)
	}
	f, err := New(root, true, nil).Open("a.tfrecord", v)
	if err != nil {
		t.Fatalf("Open with follow: %v", err)
	}
	f.Close()
}

// TestOpenDirMustBeADirectory opens a file and a missing path as a
// dataset's directory: both are refused with an error naming the path.
func TestOpenDirMustBeADirectory(t *testing.T) {
	root := t.TempDir()
	f := filepath.Join(root, "a.tfrecord")
	if err := os.WriteFile(f, []byte{1}, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{f, filepath.Join(root, "missing")} {
		if _, err := OpenDir(src, false, nil); err == nil || !strings.Contains(err.Error(), src) {
			t.Fatalf("OpenDir(%s): err %v, want one naming the source", src, err)
		}
	}
}
