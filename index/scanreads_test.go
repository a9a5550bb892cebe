package index

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/source/local"
)

// countingSource is a real source whose file reads are counted: every
// ReadAt of a file in an object store is one request.
type countingSource struct {
	source.Source
	reads atomic.Int64
}

func (s *countingSource) Open(path, version string) (source.File, error) {
	f, err := s.Source.Open(path, version)
	if err != nil {
		return nil, err
	}
	return &countingFile{File: f, reads: &s.reads}, nil
}

type countingFile struct {
	source.File
	reads *atomic.Int64
}

func (f *countingFile) ReadAt(p []byte, off int64) (int, error) {
	f.reads.Add(1)
	return f.File.ReadAt(p, off)
}

// The text formats' head reads a file's last bytes first. Read through the
// scan's chunks, that used to leave the file's first chunks "behind" the
// newest one, and every record of them was then read by itself: 87,000
// reads for 74 MB of JSONL, as many GETs from a bucket.
func TestFullIndexOfTextFilesReadsEachFileInAFewLargeReads(t *testing.T) {
	root := t.TempDir()
	const files, lines = 2, 60000 // about 2.7 chunks a file
	for i := range files {
		var b strings.Builder
		for j := range lines {
			fmt.Fprintf(&b, `{"id":%d,"pad":"%s"}`+"\n", j, strings.Repeat("x", 300))
		}
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%d.jsonl", i)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := &countingSource{Source: local.New(root, false, nil)}
	ix, err := Build(context.Background(), src, Options{Format: formats.JSONL{}})
	if err != nil {
		t.Fatal(err)
	}
	if ix.Records != files*lines {
		t.Fatalf("%d records, want %d", ix.Records, files*lines)
	}
	chunks := (ix.Files[0].Size + scanChunk - 1) / scanChunk
	// A few small reads of the head, then one read per chunk.
	if max := int64(files) * (chunks + 8); src.reads.Load() > max {
		t.Fatalf("%d reads to index %d files of %d chunks, want at most %d", src.reads.Load(), files, chunks, max)
	}
}
