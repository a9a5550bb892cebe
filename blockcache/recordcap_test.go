package blockcache

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// A file of 200,003 records of 2 bytes in one block's worth of bytes: a
// full index ends its blocks every index.MaxBlockRecords records (their
// tables would take more than their bytes), and a probed one, which knows
// the boundaries of records of one size without reading, cuts exactly the
// same blocks. Records of 32 bytes, whose tables take just their bytes,
// are not cut so.
func TestBlocksOfOneSizeRecordsEndAtMaxBlockRecordsProbedOrFull(t *testing.T) {
	const n, size = 200_003, 2
	root := t.TempDir()
	blocktest.WriteBytes(t, filepath.Join(root, "a.bin"), bytes.Repeat([]byte("ab"), n))
	f := formats.Fixed{RecordSize: size}
	full := build(t, root, index.Options{BlockSize: 1 << 20, Format: f})
	probed := build(t, root, index.Options{BlockSize: 1 << 20, Format: f, Probe: true})
	if len(full.Blocks) != 4 {
		t.Fatalf("full index of %d records: %d blocks, want 4 (3 of %d records and the rest)", n, len(full.Blocks), index.MaxBlockRecords)
	}
	for _, b := range full.Blocks {
		if b.Records > index.MaxBlockRecords {
			t.Errorf("block %+v holds more than %d records", b, index.MaxBlockRecords)
		}
	}
	compareIndexes(t, full, probed)

	blocktest.WriteBytes(t, filepath.Join(root, "a.bin"), bytes.Repeat([]byte("0123456789abcdef0123456789abcdef"), n))
	f = formats.Fixed{RecordSize: 32}
	full = build(t, root, index.Options{BlockSize: 8 << 20, Format: f})
	probed = build(t, root, index.Options{BlockSize: 8 << 20, Format: f, Probe: true})
	if len(full.Blocks) != 1 {
		t.Errorf("full index of %d records of 32 bytes: %d blocks, want 1", n, len(full.Blocks))
	}
	compareIndexes(t, full, probed)
}

// A probed index cuts by bytes only: a block of 100,000 empty TFRecords
// (16 bytes each, whose tables would take twice the block) is refused when
// it loads, with EIO and a message that names the file, the offset, the
// cause and the remedies; a full index of the same file cuts it after
// index.MaxBlockRecords records and loads every block. A probed block of
// 100,000 records of 100 bytes is served: its tables take less than it.
func TestProbedBlockOfTooManyTinyRecordsIsRefusedNamingTheRemedy(t *testing.T) {
	root := t.TempDir()
	data := bytes.Repeat(formats.AppendFrame(nil, nil), 100_000)
	blocktest.WriteBytes(t, filepath.Join(root, "a.tfrecord"), data)
	probed := build(t, root, index.Options{BlockSize: 4 << 20, Probe: true})
	if len(probed.Blocks) != 1 {
		t.Fatalf("probed index: %d blocks, want 1", len(probed.Blocks))
	}
	l := NewLoader(probed, LoaderOptions{MaxMemory: 8 << 20})
	b, err := l.Get(t.Context(), blockUnit(0))
	if err == nil {
		l.Release(b)
		t.Fatal("a probed block of 100,000 empty records loaded")
	}
	t.Logf("refusal: %v", err)
	for _, want := range []string{"a.tfrecord at offset 0", "holds 100000 records", "{index} full", "after 65536 of them", "{block-size} (at most 1048576 bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("the refusal is not EIO: %v", err)
	}
	full := build(t, root, index.Options{BlockSize: 4 << 20})
	lf := NewLoader(full, LoaderOptions{MaxMemory: 8 << 20})
	var records int
	for id := range full.Blocks {
		b, err := lf.Get(t.Context(), blockUnit(int32(id)))
		if err != nil {
			t.Fatalf("full index, block %d: %v", id, err)
		}
		records += len(b.Starts)
		lf.Release(b)
	}
	if len(full.Blocks) != 2 || records != 100_000 {
		t.Errorf("full index: %d blocks holding %d records, want 2 holding 100000", len(full.Blocks), records)
	}

	blocktest.WriteBytes(t, filepath.Join(root, "a.tfrecord"), bytes.Repeat(formats.AppendFrame(nil, make([]byte, 84)), 100_000))
	probed = build(t, root, index.Options{BlockSize: 16 << 20, Probe: true})
	lp := NewLoader(probed, LoaderOptions{MaxMemory: 16 << 20})
	b, err = lp.Get(t.Context(), blockUnit(0))
	if err != nil {
		t.Fatalf("a probed block of 100,000 records of 100 bytes: %v", err)
	}
	if len(probed.Blocks) != 1 || len(b.Starts) != 100_000 {
		t.Errorf("probed index: %d blocks, the first of %d records, want 1 of 100000", len(probed.Blocks), len(b.Starts))
	}
	lp.Release(b)
}
