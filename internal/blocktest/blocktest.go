// Package blocktest writes the TFRecord datasets that the tests of the
// index, the loader and the disk cache share, and keeps what each test
// knows about them (bytes, frame offsets, payloads), and opens them as a
// caller of the index does (Dir). It depends on formats and source/local
// alone, so that tests of every package of the block path can use it.
package blocktest

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/source/local"
)

// Dir is the local source of the directory root, opened as the callers of
// index.Build and index.Open open it (local.OpenDir), listing through
// symbolic links when follow is set (index.Options.FollowSymlinks).
func Dir(t testing.TB, root string, follow bool) source.Source {
	t.Helper()
	src, err := local.OpenDir(root, follow, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// SrcFile is a TFRecord file written by a test, with what the test knows
// about it: its bytes and where each frame starts.
type SrcFile struct {
	Rel      string // slash separated, relative to the dataset root
	Path     string
	Data     []byte
	Starts   []int64 // frame offsets
	Payloads [][]byte
}

// FrameLen returns the frame length of record i.
func (f *SrcFile) FrameLen(i int) int64 {
	if i+1 < len(f.Starts) {
		return f.Starts[i+1] - f.Starts[i]
	}
	return int64(len(f.Data)) - f.Starts[i]
}

// RecordAt returns the index of the record whose frame starts at off, or -1.
func (f *SrcFile) RecordAt(off int64) int {
	i, ok := slices.BinarySearch(f.Starts, off)
	if !ok {
		return -1
	}
	return i
}

// Frames encodes payloads as TFRecord Frames with formats.NewWriter.
func Frames(t testing.TB, payloads [][]byte) ([]byte, []int64) {
	t.Helper()
	var buf bytes.Buffer
	w := formats.NewWriter(&buf)
	starts := make([]int64, 0, len(payloads))
	for _, p := range payloads {
		starts = append(starts, w.Written())
		if err := w.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes(), starts
}

// WriteRecords writes payloads as a TFRecord file at root/rel.
func WriteRecords(t testing.TB, root, rel string, payloads [][]byte) *SrcFile {
	t.Helper()
	data, starts := Frames(t, payloads)
	path := filepath.Join(root, filepath.FromSlash(rel))
	WriteBytes(t, path, data)
	return &SrcFile{Rel: rel, Path: path, Data: data, Starts: starts, Payloads: payloads}
}

func WriteBytes(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// RandomPayloads returns n payloads of random lengths in [0, maxLen] whose
// first bytes hold their number, so that records of 4 bytes or more differ.
func RandomPayloads(r *rand.Rand, n, maxLen int) [][]byte {
	ps := make([][]byte, n)
	for i := range ps {
		p := make([]byte, r.IntN(maxLen+1))
		for j := range p {
			p[j] = byte(r.Uint32())
		}
		for j := 0; j < 4 && j < len(p); j++ {
			p[j] = byte(i >> (8 * j))
		}
		ps[i] = p
	}
	return ps
}

// PayloadsOfLen returns one payload per length.
func PayloadsOfLen(r *rand.Rand, lens ...int) [][]byte {
	ps := make([][]byte, len(lens))
	for i, n := range lens {
		ps[i] = make([]byte, n)
		for j := range ps[i] {
			ps[i][j] = byte(r.Uint32())
		}
	}
	return ps
}

// Dataset writes files random records each under a new temporary root,
// named f0.tfrecord, f1.tfrecord, ..., and returns the root and the files
// in index order.
func Dataset(t testing.TB, seed uint64, files, records, maxLen int) (string, []*SrcFile) {
	t.Helper()
	root := t.TempDir()
	r := rand.New(rand.NewPCG(seed, 1))
	var fs []*SrcFile
	for i := range files {
		fs = append(fs, WriteRecords(t, root, "f"+string(rune('0'+i))+".tfrecord", RandomPayloads(r, records, maxLen)))
	}
	return root, fs
}

// SetMtime sets the modification time of path to unix nanoseconds ns.
func SetMtime(t testing.TB, path string, ns int64) {
	t.Helper()
	mt := time.Unix(0, ns)
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
}
