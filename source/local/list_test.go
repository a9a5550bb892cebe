package local

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/internal/testtree"
)

func newTextLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// writeFile writes data to rel under root, making its directories.
func writeFile(t testing.TB, root, rel string, data []byte) string {
	t.Helper()
	path := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func isRecordFile(base string) bool { return strings.HasSuffix(base, ".tfrecord") }

// list lists root with follow, failing the test on an error.
func list(t *testing.T, root string, follow bool, log io.Writer) []string {
	t.Helper()
	objs, err := New(root, follow, newTextLogger(log)).List(context.Background(), isRecordFile)
	if err != nil {
		t.Fatalf("follow=%v: %v", follow, err)
	}
	var p []string
	for _, o := range objs {
		p = append(p, o.Path)
	}
	return p
}

func TestPathLongerThanPathMaxIsSkippedNamingIt(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "a.tfrecord", []byte("a"))
	file, inDir := testtree.DeepTree(t, root, []byte("deep"))
	for _, follow := range []bool{false, true} {
		var log strings.Builder
		if got := list(t, root, follow, &log); !slices.Equal(got, []string{"a.tfrecord"}) {
			t.Errorf("follow=%v: listed %v, want a.tfrecord alone", follow, got)
		}
		for _, p := range []string{file, filepath.Dir(inDir)} {
			if !strings.Contains(log.String(), p) || !strings.Contains(log.String(), "PATH_MAX") {
				t.Errorf("follow=%v: the log does not name %s as longer than PATH_MAX:\n%.600s", follow, filepath.Base(p), log.String())
			}
		}
	}
}

func TestFileReachedTwiceIsListedOnce(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "a.tfrecord", []byte("a1a2"))
	writeFile(t, root, "b.tfrecord", []byte("b1"))
	writeFile(t, root, "sub/c.tfrecord", []byte("c1"))
	if err := os.Symlink("a.tfrecord", filepath.Join(root, "alias.tfrecord")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../b.tfrecord", filepath.Join(root, "sub", "b-alias.tfrecord")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(root, "sub", "c.tfrecord"), filepath.Join(root, "hard.tfrecord")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		follow  bool
		want    []string
		skipped []string
	}{
		{false, []string{"a.tfrecord", "b.tfrecord", "hard.tfrecord"}, []string{"sub/c.tfrecord"}},
		{true, []string{"a.tfrecord", "b.tfrecord", "hard.tfrecord"}, []string{"alias.tfrecord", "sub/b-alias.tfrecord", "sub/c.tfrecord"}},
	} {
		var log strings.Builder
		if got := list(t, root, tt.follow, &log); !slices.Equal(got, tt.want) {
			t.Errorf("follow=%v: listed %v, want %v", tt.follow, got, tt.want)
		}
		for _, p := range tt.skipped {
			if !strings.Contains(log.String(), "path="+p) {
				t.Errorf("follow=%v: the log does not name the skipped %s:\n%s", tt.follow, p, log.String())
			}
		}
	}
}

// With follow, links to files and directories are listed by their path in
// the source, loops once; without it, no link is.
func TestFollowSymlinksListsLinkedFilesAndEndsLoops(t *testing.T) {
	base := t.TempDir()
	root, out := filepath.Join(base, "src"), filepath.Join(base, "out")
	writeFile(t, root, "a.tfrecord", []byte("a"))
	writeFile(t, out, "b.tfrecord", []byte("b"))
	writeFile(t, out, "d/c.tfrecord", []byte("c"))
	os.Symlink(filepath.Join(out, "b.tfrecord"), filepath.Join(root, "z-b.tfrecord"))
	os.Symlink(filepath.Join(out, "d"), filepath.Join(root, "m"))
	os.Symlink(filepath.Join(out, "d"), filepath.Join(root, "n")) // the same directory again
	os.Symlink(".", filepath.Join(root, "loop"))
	os.Symlink("nowhere", filepath.Join(root, "x.tfrecord"))
	if got := list(t, root, false, io.Discard); !slices.Equal(got, []string{"a.tfrecord"}) {
		t.Errorf("without following: %v", got)
	}
	if got := list(t, root, true, io.Discard); !slices.Equal(got, []string{"a.tfrecord", "m/c.tfrecord", "z-b.tfrecord"}) {
		t.Errorf("following: %v", got)
	}
}
