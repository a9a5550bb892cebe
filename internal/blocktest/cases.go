package blocktest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/formats"
)

// The small datasets of every format that the tests of the index and of
// the loader both use.

// FormatCase is a small dataset of one format: its files, by name.
type FormatCase struct {
	Format formats.Format
	Files  map[string][]byte
}

// FormatCases returns a dataset of every format, with the cases each
// format's framing has (CSV rows over lines, empty TFRecord records, a
// tar directory entry).
func FormatCases(t testing.TB) []FormatCase {
	var csvA, csvB, jl, svm, lines []byte
	csvA, csvB = []byte("id,text\r\n"), []byte("id,text\n")
	for i := range 60 {
		csvA = fmt.Appendf(csvA, "%d,\"two\nlines %d\"\r\n", i, i)
		csvB = fmt.Appendf(csvB, "%d,plain %d\n", 100+i, i)
		jl = fmt.Appendf(jl, "{\"n\": %d, \"s\": \"%s\"}\n", i, strings.Repeat("x", i))
		svm = fmt.Appendf(svm, "%d 1:%d 7:0.5\n", i%2, i)
		lines = fmt.Appendf(lines, "line %d\n", i)
	}
	fixed := []byte("HDR")
	for i := range 50 {
		fixed = append(fixed, bytes.Repeat([]byte{byte(i)}, 12)...)
	}
	tf, _ := Frames(t, [][]byte{[]byte("a"), []byte("bb"), nil, []byte("dddd")})
	return []FormatCase{
		{formats.TFRecord{}, map[string][]byte{"a.tfrecord": tf, "b.tfrecord": tf}},
		{formats.CSV{Header: true}, map[string][]byte{"a.csv": csvA, "b.csv": csvB, "c.csv": []byte("id,text\n999,no line end")}},
		{formats.JSONL{Check: true}, map[string][]byte{"a.jsonl": jl, "b.jsonl": []byte("[1]\r\n{}")}},
		{formats.LibSVM{}, map[string][]byte{"a.libsvm": svm, "b.libsvm": []byte("1 2:3")}},
		{formats.Lines{}, map[string][]byte{"a.txt": lines, "b.txt": []byte("last")}},
		{formats.NPY{}, map[string][]byte{"a.npy": NPYBytes(40, 6, 0), "b.npy": NPYBytes(3, 6, 100)}},
		{formats.Fixed{RecordSize: 12, HeaderBytes: 3}, map[string][]byte{"a.bin": fixed}},
		{formats.WDS{}, map[string][]byte{"a.tar": WDSBytes(t, "a", 20), "b.tar": WDSBytes(t, "b", 7)}},
	}
}

// Write writes the case's files under a new directory and returns it.
func (c FormatCase) Write(t *testing.T) string {
	root := t.TempDir()
	for name, data := range c.Files {
		WriteBytes(t, filepath.Join(root, name), data)
	}
	return root
}

// BigTFRecord returns a TFRecord file of about n bytes whose records
// compress somewhat.
func BigTFRecord(t testing.TB, seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	var recs [][]byte
	for size := 0; size < n; {
		p := make([]byte, r.IntN(3000))
		var v uint64
		for i := range p {
			if i%8 == 0 {
				v = r.Uint64()
			}
			p[i] = "corgipile"[v%9]
			if v&0x3f == 0 {
				p[i] = byte(v >> 8) // now and then a byte of any value
			}
			v >>= 8
		}
		recs = append(recs, p)
		size += len(p) + formats.FrameExtra
	}
	data, _ := Frames(t, recs)
	return data
}

// GzipMembers returns a compressor that writes data as members gzip
// members at level.
func GzipMembers(members, level int) func(testing.TB, []byte) []byte {
	return func(t testing.TB, data []byte) []byte {
		var out bytes.Buffer
		step := max(1, (len(data)+members-1)/members)
		for i := 0; i < len(data) || i == 0; i += step {
			w, _ := gzip.NewWriterLevel(&out, level)
			w.Write(data[i:min(len(data), i+step)])
			w.Close()
			if len(data) == 0 {
				break
			}
		}
		return out.Bytes()
	}
}

// NPYBytes returns a .npy file of rows of w uint8 columns.
func NPYBytes(rows, w int, salt byte) []byte {
	dict := fmt.Sprintf("{'descr': '|u1', 'fortran_order': False, 'shape': (%d, %d), }", rows, w)
	hl := 10 + len(dict) + 1
	pad := (64 - hl%64) % 64
	h := append([]byte("\x93NUMPY\x01\x00"), 0, 0)
	binary.LittleEndian.PutUint16(h[8:], uint16(len(dict)+pad+1))
	h = append(h, dict...)
	h = append(h, bytes.Repeat([]byte{' '}, pad)...)
	h = append(h, '\n')
	for i := range rows * w {
		h = append(h, byte(i/w)+salt)
	}
	return h
}

// WDSBytes returns a tar shard of n samples KEY.cls + KEY.bin, keys from
// prefix.
func WDSBytes(t testing.TB, prefix string, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	// A directory entry first: it belongs to no sample, so the file's
	// records start after it.
	w.WriteHeader(&tar.Header{Name: prefix + "dir/", Typeflag: tar.TypeDir, Mode: 0o755})
	for i := range n {
		key := fmt.Sprintf("%s%04d", prefix, i)
		for _, m := range []struct{ ext, data string }{{".cls", fmt.Sprint(i % 10)}, {".bin", strings.Repeat(string(rune('a'+i%26)), 100+i)}} {
			if err := w.WriteHeader(&tar.Header{Name: key + m.ext, Mode: 0o644, Size: int64(len(m.data)), Typeflag: tar.TypeReg}); err != nil {
				t.Fatal(err)
			}
			w.Write([]byte(m.data))
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
