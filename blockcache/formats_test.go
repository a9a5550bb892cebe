package blockcache

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// formatCase is a small dataset of one format: its files, by name.
type formatCase struct {
	format formats.Format
	files  map[string][]byte
}

// npyBytes returns a .npy file of rows of w uint8 columns.
func npyBytes(rows, w int, salt byte) []byte {
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

// wdsBytes returns a tar shard of n samples KEY.cls + KEY.bin, keys from
// prefix.
func wdsBytes(t testing.TB, prefix string, n int) []byte {
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

func formatCases(t testing.TB) []formatCase {
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
	tf, _ := blocktest.Frames(t, [][]byte{[]byte("a"), []byte("bb"), nil, []byte("dddd")})
	return []formatCase{
		{formats.TFRecord{}, map[string][]byte{"a.tfrecord": tf, "b.tfrecord": tf}},
		{formats.CSV{Header: true}, map[string][]byte{"a.csv": csvA, "b.csv": csvB, "c.csv": []byte("id,text\n999,no line end")}},
		{formats.JSONL{Check: true}, map[string][]byte{"a.jsonl": jl, "b.jsonl": []byte("[1]\r\n{}")}},
		{formats.LibSVM{}, map[string][]byte{"a.libsvm": svm, "b.libsvm": []byte("1 2:3")}},
		{formats.Lines{}, map[string][]byte{"a.txt": lines, "b.txt": []byte("last")}},
		{formats.NPY{}, map[string][]byte{"a.npy": npyBytes(40, 6, 0), "b.npy": npyBytes(3, 6, 100)}},
		{formats.Fixed{RecordSize: 12, HeaderBytes: 3}, map[string][]byte{"a.bin": fixed}},
		{formats.WDS{}, map[string][]byte{"a.tar": wdsBytes(t, "a", 20), "b.tar": wdsBytes(t, "b", 7)}},
	}
}

// write writes the case's files under a new directory and returns it.
func (c formatCase) write(t *testing.T) string {
	root := t.TempDir()
	for name, data := range c.files {
		blocktest.WriteBytes(t, filepath.Join(root, name), data)
	}
	return root
}

// want returns the records the format's reader finds in the files, as
// strings.
func (c formatCase) want(t *testing.T) []string {
	var out []string
	for _, data := range c.files {
		rd := c.format.NewReader(bytes.NewReader(data))
		if fx, ok := c.format.(formats.Fixed); ok {
			rd = formats.Fixed{RecordSize: fx.RecordSize}.NewReader(bytes.NewReader(data[fx.HeaderBytes:]))
		}
		recs, err := formats.ReadAll(rd)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			out = append(out, string(r))
		}
	}
	slices.Sort(out)
	return out
}

// records returns the records of b as strings.
func records(b *Buf) []string {
	var out []string
	for i, s := range b.Starts {
		out = append(out, string(b.Data[s:s+b.RecordLen(i)]))
	}
	return out
}

// Every format is indexed into blocks and loaded, as blocks and as single
// records, into exactly the records its own reader finds, line ends added
// to a last line without one; the sidecar brings the same index back.
func TestEveryFormatIsIndexedAndLoadedIntoTheRecordsItsReaderFinds(t *testing.T) {
	for _, c := range formatCases(t) {
		t.Run(c.format.Name(), func(t *testing.T) {
			root := c.write(t)
			o := index.Options{BlockSize: 150, CacheDir: t.TempDir()}
			if _, ok := c.format.(formats.Fixed); ok {
				o.Format = c.format // never detected
			}
			ix, _, _ := openLogged(t, root, o)
			if ix.Format != c.format.Name() {
				t.Fatalf("format %q, want %q", ix.Format, c.format.Name())
			}
			again, fromCache, log := openLogged(t, root, o)
			if !fromCache {
				t.Fatalf("second open rebuilt the index:\n%s", log)
			}
			if again.Fmt() != ix.Fmt() || !slices.Equal(again.Blocks, ix.Blocks) || !slices.Equal(again.RecordCRCs, ix.RecordCRCs) || again.Bytes != ix.Bytes {
				t.Fatalf("the sidecar gives another index")
			}
			want := c.want(t)
			ld := NewLoader(again, LoaderOptions{MaxMemory: 1 << 20})
			var got []string
			for id := range again.Blocks {
				b, err := ld.Get(t.Context(), Unit{Blocks: []int32{int32(id)}})
				if err != nil {
					t.Fatalf("block %d: %v", id, err)
				}
				got = append(got, records(b)...)
				ld.Release(b)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("blocks serve %d records, the reader finds %d:\n%q\n%q", len(got), len(want), got, want)
			}
			var n int64
			for _, s := range got {
				n += int64(len(s))
			}
			if n != again.Bytes {
				t.Fatalf("records hold %d bytes, index says %d", n, again.Bytes)
			}
			var all []int32
			for r := len(again.Frames) - 1; r >= 0; r-- {
				all = append(all, int32(r))
			}
			b, err := ld.Get(t.Context(), Unit{Records: all})
			if err != nil {
				t.Fatal(err)
			}
			got = records(b)
			ld.Release(b)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("single records serve %d records, the reader finds %d", len(got), len(want))
			}
		})
	}
}

