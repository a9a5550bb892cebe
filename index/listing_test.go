package index

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/corgifs/corgifs/internal/blocktest"
	"github.com/corgifs/corgifs/source/local"
)

// TestSourceBytesIsTheSizeOfTheFilesAnIndexWouldCover lists a directory
// of two TFRecord files and a README: the size is that of the two, read
// from the listing alone.
func TestSourceBytesIsTheSizeOfTheFilesAnIndexWouldCover(t *testing.T) {
	dir := t.TempDir()
	for name, n := range map[string]int{"a.tfrecord": 1000, "b.tfrecord": 234, "README.txt": 5000} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n, err := SourceBytes(context.Background(), blocktest.Dir(t, dir, false), Options{})
	if err != nil || n != 1234 {
		t.Fatalf("SourceBytes = %d, %v; want 1234 (the two .tfrecord files)", n, err)
	}
	// A directory gone since it was opened cannot be listed.
	if _, err := SourceBytes(context.Background(), local.New(filepath.Join(dir, "missing"), false, nil), Options{}); err == nil {
		t.Fatal("no error for a missing source")
	}
}
