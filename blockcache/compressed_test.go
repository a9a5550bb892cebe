package blockcache

import (
	"bytes"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/zaccess"
	"github.com/klauspost/compress/zstd"
)

// compressor writes data compressed one way, under name plus its ending.
type compressor struct {
	name string
	ext  string
	fn   func(t testing.TB, data []byte) []byte
}

func zlibOf(t testing.TB, data []byte) []byte {
	var out bytes.Buffer
	w := zlib.NewWriter(&out)
	w.Write(data)
	w.Close()
	return out.Bytes()
}

func zstdFrames(frame int) func(testing.TB, []byte) []byte {
	return func(t testing.TB, data []byte) []byte {
		enc, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer enc.Close()
		var out []byte
		for i := 0; i < len(data) || i == 0; i += frame {
			out = enc.EncodeAll(data[i:min(len(data), i+frame)], out)
			if len(data) == 0 {
				break
			}
		}
		return out
	}
}

var compressors = []compressor{
	{"gzip", ".gz", blocktest.GzipMembers(1, 6)},
	{"gzip-members", ".gz", blocktest.GzipMembers(7, 9)},
	{"gzip-no-extension", "", blocktest.GzipMembers(1, 1)}, // found by its magic bytes
	{"zlib", ".zlib", zlibOf},
	{"zstd-frames", ".zst", zstdFrames(20 << 10)},
}

// Every format, compressed every way, is indexed into the records its
// reader finds in the decompressed files, and served as blocks and as
// single records; the sidecar brings the same index back.
func TestCompressedFilesOfEveryFormatServeTheRecordsOfTheirDecompressedCopy(t *testing.T) {
	for _, c := range blocktest.FormatCases(t) {
		for _, z := range compressors {
			t.Run(c.Format.Name()+"/"+z.name, func(t *testing.T) {
				root := t.TempDir()
				for name, data := range c.Files {
					blocktest.WriteBytes(t, filepath.Join(root, name+z.ext), z.fn(t, data))
				}
				o := index.Options{BlockSize: 150, CacheDir: t.TempDir()}
				if _, ok := c.Format.(formats.Fixed); ok {
					o.Format = c.Format
				}
				ix, _, _ := openLogged(t, root, o)
				if ix.Format != c.Format.Name() {
					t.Fatalf("format %q, want %q", ix.Format, c.Format.Name())
				}
				for _, f := range ix.Files {
					if f.Access == nil {
						t.Fatalf("%s is not read as compressed", f.Path)
					}
				}
				again, fromCache, log := openLogged(t, root, o)
				if !fromCache {
					t.Fatalf("second open rebuilt the index:\n%s", log)
				}
				if !slices.Equal(again.Blocks, ix.Blocks) || again.Bytes != ix.Bytes {
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
}

// A compressed file's blocks are those of its decompressed copy (the
// Cuts rule on decompressed offsets), hold its bytes, and each decodes
// from the last place at or before its start where decoding can restart
// (a DEFLATE block boundary, a member or frame start): at most one DEFLATE
// block, or the part of one zstd frame, is decoded and dropped.
func TestCompressedBlocksAreCutAsTheDecompressedCopyFromTheLastRestartBefore(t *testing.T) {
	plain := blocktest.BigTFRecord(t, 1, 512<<10)
	proot := t.TempDir()
	blocktest.WriteBytes(t, filepath.Join(proot, "a.tfrecord"), plain)
	want := build(t, proot, index.Options{BlockSize: 32 << 10})
	for _, z := range compressors {
		t.Run(z.name, func(t *testing.T) {
			root := t.TempDir()
			comp := z.fn(t, plain)
			blocktest.WriteBytes(t, filepath.Join(root, "a.tfrecord"+z.ext), comp)
			ix := build(t, root, index.Options{BlockSize: 32 << 10})
			acc := ix.Files[0].Access
			if acc == nil || acc.Size != int64(len(plain)) {
				t.Fatalf("access %+v, want %d bytes decompressed", acc, len(plain))
			}
			if !slices.Equal(ix.Blocks, want.Blocks) || !slices.Equal(ix.Frames, want.Frames) {
				t.Fatalf("blocks %v,\nthe decompressed copy's %v", ix.Blocks, want.Blocks)
			}
			if len(acc.Points) > len(ix.Blocks)+1 {
				t.Fatalf("%d access points for %d blocks", len(acc.Points), len(ix.Blocks))
			}
			// Every place decoding can restart, for the bound.
			every, err := zaccess.Build(bytes.NewReader(comp), int64(len(comp)), acc.Kind, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			ld := NewLoader(ix, LoaderOptions{MaxMemory: 8 << 20})
			var lead int64
			for id, blk := range ix.Blocks {
				p := acc.PointBefore(blk.Offset)
				best := every.PointBefore(blk.Offset)
				if p != best {
					t.Fatalf("block %d at %d decodes from %d, the last restart before it is at %d", id, blk.Offset, p, best)
				}
				lead = max(lead, blk.Offset-p)
				b, err := ld.Get(t.Context(), Unit{Blocks: []int32{int32(id)}})
				if err != nil {
					t.Fatalf("block %d: %v", id, err)
				}
				if !bytes.Equal(b.Data[:blk.Len], plain[blk.Offset:blk.Offset+blk.Len]) {
					t.Fatalf("block %d differs from the decompressed bytes", id)
				}
				ld.Release(b)
			}
			t.Logf("%d blocks, %d access points, %d restarts; at most %d bytes decoded before a block", len(ix.Blocks), len(acc.Points), len(every.Points), lead)
		})
	}
}

// A byte of a compressed file changed in place fails the blocks it
// decodes into with EIO naming the file, and the blocks before its access
// point still load.
func TestACorruptCompressedByteIsEIOForItsBlocksOnly(t *testing.T) {
	plain := blocktest.BigTFRecord(t, 2, 512<<10)
	root := t.TempDir()
	path := filepath.Join(root, "a.tfrecord.gz")
	comp := blocktest.GzipMembers(1, 6)(t, plain)
	blocktest.WriteBytes(t, path, comp)
	ix := build(t, root, index.Options{BlockSize: 32 << 10})
	fi, _ := os.Stat(path)
	bad := bytes.Clone(comp)
	bad[len(bad)*3/4] ^= 0x40
	blocktest.WriteBytes(t, path, bad)
	os.Chtimes(path, fi.ModTime(), fi.ModTime())
	var damage []string
	ld := NewLoader(ix, LoaderOptions{MaxMemory: 8 << 20, OnDamage: func(s string) { damage = append(damage, s) }})
	var failed, good int
	for id, blk := range ix.Blocks {
		b, err := ld.Get(t.Context(), Unit{Blocks: []int32{int32(id)}})
		if err != nil {
			if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), path) {
				t.Fatalf("block %d: %v, want EIO naming %s", id, err, path)
			}
			failed++
			continue
		}
		if !bytes.Equal(b.Data[:blk.Len], plain[blk.Offset:blk.Offset+blk.Len]) {
			t.Fatalf("block %d served wrong bytes", id)
		}
		ld.Release(b)
		good++
	}
	if failed == 0 || good < len(ix.Blocks)/2 {
		t.Fatalf("%d blocks failed, %d loaded: want the damaged ones only to fail", failed, good)
	}
}

// A truncated gzip file and one with bytes after its end are index errors
// naming the file and the offset.
func TestTruncatedOrTrailingGarbageGzipIsAnIndexErrorNamingFileAndOffset(t *testing.T) {
	plain := blocktest.BigTFRecord(t, 3, 200<<10)
	comp := blocktest.GzipMembers(1, 6)(t, plain)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"truncated", comp[:len(comp)-100], "truncated"},
		{"trailing garbage", append(bytes.Clone(comp), "junk"...), "trailing bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			path := filepath.Join(root, "a.tfrecord.gz")
			blocktest.WriteBytes(t, path, tc.data)
			_, err := index.Build(t.Context(), blocktest.Dir(t, root, false), index.Options{})
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "byte ") {
				t.Fatalf("err %v, want one naming %s, saying %q and the offset", err, path, tc.want)
			}
		})
	}
}

