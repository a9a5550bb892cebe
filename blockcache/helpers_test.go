package blockcache

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/corgifs/corgifs/formats"
)

// srcFile is a TFRecord file written by a test, with what the test knows
// about it: its bytes and where each frame starts.
type srcFile struct {
	rel      string // slash separated, relative to the dataset root
	path     string
	data     []byte
	starts   []int64 // frame offsets
	payloads [][]byte
}

// frameLen returns the frame length of record i.
func (f *srcFile) frameLen(i int) int64 {
	if i+1 < len(f.starts) {
		return f.starts[i+1] - f.starts[i]
	}
	return int64(len(f.data)) - f.starts[i]
}

// recordAt returns the index of the record whose frame starts at off, or -1.
func (f *srcFile) recordAt(off int64) int {
	i, ok := slices.BinarySearch(f.starts, off)
	if !ok {
		return -1
	}
	return i
}

// frames encodes payloads as TFRecord frames with formats.NewWriter.
func frames(t testing.TB, payloads [][]byte) ([]byte, []int64) {
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

// writeRecords writes payloads as a TFRecord file at root/rel.
func writeRecords(t testing.TB, root, rel string, payloads [][]byte) *srcFile {
	t.Helper()
	data, starts := frames(t, payloads)
	path := filepath.Join(root, filepath.FromSlash(rel))
	writeBytes(t, path, data)
	return &srcFile{rel: rel, path: path, data: data, starts: starts, payloads: payloads}
}

func writeBytes(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// randomPayloads returns n payloads of random lengths in [0, maxLen] whose
// first bytes hold their number, so that records of 4 bytes or more differ.
func randomPayloads(r *rand.Rand, n, maxLen int) [][]byte {
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

// payloadsOfLen returns one payload per length.
func payloadsOfLen(r *rand.Rand, lens ...int) [][]byte {
	ps := make([][]byte, len(lens))
	for i, n := range lens {
		ps[i] = make([]byte, n)
		for j := range ps[i] {
			ps[i][j] = byte(r.Uint32())
		}
	}
	return ps
}

// dataset writes files random records each under a new temporary root,
// named f0.tfrecord, f1.tfrecord, ..., and returns the root and the files
// in index order.
func dataset(t testing.TB, seed uint64, files, records, maxLen int) (string, []*srcFile) {
	t.Helper()
	root := t.TempDir()
	r := rand.New(rand.NewPCG(seed, 1))
	var fs []*srcFile
	for i := range files {
		fs = append(fs, writeRecords(t, root, "f"+string(rune('0'+i))+".tfrecord", randomPayloads(r, records, maxLen)))
	}
	return root, fs
}

// blockBytes returns the source bytes of a block, read from the test's copy.
func blockBytes(files []*srcFile, b Block) []byte {
	return files[b.File].data[b.Offset : b.Offset+b.Len]
}

// setMtime sets the modification time of path to unix nanoseconds ns.
func setMtime(t testing.TB, path string, ns int64) {
	t.Helper()
	mt := time.Unix(0, ns)
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
}

// build is Build that fails the test on error.
func build(t testing.TB, root string, o Options) *Index {
	t.Helper()
	ix, err := Build(t.Context(), root, o)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}
