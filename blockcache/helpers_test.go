package blockcache

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// blockBytes returns the source bytes of a block, read from the test's copy.
func blockBytes(files []*blocktest.SrcFile, b index.Block) []byte {
	return files[b.File].Data[b.Offset : b.Offset+b.Len]
}

// build is Build that fails the test on error.
func build(t testing.TB, root string, o index.Options) *index.Index {
	t.Helper()
	ix, err := index.Build(t.Context(), blocktest.Dir(t, root, o.FollowSymlinks), o)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// openLogged runs Open with a logger writing to a buffer and returns the log.
func openLogged(t *testing.T, root string, o index.Options) (*index.Index, bool, string) {
	t.Helper()
	var log bytes.Buffer
	o.Logger = slog.New(slog.NewTextHandler(&log, nil))
	ix, fromCache, err := index.Open(t.Context(), blocktest.Dir(t, root, o.FollowSymlinks), o)
	if err != nil {
		t.Fatalf("Open: %v\nlog:\n%s", err, log.String())
	}
	return ix, fromCache, log.String()
}

// sidecars lists the sidecar files in dir.
func sidecars(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.index"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