// A byte changed in place (size and modification time kept) in a format
// without checksums fails the load of its block and of its record with EIO
// naming the file, and reports the damage; the other blocks load.
func TestAFlippedByteInAFormatWithoutChecksumsIsEIOForItsBlockOnly(t *testing.T) {
	for _, c := range formatCases(t) {
		if c.format.Checksummed() {
			continue
		}
		t.Run(c.format.Name(), func(t *testing.T) {
			root := c.write(t)
			o := index.Options{BlockSize: 150}
			if _, ok := c.format.(formats.Fixed); ok {
				o.Format = c.format
			}
			ix := build(t, root, o)
			// The last byte of the first block of the first file: a line
			// end, a tar padding byte or a row's byte.
			victim := ix.Blocks[0]
			path := ix.Path(victim.File)
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(path)
			data[victim.Offset+victim.Len-1] ^= 0x01
			blocktest.WriteBytes(t, path, data)
			os.Chtimes(path, fi.ModTime(), fi.ModTime())
			var damage []string
			ld := NewLoader(ix, LoaderOptions{MaxMemory: 1 << 20, OnDamage: func(r string) { damage = append(damage, r) }})
			_, err = ld.Get(t.Context(), Unit{Blocks: []int32{0}})
			if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprint("offset ", victim.Offset)) {
				t.Fatalf("load of the damaged block: %v, want EIO naming %s and offset %d", err, path, victim.Offset)
			}
			if len(damage) != 1 {
				t.Fatalf("OnDamage called %d times, want once", len(damage))
			}
			last := int32(ix.BlockRecords(0)) + victim.Records - 1
			if _, err := ld.Get(t.Context(), Unit{Records: []int32{last}}); !errors.Is(err, syscall.EIO) {
				t.Fatalf("load of the damaged record: %v, want EIO", err)
			}
			for id := 1; id < len(ix.Blocks); id++ {
				b, err := ld.Get(t.Context(), Unit{Blocks: []int32{int32(id)}})
				if err != nil {
					t.Fatalf("block %d, undamaged: %v", id, err)
				}
				ld.Release(b)
			}
		})
	}
}

// Files whose headers disagree, or whose structure is broken, are errors
// at index time naming the file and the offset.
func TestBrokenSourcesOfEveryFormatAreIndexErrorsNamingFileAndOffset(t *testing.T) {
	tarShard := wdsBytes(t, "k", 3)
	badSum := bytes.Clone(tarShard)
	badSum[1536+100] ^= 1 // the mode field of the second sample member's header
	for _, c := range []struct {
		name  string
		files map[string][]byte
		want  []string
	}{
		{"csv headers differ", map[string][]byte{"a.csv": []byte("id,v\n1,2\n"), "b.csv": []byte("id,w\n1,2\n")}, []string{"a.csv", "b.csv", `"id,v\n"`, `"id,w\n"`}},
		{"tar header checksum", map[string][]byte{"a.tar": badSum}, []string{"a.tar", "offset 1536"}},
		{"truncated tar", map[string][]byte{"a.tar": tarShard[:1024]}, []string{"a.tar", "truncated"}},
		{"npy shorter than its header says", map[string][]byte{"a.npy": npyBytes(5, 4, 0)[:128+4*4+2]}, []string{"a.npy"}},
		{"sample split across shards", map[string][]byte{"a.tar": wdsBytes(t, "k", 3), "b.tar": wdsBytes(t, "k", 2)}, []string{"a.tar", "b.tar", "sample key", "is also in shard"}},
		{"mixed formats", map[string][]byte{"a.csv": []byte("id\n1\n"), "b.jsonl": []byte("{}\n")}, []string{"a.csv", "b.jsonl"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := formatCase{files: c.files}.write(t)
			_, err := index.Build(t.Context(), root, index.Options{})
			if err == nil {
				t.Fatal("Build succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
