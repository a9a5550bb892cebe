package blockcache

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
	"github.com/corgifs/corgifs/internal/testenv"
	"github.com/klauspost/compress/zstd"
)

// loadEvery loads every block of ix alone and returns the ids of those
// that fail (each with EIO naming path, or the test fails) and checks that
// the others hold plain's bytes at their offsets.
func loadEvery(t *testing.T, ix *index.Index, plain []byte, path string) []int {
	t.Helper()
	ld := NewLoader(ix, LoaderOptions{MaxMemory: 8 << 20, OnDamage: func(string) {}})
	var failed []int
	for id, blk := range ix.Blocks {
		b, err := ld.Get(t.Context(), Unit{Blocks: []int32{int32(id)}})
		if err != nil {
			if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), path) {
				t.Fatalf("block %d: %v, want EIO naming %s", id, err, path)
			}
			failed = append(failed, id)
			continue
		}
		if !bytes.Equal(b.Data[:blk.Len], plain[blk.Offset:blk.Offset+blk.Len]) {
			t.Fatalf("block %d served wrong bytes", id)
		}
		ld.Release(b)
	}
	return failed
}

// A byte damaged in place fails exactly the blocks that decode it: those
// that decode from the access point before the damage, and at most the
// block before them (whose end is decoded past that point). Every other
// block loads its right bytes.
func TestACorruptCompressedByteFailsOnlyTheBlocksDecodedFromItsAccessPoint(t *testing.T) {
	plain := blocktest.BigTFRecord(t, 2, 512<<10)
	for _, at := range []float64{0.3, 0.55, 0.8} {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			root := t.TempDir()
			path := filepath.Join(root, "a.tfrecord.gz")
			comp := blocktest.GzipMembers(1, 6)(t, plain)
			blocktest.WriteBytes(t, path, comp)
			ix := build(t, root, index.Options{BlockSize: 32 << 10})
			acc := ix.Files[0].Access
			fi, _ := os.Stat(path)
			bad := bytes.Clone(comp)
			d := int64(float64(len(bad)) * at)
			bad[d] ^= 0x40
			blocktest.WriteBytes(t, path, bad)
			os.Chtimes(path, fi.ModTime(), fi.ModTime())

			// The access point covering the damage: the last whose
			// compressed input starts at or before it.
			cover := acc.Points[0]
			for _, p := range acc.Points {
				if p.In/8 <= d {
					cover = p
				}
			}
			var may []int
			for id, blk := range ix.Blocks {
				if acc.PointBefore(blk.Offset) == cover.Out {
					if len(may) == 0 && id > 0 {
						may = append(may, id-1)
					}
					may = append(may, id)
				}
			}
			failed := loadEvery(t, ix, plain, path)
			if len(failed) == 0 {
				t.Fatalf("no block failed; damage at byte %d, its access point at %d", d, cover.Out)
			}
			for _, id := range failed {
				if !slices.Contains(may, id) {
					t.Fatalf("blocks %v failed, want only some of %v (those decoded from the access point at %d, before the damaged byte %d)", failed, may, cover.Out, d)
				}
			}
			if len(may) > 4 {
				t.Fatalf("%d blocks decode from one access point at 32 KiB blocks", len(may))
			}
		})
	}
}

// In a text file stored in gzip's stored blocks (level 0), a changed byte
// is no damage to gzip: the file below is a valid gzip file, CRC-32 and
// length included, of other text. Only the per-block CRC32C of the
// decompressed bytes tells, and the block is EIO, not other bytes.
func TestAChangedByteOnlyTheBlockChecksumCatchesIsEIONotOtherBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	var plain []byte
	for len(plain) < 300<<10 {
		plain = fmt.Appendf(plain, "{\"id\": %d, \"text\": \"%x\"}\n", len(plain), r.Uint64())
	}
	stored := func(data []byte) []byte {
		var out bytes.Buffer
		w, _ := gzip.NewWriterLevel(&out, gzip.NoCompression)
		w.Write(data)
		w.Close()
		return out.Bytes()
	}
	root := t.TempDir()
	path := filepath.Join(root, "a.jsonl.gz")
	comp := stored(plain)
	blocktest.WriteBytes(t, path, comp)
	ix := build(t, root, index.Options{BlockSize: 32 << 10})
	fi, _ := os.Stat(path)

	other := bytes.Clone(plain)
	i := bytes.Index(other[len(other)/2:], []byte(`"text": "`)) + len(other)/2 + 9
	other[i] ^= 1 // a hex digit becomes another letter or digit: valid JSON still
	bad := stored(other)
	if len(bad) != len(comp) {
		t.Fatalf("stored sizes differ")
	}
	blocktest.WriteBytes(t, path, bad)
	os.Chtimes(path, fi.ModTime(), fi.ModTime())

	failed := loadEvery(t, ix, plain, path)
	want := -1
	for id, blk := range ix.Blocks {
		if blk.Offset <= int64(i) && int64(i) < blk.Offset+blk.Len {
			want = id
		}
	}
	if !slices.Equal(failed, []int{want}) {
		t.Fatalf("blocks %v failed, want exactly block %d, which holds the changed byte", failed, want)
	}
}