// memSource is a source.Source of files in memory that counts the bytes
// read from them.
type memSource struct {
	files map[string][]byte
	read  atomic.Int64
}

func (m *memSource) String() string { return "mem://test" }
func (m *memSource) ID() string     { return "mem://test" }
func (m *memSource) List(_ context.Context, match func(string) bool) ([]source.Object, error) {
	var objs []source.Object
	for name, b := range m.files {
		if match(path.Base(name)) {
			objs = append(objs, source.Object{Path: name, Size: int64(len(b)), Version: "1"})
		}
	}
	slices.SortFunc(objs, func(a, b source.Object) int { return strings.Compare(a.Path, b.Path) })
	return objs, nil
}
func (m *memSource) Open(p, _ string) (source.File, error) {
	return memFile{Reader: bytes.NewReader(m.files[p]), src: m, name: p}, nil
}

type memFile struct {
	*bytes.Reader
	src  *memSource
	name string
}

func (f memFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.Reader.ReadAt(p, off)
	f.src.read.Add(int64(n))
	return n, err
}
func (f memFile) Close() error { return nil }
func (f memFile) Name() string { return f.name }

// A gzip file of one member (TensorFlow's GZIP TFRecord) is indexed in
// one decompression: its compressed bytes are read about once. A file of
// several members, whose trailer's length is only its last member's, is
// read about twice, and indexed the same as a file that says nothing.
func TestOneMemberGzipIsIndexedInOneDecompression(t *testing.T) {
	// Larger than the 1 MiB pieces a remote file is read in.
	plain := blocktest.BigTFRecord(t, 5, 3<<20)
	for _, tc := range []struct {
		name     string
		comp     []byte
		min, max float64 // compressed bytes read, in file sizes
	}{
		{"one member", blocktest.GzipMembers(1, 6)(t, plain), 1, 1.3},
		{"members", blocktest.GzipMembers(5, 6)(t, plain), 1.9, 2.6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &memSource{files: map[string][]byte{"a.tfrecord.gz": tc.comp}}
			ix, err := index.Build(t.Context(), src, index.Options{BlockSize: 256 << 10})
			if err != nil {
				t.Fatal(err)
			}
			if got := float64(src.read.Load()) / float64(len(tc.comp)); got < tc.min || got > tc.max {
				t.Fatalf("indexing read %.2f times the file's bytes, want %.1f to %.1f", got, tc.min, tc.max)
			}
			if ix.Files[0].Access.Size != int64(len(plain)) || ix.Records == 0 {
				t.Fatalf("%d bytes, %d records", ix.Files[0].Access.Size, ix.Records)
			}
			var at int64
			for _, b := range ix.Blocks {
				if b.Offset != at {
					t.Fatalf("block at %d, want %d", b.Offset, at)
				}
				at += b.Len
			}
			if at != int64(len(plain)) {
				t.Fatalf("blocks end at %d of %d", at, len(plain))
			}
		})
	}
}

