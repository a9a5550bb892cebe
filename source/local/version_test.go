package local

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/corgifs/corgifs/source"
)

// TestVersionChangesWhenContentIsRewrittenWithSizeAndMtimePutBack rewrites
// a file with bytes of the same length and puts its modification time
// back (touch -r), once in place (the same inode) and once as a new file
// renamed over it: each time the listed version must change. Open at the
// old version must fail with ErrChanged for the file renamed over it (its
// inode differs), and succeed for the one written in place, whose reads
// the records' checksums check as they check bit rot.
func TestVersionChangesWhenContentIsRewrittenWithSizeAndMtimePutBack(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the change time is read on Linux only")
	}
	root := t.TempDir()
	path := writeFile(t, root, "a.tfrecord", []byte("0123456789"))
	mtime := time.Unix(1_600_000_000, 123)
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	s := New(root, false, nil)
	for _, tc := range []struct {
		name     string
		replaced bool
		rewrite  func()
	}{
		{"in place", false, func() {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("abcdefghij"), 0); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}},
		{"renamed over", true, func() {
			tmp := filepath.Join(root, ".new")
			if err := os.WriteFile(tmp, []byte("ABCDEFGHIJ"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		old := listed(t, s, "a.tfrecord")
		// The change time has a clock tick's resolution: let one pass.
		time.Sleep(20 * time.Millisecond)
		tc.rewrite()
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Size() != 10 || !fi.ModTime().Equal(mtime) {
			t.Fatalf("%s: the rewrite did not keep size and mtime: %v %v", tc.name, fi, err)
		}
		now := listed(t, s, "a.tfrecord")
		if now == old {
			t.Fatalf("%s: version %q unchanged after the content changed", tc.name, now)
		}
		f, err := s.Open("a.tfrecord", old)
		switch {
		case !tc.replaced && err != nil:
			t.Fatalf("%s: Open at the old version: %v, want a reader (the change time is not checked at open)", tc.name, err)
		case !tc.replaced:
			f.Close()
		case err == nil:
			f.Close()
			t.Fatalf("%s: Open at the old version %q succeeded", tc.name, old)
		case !errors.Is(err, source.ErrChanged):
			t.Fatalf("%s: Open at the old version: %v, want ErrChanged", tc.name, err)
		}
		f, err = s.Open("a.tfrecord", now)
		if err != nil {
			t.Fatalf("%s: Open at the new version %q: %v", tc.name, now, err)
		}
		f.Close()
	}
}