// A zstd file of one frame can restart decoding only at its start: cut
// like its decompressed copy, each of its blocks would decode from there
// at every load. It is one block, with a warning that names it, loads its
// bytes, and its sidecar is taken back as it is (no rebuild at each open).
func TestSingleFrameZstdIsIndexedAsOneBlockWithAWarningAndItsSidecarIsKept(t *testing.T) {
	plain := blocktest.BigTFRecord(t, 5, 200<<10)
	root := t.TempDir()
	path := filepath.Join(root, "one.tfrecord.zst")
	blocktest.WriteBytes(t, path, zstdFrames(1<<30)(t, plain))
	o := index.Options{BlockSize: 32 << 10, CacheDir: t.TempDir()}
	ix, _, log := openLogged(t, root, o)
	if n := len(ix.Files[0].Access.Points); n != 1 {
		t.Fatalf("%d access points in a file of one frame", n)
	}
	if len(ix.Blocks) != 1 || ix.Blocks[0].Offset != 0 || ix.Blocks[0].Len != int64(len(plain)) {
		t.Fatalf("blocks %+v, want one block of the whole file (%d bytes)", ix.Blocks, len(plain))
	}
	var line string
	for l := range strings.Lines(log) {
		if strings.Contains(l, "one frame") {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, path) || !strings.Contains(line, "level=WARN") || !strings.Contains(line, "one block") {
		t.Fatalf("no warning line naming %s and saying it is one block:\n%s", path, log)
	}
	if failed := loadEvery(t, ix, plain, path); len(failed) > 0 {
		t.Fatalf("blocks %v failed", failed)
	}
	again, fromCache, log := openLogged(t, root, o)
	if !fromCache || len(again.Blocks) != 1 {
		t.Fatalf("reopened: from the sidecar %v, %d blocks, want the sidecar's one block\n%s", fromCache, len(again.Blocks), log)
	}
}

// skippable returns a zstd skippable frame (magic 0x184D2A5?) around p.
func skippable(nibble byte, p []byte) []byte {
	out := binary.LittleEndian.AppendUint32(nil, 0x184D2A50|uint32(nibble))
	out = binary.LittleEndian.AppendUint32(out, uint32(len(p)))
	return append(out, p...)
}

// The zstd seekable format (frames, then a skippable frame holding the
// seek table), with skippable frames between frames too, is cut and
// served as its decompressed copy.
func TestZstdSeekableFormatWithSkippableFramesIsServedAsItsDecompressedCopy(t *testing.T) {
	plain := blocktest.BigTFRecord(t, 6, 300<<10)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var comp, table []byte
	const frame = 24 << 10
	for i := 0; i < len(plain); i += frame {
		n := len(comp)
		comp = enc.EncodeAll(plain[i:min(len(plain), i+frame)], comp)
		// Seek table entry: compressed size, decompressed size, checksum.
		table = binary.LittleEndian.AppendUint32(table, uint32(len(comp)-n))
		table = binary.LittleEndian.AppendUint32(table, uint32(min(len(plain), i+frame)-i))
		table = binary.LittleEndian.AppendUint32(table, 0)
		if i/frame%5 == 2 {
			comp = append(comp, skippable(3, []byte("between frames"))...)
		}
	}
	// Seek table footer: number of frames, descriptor (checksums), magic.
	table = binary.LittleEndian.AppendUint32(table, uint32(len(table)/12))
	table = append(table, 0x80)
	table = binary.LittleEndian.AppendUint32(table, 0x8F92EAB1)
	comp = append(comp, skippable(0xE, table)...)

	root := t.TempDir()
	path := filepath.Join(root, "s.tfrecord.zst")
	blocktest.WriteBytes(t, path, comp)
	ix := build(t, root, index.Options{BlockSize: 32 << 10})
	if n := len(ix.Files[0].Access.Points); n < 4 {
		t.Fatalf("%d access points (frame starts) in %d bytes of 24 KiB frames", n, len(plain))
	}
	proot := t.TempDir()
	blocktest.WriteBytes(t, filepath.Join(proot, "s.tfrecord"), plain)
	want := build(t, proot, index.Options{BlockSize: 32 << 10})
	if !slices.Equal(ix.Blocks, want.Blocks) {
		t.Fatalf("blocks %v, the decompressed copy's %v", ix.Blocks, want.Blocks)
	}
	if failed := loadEvery(t, ix, plain, path); len(failed) > 0 {
		t.Fatalf("blocks %v failed", failed)
	}
}

// bgzf writes data as BGZF does (bgzip, Biopython): gzip members of at
// most 64 KiB, each with the BC extra subfield giving its size, and an
// empty member at the end.
func bgzf(t testing.TB, data []byte) []byte {
	var out []byte
	member := func(p []byte) {
		var b bytes.Buffer
		w, _ := gzip.NewWriterLevel(&b, 6)
		w.Header.Extra = []byte{'B', 'C', 2, 0, 0, 0}
		w.Write(p)
		w.Close()
		m := b.Bytes()
		// XLEN is at 10, the subfield at 12: BSIZE at 16 is the
		// member's size minus 1.
		if m[3]&4 == 0 || m[12] != 'B' {
			t.Fatalf("no extra field written")
		}
		binary.LittleEndian.PutUint16(m[16:], uint16(len(m)-1))
		out = append(out, m...)
	}
	for i := 0; i < len(data); i += 60000 {
		member(data[i:min(len(data), i+60000)])
	}
	member(nil)
	return out
}

// BGZF files: the member starts are access points (no window kept), and
// the file is cut and served as its decompressed copy.
func TestBGZFMembersWithExtraFieldsAreAccessPoints(t *testing.T) {
	plain := blocktest.BigTFRecord(t, 7, 400<<10)
	root := t.TempDir()
	path := filepath.Join(root, "b.tfrecord.gz")
	blocktest.WriteBytes(t, path, bgzf(t, plain))
	ix := build(t, root, index.Options{BlockSize: 32 << 10})
	proot := t.TempDir()
	blocktest.WriteBytes(t, filepath.Join(proot, "b.tfrecord"), plain)
	want := build(t, proot, index.Options{BlockSize: 32 << 10})
	if !slices.Equal(ix.Blocks, want.Blocks) {
		t.Fatalf("blocks %v, the decompressed copy's %v", ix.Blocks, want.Blocks)
	}
	members := 0
	for _, p := range ix.Files[0].Access.Points {
		if p.Member {
			members++
		}
	}
	if members < 2 {
		t.Fatalf("%d of %d access points are member starts", members, len(ix.Files[0].Access.Points))
	}
	if failed := loadEvery(t, ix, plain, path); len(failed) > 0 {
		t.Fatalf("blocks %v failed", failed)
	}
}

// At the default block size the access points of a file that compresses
// little (random hex text, by gzip -1) take at most 1% of its compressed
// size.
func TestAccessPointsTakeAtMostOnePercentOfTheCompressedSize(t *testing.T) {
	if _, err := exec.LookPath("gzip"); err != nil {
		testenv.Missing(t, "gzip is not installed (Debian package gzip)")
	}
	r := rand.New(rand.NewChaCha8([32]byte{9}))
	var plain []byte
	for len(plain) < 20<<20 {
		plain = fmt.Appendf(plain, "\"%x%x%x%x\"\n", r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64())
	}
	root := t.TempDir()
	path := filepath.Join(root, "a.jsonl")
	blocktest.WriteBytes(t, path, plain)
	if b, err := exec.Command("gzip", "-1", path).CombinedOutput(); err != nil {
		t.Fatalf("gzip: %v\n%s", err, b)
	}
	ix := build(t, root, index.Options{BlockSize: 8 << 20})
	s := ix.Compressed()
	if s.Files != 1 || s.Points < 2 {
		t.Fatalf("%+v", s)
	}
	if s.PointBytes*100 > s.Stored {
		t.Fatalf("access points take %d bytes, %.2f%% of the %d compressed", s.PointBytes, 100*float64(s.PointBytes)/float64(s.Stored), s.Stored)
	}
	t.Logf("%d access points, %d bytes: %.2f%% of %d compressed", s.Points, s.PointBytes, 100*float64(s.PointBytes)/float64(s.Stored), s.Stored)
}
