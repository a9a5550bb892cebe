package shuffler

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// formatSources writes small datasets of formats whose parts have a
// prologue (csv, npy), an epilogue (wds) or a tail (a last line without
// line end), and returns their directories by format name.
func formatSources(t *testing.T) map[string]string {
	write := func(files map[string][]byte) string {
		dir := t.TempDir()
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	csvA, csvB := []byte("id,text\n"), []byte("id,text\n")
	for i := range 80 {
		csvA = fmt.Appendf(csvA, "%d,\"a\nquoted %d\"\n", i, i)
		csvB = fmt.Appendf(csvB, "%d,b%s\n", 1000+i, strings.Repeat("z", i))
	}
	npy := func(rows int, salt byte) []byte {
		dict := fmt.Sprintf("{'descr': '<u2', 'fortran_order': False, 'shape': (%d, 3), }", rows)
		pad := (64 - (10+len(dict)+1)%64) % 64
		h := append([]byte("\x93NUMPY\x01\x00"), 0, 0)
		binary.LittleEndian.PutUint16(h[8:], uint16(len(dict)+pad+1))
		h = append(append(append(h, dict...), bytes.Repeat([]byte{' '}, pad)...), '\n')
		for i := range rows * 3 {
			h = binary.LittleEndian.AppendUint16(h, uint16(i/3)+uint16(salt)<<8)
		}
		return h
	}
	shard := func(prefix string, n int) []byte {
		var b bytes.Buffer
		w := tar.NewWriter(&b)
		for i := range n {
			for _, ext := range []string{".cls", ".bin"} {
				data := strings.Repeat(prefix, i+1)
				w.WriteHeader(&tar.Header{Name: fmt.Sprintf("%s%03d%s", prefix, i, ext), Mode: 0o644, Size: int64(len(data))})
				w.Write([]byte(data))
			}
		}
		w.Close()
		return b.Bytes()
	}
	return map[string]string{
		"csv": write(map[string][]byte{"a.csv": csvA, "b.csv": csvB, "c.csv": []byte("id,text\n7,last line")}),
		"npy": write(map[string][]byte{"a.npy": npy(100, 1), "b.npy": npy(33, 2)}),
		"wds": write(map[string][]byte{"a.tar": shard("a", 30), "b.tar": shard("b", 11)}),
	}
}

// readRecords reads a whole file of format f.
func readRecords(t *testing.T, f formats.Format, data []byte) (prologue []byte, recs []string) {
	t.Helper()
	rd := f.NewReader(bytes.NewReader(data))
	all, err := formats.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		recs = append(recs, string(r))
	}
	return rd.Prologue(), recs
}

// Parts of every format are files of the format: the prologue, then the
// records, then the epilogue, sized exactly by Plan before anything is
// read, the same at any offset and read size, holding every source record
// once across the K parts; Walk names each record's bytes in its source.
func TestPartsOfEveryFormatAreWholeFilesOfTheFormatWithExactSizes(t *testing.T) {
	for name, dir := range formatSources(t) {
		t.Run(name, func(t *testing.T) {
			ix, err := index.Build(t.Context(), blocktest.Dir(t, dir, false), index.Options{BlockSize: 300})
			if err != nil {
				t.Fatal(err)
			}
			f := ix.Fmt()
			var want []string
			for _, fl := range ix.Files {
				data, _ := os.ReadFile(filepath.Join(dir, fl.Path))
				_, recs := readRecords(t, f, data)
				want = append(want, recs...)
			}
			slices.Sort(want)
			for _, equal := range []bool{false, true} {
				pl, err := NewPlanner(ix, Params{Strategy: "corgipile", Seed: 3, Buffer: BufferSize{Bytes: 1000}, MaxMemory: 1 << 20, EqualParts: equal})
				if err != nil {
					t.Fatal(err)
				}
				ld := blockcache.NewLoader(ix, blockcache.LoaderOptions{MaxMemory: 1 << 20})
				var got []string
				for part := range 3 {
					size, err := pl.Size(0, part, 3)
					if err != nil {
						t.Fatal(err)
					}
					s, err := OpenStream(pl, ld, 0, part, 3)
					if err != nil {
						t.Fatal(err)
					}
					whole := readAll(t, s, 1<<20, 0, size)
					for _, chunk := range []int{1, 7, 513} {
						if b := readAll(t, s, chunk, 0, size); !bytes.Equal(b, whole) {
							t.Fatalf("part %d read %d bytes at a time differs at byte %d", part, chunk, firstDiff(b, whole))
						}
					}
					if n, _ := s.ReadAt(t.Context(), make([]byte, 10), size); n != 0 {
						t.Fatalf("part %d: %d bytes past the end", part, n)
					}
					if equal && name == "wds" {
						// Padding repeats samples, which the tar reader
						// refuses as a key whose members are not
						// consecutive (see the notes of --equal-parts).
						s.Close()
						continue
					}
					pro, recs := readRecords(t, f, whole)
					if int64(len(recs)) != s.Plan().Records {
						t.Fatalf("part %d: the format's reader finds %d records, the plan has %d", part, len(recs), s.Plan().Records)
					}
					if name == "csv" && string(pro) != "id,text\n" {
						t.Fatalf("part %d starts with %q, want the header", part, pro)
					}
					// Walk: each served record is its source bytes, with the
					// tail for a last line without line end.
					k := 0
					err = s.Walk(t.Context(), func(r RecordRef) error {
						data, _ := os.ReadFile(ix.Path(r.File))
						src := string(data[r.Offset:r.Offset+r.Stored]) + string(ix.Files[r.File].Head.Tail[:r.Len-r.Stored])
						if src != recs[k] {
							return fmt.Errorf("record %d: walk says %q, part holds %q", k, src, recs[k])
						}
						k++
						return nil
					})
					if err != nil || k != len(recs) {
						t.Fatalf("part %d walk: %v after %d records of %d", part, err, k, len(recs))
					}
					s.Close()
					if !equal {
						got = append(got, recs...)
					}
				}
				if !equal {
					slices.Sort(got)
					if !slices.Equal(got, want) {
						t.Fatalf("the parts hold %d records, the sources %d (or others)", len(got), len(want))
					}
				}
			}
		})
	}
}
