package blockcache

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// A block damaged in place (same size and modification time) is reported
// to OnDamage once; MarkStale then makes the next Open rebuild and say why.
func TestBlockDamagedInPlaceMarksSidecarStale(t *testing.T) {
	root, files := blocktest.Dataset(t, 7, 2, 50, 200)
	cache := t.TempDir()
	o := index.Options{BlockSize: 1 << 10, CacheDir: cache}
	ix, _, _ := openLogged(t, root, o)
	path := filepath.Join(root, "f1.tfrecord")
	fi, _ := os.Stat(path)
	b := append([]byte(nil), files[1].Data...)
	b[len(b)/2] ^= 0x10
	blocktest.WriteBytes(t, path, b)
	blocktest.SetMtime(t, path, fi.ModTime().UnixNano())

	var reasons []string
	l := NewLoader(ix, LoaderOptions{MaxMemory: ix.Bytes, OnDamage: func(reason string) {
		reasons = append(reasons, reason)
		if err := index.MarkStale(blocktest.Dir(t, root, false), o, reason); err != nil {
			t.Error(err)
		}
	}})
	failed := 0
	for id := range ix.Blocks {
		buf, err := l.Get(t.Context(), Unit{Blocks: []int32{int32(id)}})
		if err != nil {
			failed++
			continue
		}
		l.Release(buf)
	}
	if failed != 1 || len(reasons) != 1 || !strings.Contains(reasons[0], "f1.tfrecord") {
		t.Fatalf("%d blocks failed to load, OnDamage called with %q; want 1 naming f1.tfrecord", failed, reasons)
	}
	// The rebuild finds the damage and fails, after saying why it rebuilds.
	_, cached, log := openLoggedErr(t, root, o)
	if cached || !strings.Contains(log, "rebuilding index") || !strings.Contains(log, "data CRC mismatch") {
		t.Fatalf("Open after the damage: cached %v, log:\n%s", cached, log)
	}
}

func newTextLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// openLoggedErr is openLogged that does not fail on an error.
func openLoggedErr(t *testing.T, root string, o index.Options) (*index.Index, bool, string) {
	t.Helper()
	var log strings.Builder
	o.Logger = newTextLogger(&log)
	ix, fromCache, _ := index.Open(t.Context(), blocktest.Dir(t, root, false), o)
	return ix, fromCache, log.String()
}

// With FollowSymlinks, links to files and directories are listed by their
// path in the source, loops once; without it, no link is.
func TestFollowSymlinksListsLinkedFilesAndEndsLoops(t *testing.T) {
	base := t.TempDir()
	root, out := filepath.Join(base, "src"), filepath.Join(base, "out")
	blocktest.WriteRecords(t, root, "a.tfrecord", [][]byte{[]byte("a")})
	blocktest.WriteRecords(t, out, "b.tfrecord", [][]byte{[]byte("b")})
	blocktest.WriteRecords(t, out, "d/c.tfrecord", [][]byte{[]byte("c")})
	os.Symlink(filepath.Join(out, "b.tfrecord"), filepath.Join(root, "z-b.tfrecord"))
	os.Symlink(filepath.Join(out, "d"), filepath.Join(root, "m"))
	os.Symlink(filepath.Join(out, "d"), filepath.Join(root, "n")) // the same directory again
	os.Symlink(".", filepath.Join(root, "loop"))
	os.Symlink("nowhere", filepath.Join(root, "x.tfrecord"))
	paths := func(follow bool) []string {
		ix, err := index.Build(t.Context(), blocktest.Dir(t, root, follow), index.Options{FollowSymlinks: follow, Logger: newTextLogger(&strings.Builder{})})
		if err != nil {
			t.Fatal(err)
		}
		var p []string
		for _, f := range ix.Files {
			p = append(p, f.Path)
		}
		return p
	}
	if got := paths(false); !slices.Equal(got, []string{"a.tfrecord"}) {
		t.Errorf("without following: %v", got)
	}
	if got := paths(true); !slices.Equal(got, []string{"a.tfrecord", "m/c.tfrecord", "z-b.tfrecord"}) {
		t.Errorf("following: %v", got)
	}
	ix := build(t, root, index.Options{FollowSymlinks: true})
	if !ix.FollowSymlinks || len(ix.Files) != 3 || ix.Records != 3 {
		t.Errorf("index following links: %d files, %d records", len(ix.Files), ix.Records)
	}
}