// The sizes of zstd frames are taken from their headers, and checked by
// the one decompression of the scan: a header that says one byte less or
// one more than its frame holds is an index error naming the file.
func TestZstdFrameSizesFromHeadersAreCheckedByTheScan(t *testing.T) {
	plain := blocktest.BigTFRecord(t, 6, 100<<10)
	comp := zstdFrames(40<<10)(t, plain)
	// The last frame: its header is the last magic number's.
	last := bytes.LastIndex(comp, []byte{0x28, 0xb5, 0x2f, 0xfd})
	fhd := comp[last+4]
	at := last + 5
	if fhd&0x20 == 0 {
		at++ // window descriptor
	}
	at += []int{0, 1, 2, 4}[fhd&3]
	if fhd>>6 == 0 && fhd&0x20 == 0 {
		t.Fatalf("the encoder wrote no frame content size (descriptor %02x)", fhd)
	}
	for _, delta := range []int{-1, 1} {
		t.Run(fmt.Sprint(delta), func(t *testing.T) {
			bad := bytes.Clone(comp)
			bad[at] = byte(int(bad[at]) + delta)
			root := t.TempDir()
			path := filepath.Join(root, "a.tfrecord.zst")
			blocktest.WriteBytes(t, path, bad)
			if _, err := index.Build(t.Context(), blocktest.Dir(t, root, false), index.Options{BlockSize: 16 << 10}); err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("err %v, want an error naming %s", err, path)
			}
		})
	}
}

// Blocks of compressed objects in a remote source are read with ranged
// reads from their access point to the next one and a little more: every
// block loads the decompressed bytes, and an epoch of blocks reads the
// compressed bytes once, plus less than 512 KiB a block.
func TestRemoteCompressedBlocksAreReadFromTheirAccessPointToTheNext(t *testing.T) {
	plain := blocktest.BigTFRecord(t, 7, 1536<<10)
	for _, z := range []compressor{compressors[0], compressors[1], compressors[3], {"zstd-frames", ".zst", zstdFrames(64 << 10)}} {
		t.Run(z.name, func(t *testing.T) {
			comp := z.fn(t, plain)
			src := &memSource{files: map[string][]byte{"a.tfrecord" + z.ext: comp}}
			ix, err := index.Build(t.Context(), src, index.Options{BlockSize: 256 << 10})
			if err != nil {
				t.Fatal(err)
			}
			src.read.Store(0)
			ld := NewLoader(ix, LoaderOptions{MaxMemory: 8 << 20})
			for id, blk := range ix.Blocks {
				b, err := ld.Get(t.Context(), Unit{Blocks: []int32{int32(id)}})
				if err != nil {
					t.Fatalf("block %d: %v", id, err)
				}
				if !bytes.Equal(b.Data[:blk.Len], plain[blk.Offset:blk.Offset+blk.Len]) {
					t.Fatalf("block %d differs from the decompressed bytes", id)
				}
				ld.Release(b)
			}
			// Each block reads its stretch, and at most a few pieces
			// past it for the record across the next access point.
			if got, most := src.read.Load(), int64(len(comp))+int64(len(ix.Blocks))*(512<<10); got > most {
				t.Fatalf("an epoch of %d blocks read %d bytes, %.2f times the %d compressed bytes; want at most %d", len(ix.Blocks), got, float64(got)/float64(len(comp)), len(comp), most)
			}
		})
	}
}
