package index

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/source/local"
)

// TestIndexingRefusesANamedPipeInPlaceOfAListedFile scans a listed file
// that a named pipe replaced before it was opened: indexing must fail at
// once naming it, not wait for a writer.
func TestIndexingRefusesANamedPipeInPlaceOfAListedFile(t *testing.T) {
	root := t.TempDir()
	if err := syscall.Mkfifo(root+"/p.tfrecord", 0o644); err != nil {
		t.Fatal(err)
	}
	ix := &Index{Root: root, src: local.New(root, false, nil), BlockSize: 16 << 10, Files: []File{{Path: "p.tfrecord", Size: 100, Version: local.Version(100, 0)}}}
	done := make(chan error, 1)
	go func() {
		var rd aheadReader
		defer rd.free()
		_, err := ix.scanFile(0, Options{}, &rd, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, local.ErrNotRegular) || !strings.Contains(err.Error(), "p.tfrecord") {
			t.Fatalf("scan of a named pipe: %v, want an error naming it as not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("scan of a named pipe did not return within 10s")
	}
}
