package index

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// The CRCs of records are the same whether the read-ahead chunk holds
// them (summed in place) or not (a record across two chunks, or one behind
// the chunks held, read again).
func TestRecordCRCsAreRightAcrossReadAheadChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.bin")
	data := make([]byte, 2*scanChunk+4096)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	blocktest.WriteBytes(t, path, data)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rd aheadReader
	defer rd.free()
	rd.reset(f, nil, int64(len(data)))
	var chunk []byte
	for _, rec := range []formats.Record{
		{Offset: 0, Len: 100},
		{Offset: scanChunk - 50, Len: 100},     // across the first boundary
		{Offset: scanChunk + 10, Len: 1 << 20}, // inside the second chunk
		{Offset: 2*scanChunk - 1, Len: 4097},   // across the second, to the end
		{Offset: 5, Len: 10},                   // behind the chunks held
	} {
		var block uint32
		// The scanner has read the record before its CRC is taken.
		if _, err := rd.ReadAt(make([]byte, rec.Len), rec.Offset); err != nil {
			t.Fatal(err)
		}
		got, err := sumRecord(&rd, &chunk, rec, &block, true)
		want := formats.UpdateChecksum(0, data[rec.Offset:rec.Offset+rec.Len])
		if err != nil || got != want || block != want {
			t.Fatalf("record %+v: CRC %08x (block %08x), %v; want %08x", rec, got, block, err, want)
		}
	}
}

// A sidecar re-sealed with a valid checksum but records in a file's header
// (the CSV header row served as a record), a tail moved to another block,
// or record checksums missing, is rebuilt rather than served.
func TestPlantedSidecarServingHeadersOrWithoutRecordChecksumsIsRebuilt(t *testing.T) {
	var csvCase blocktest.FormatCase
	for _, c := range blocktest.FormatCases(t) {
		if c.Format.Name() == "csv" {
			csvCase = c
		}
	}
	for _, tc := range []struct {
		name  string
		spoil func(ix *Index)
	}{
		{"the header row served as a record", func(ix *Index) {
			f := &ix.Files[0]
			h := f.Head.Start
			f.From, f.Records = 0, f.Records+1
			ix.Blocks[0].Offset, ix.Blocks[0].Len, ix.Blocks[0].Records = 0, ix.Blocks[0].Len+h, ix.Blocks[0].Records+1
			ix.Frames = slices.Insert(ix.Frames, 0, uint32(h))
			ix.RecordCRCs = slices.Insert(ix.RecordCRCs, 0, 0)
			ix.Records++
			ix.Bytes += h
		}},
		{"the records start before the file's head says", func(ix *Index) { ix.Files[0].Head.Start = ix.Files[0].From + 1 }},
		{"no record checksums", func(ix *Index) { ix.RecordCRCs = nil }},
		{"a record checksum dropped", func(ix *Index) { ix.RecordCRCs = ix.RecordCRCs[1:] }},
		{"another format's name", func(ix *Index) { ix.Format = "tfrecord" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := csvCase.Write(t)
			cache := t.TempDir()
			o := Options{BlockSize: 150, CacheDir: cache}
			want, _, _ := openLogged(t, root, o)
			resealSidecar(t, sidecars(t, cache)[0], tc.spoil)
			ix, fromCache, log := openLogged(t, root, o)
			if fromCache {
				t.Fatalf("the planted sidecar was used; log:\n%s", log)
			}
			if !strings.Contains(log, "rebuilding index") {
				t.Fatalf("log does not say it rebuilds:\n%s", log)
			}
			if ix.Records != want.Records || !slices.Equal(ix.Blocks, want.Blocks) {
				t.Fatal("the rebuilt index differs from the built one")
			}
		})
	}
}
