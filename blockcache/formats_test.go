package blockcache

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// wantRecords returns the records the format's reader finds in c's files, as
// strings.
func wantRecords(t *testing.T, c blocktest.FormatCase) []string {
	var out []string
	for _, data := range c.Files {
		rd := c.Format.NewReader(bytes.NewReader(data))
		if fx, ok := c.Format.(formats.Fixed); ok {
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
	for _, c := range blocktest.FormatCases(t) {
		t.Run(c.Format.Name(), func(t *testing.T) {
			root := c.Write(t)
			o := index.Options{BlockSize: 150, CacheDir: t.TempDir()}
			if _, ok := c.Format.(formats.Fixed); ok {
				o.Format = c.Format // never detected
			}
			ix, _, _ := openLogged(t, root, o)
			if ix.Format != c.Format.Name() {
				t.Fatalf("format %q, want %q", ix.Format, c.Format.Name())
			}
			again, fromCache, log := openLogged(t, root, o)
			if !fromCache {
				t.Fatalf("second open rebuilt the index:\n%s", log)
			}
			if again.Fmt() != ix.Fmt() || !slices.Equal(again.Blocks, ix.Blocks) || !slices.Equal(again.RecordCRCs, ix.RecordCRCs) || again.Bytes != ix.Bytes {
				t.Fatalf("the sidecar gives another index")
			}
			want := wantRecords(t, c)
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
	for _, c := range blocktest.FormatCases(t) {
		if c.Format.Checksummed() {
			continue
		}
		t.Run(c.Format.Name(), func(t *testing.T) {
			root := c.Write(t)
			o := index.Options{BlockSize: 150}
			if _, ok := c.Format.(formats.Fixed); ok {
				o.Format = c.Format
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
	tarShard := blocktest.WDSBytes(t, "k", 3)
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
		{"npy shorter than its header says", map[string][]byte{"a.npy": blocktest.NPYBytes(5, 4, 0)[:128+4*4+2]}, []string{"a.npy"}},
		{"sample split across shards", map[string][]byte{"a.tar": blocktest.WDSBytes(t, "k", 3), "b.tar": blocktest.WDSBytes(t, "k", 2)}, []string{"a.tar", "b.tar", "sample key", "is also in shard"}},
		{"mixed formats", map[string][]byte{"a.csv": []byte("id\n1\n"), "b.jsonl": []byte("{}\n")}, []string{"a.csv", "b.jsonl"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := blocktest.FormatCase{Files: c.files}.Write(t)
			_, err := index.Build(t.Context(), blocktest.Dir(t, root, false), index.Options{})
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
