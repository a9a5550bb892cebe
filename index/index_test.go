package index

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// checkBlocks verifies everything an index of undamaged files promises:
// files as written, blocks that start and end at record boundaries inside
// one file, cover each file exactly, are cut by the rule of Cuts and hold
// only intact records.
func checkBlocks(t *testing.T, ix *Index, files []*blocktest.SrcFile) {
	t.Helper()
	if len(ix.Files) != len(files) {
		t.Fatalf("index has %d files, want %d", len(ix.Files), len(files))
	}
	var records, size int64
	for i, f := range files {
		got := ix.Files[i]
		if got.Path != f.Rel || got.Size != int64(len(f.Data)) || got.Records != int64(len(f.Starts)) {
			t.Fatalf("file %d: got %+v, want path %s, size %d, %d records", i, got, f.Rel, len(f.Data), len(f.Starts))
		}
		records += int64(len(f.Starts))
		size += int64(len(f.Data))
	}
	var sumRecords, sumLen int64
	next := make([]int64, len(files)) // where the next block of each file must start
	lastFile := int32(0)
	for j, b := range ix.Blocks {
		if b.File < lastFile {
			t.Fatalf("block %d of file %d follows a block of file %d: blocks out of file order", j, b.File, lastFile)
		}
		lastFile = b.File
		f := files[b.File]
		if b.Offset != next[b.File] {
			t.Fatalf("block %d (%+v) starts at %d, want %d: blocks must tile the file", j, b, b.Offset, next[b.File])
		}
		end := b.Offset + b.Len
		if end > int64(len(f.Data)) {
			t.Fatalf("block %d (%+v) runs past the end of %s (%d bytes): spans two files", j, b, f.Rel, len(f.Data))
		}
		first := f.RecordAt(b.Offset)
		if first < 0 {
			t.Fatalf("block %d starts at %d, not a record boundary of %s", j, b.Offset, f.Rel)
		}
		if end != int64(len(f.Data)) && f.RecordAt(end) < 0 {
			t.Fatalf("block %d ends at %d, not a record boundary of %s", j, end, f.Rel)
		}
		n := len(f.Starts) - first
		if end < int64(len(f.Data)) {
			n = f.RecordAt(end) - first
		}
		if int(b.Records) != n {
			t.Fatalf("block %d (%+v) says %d records, the range holds %d", j, b, b.Records, n)
		}
		// The cut rule: a block ends at the first record boundary at or
		// after each multiple of BlockSize in its file, and nowhere else.
		for k := first + 1; k < first+n; k++ {
			if Cuts(ix.BlockSize, f.Starts[k-1], f.Starts[k]) {
				t.Fatalf("block %d (%+v) holds the record at %d, the first boundary at or after a multiple of BlockSize %d: it must start a block", j, b, f.Starts[k], ix.BlockSize)
			}
		}
		if j+1 < len(ix.Blocks) && ix.Blocks[j+1].File == b.File && !Cuts(ix.BlockSize, f.Starts[first+n-1], end) {
			t.Fatalf("block %d (%+v) ends at %d, though no multiple of BlockSize %d lies since the record before", j, b, end, ix.BlockSize)
		}
		starts, err := formats.Split(blockBytes(files, b), b.Offset, nil)
		if err != nil || len(starts) != int(b.Records) {
			t.Fatalf("block %d (%+v) does not split into its records: %d found, err %v", j, b, len(starts), err)
		}
		next[b.File] = end
		sumRecords += int64(b.Records)
		sumLen += b.Len
	}
	for i, f := range files {
		if next[i] != int64(len(f.Data)) {
			t.Fatalf("blocks of %s end at %d, file has %d bytes", f.Rel, next[i], len(f.Data))
		}
	}
	if sumRecords != records || ix.Records != records {
		t.Fatalf("blocks hold %d records, index says %d, files hold %d", sumRecords, ix.Records, records)
	}
	if sumLen != size || ix.Bytes != size {
		t.Fatalf("blocks hold %d bytes, index says %d, files hold %d", sumLen, ix.Bytes, size)
	}
}

func TestBuildCutsBlocksAtRecordBoundariesWithinFiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	root := t.TempDir()
	var files []*blocktest.SrcFile
	for i, n := range []int{300, 1, 0, 250} { // an empty file too
		ps := blocktest.RandomPayloads(r, n, 3000)
		if n > 100 {
			ps[50] = make([]byte, 20000) // records larger than most block sizes
			ps[51] = make([]byte, 40000)
		}
		files = append(files, blocktest.WriteRecords(t, root, fmt.Sprintf("f%d.tfrecord", i), ps))
	}
	for _, bs := range []int64{1, formats.FrameExtra, 500, 3016, 4096, 16 << 10, 64 << 10, 1 << 30} {
		t.Run(fmt.Sprintf("BlockSize=%d", bs), func(t *testing.T) {
			ix := build(t, root, Options{BlockSize: bs})
			if ix.BlockSize != bs {
				t.Fatalf("BlockSize %d, want %d", ix.BlockSize, bs)
			}
			checkBlocks(t, ix, files)
		})
	}
}

func TestBuildBlockLayoutOfKnownFiles(t *testing.T) {
	// A payload of n bytes makes a frame of n+16.
	type blk struct{ off, len, records int64 }
	for _, tc := range []struct {
		name      string
		lens      []int
		blockSize int64
		want      []blk
	}{
		{"two frames fill a block exactly", []int{84, 84, 84}, 200, []blk{{0, 200, 2}, {200, 100, 1}}},
		{"one byte short of two frames", []int{84, 84, 84}, 199, []blk{{0, 200, 2}, {200, 100, 1}}},
		{"a boundary one byte past the multiple", []int{84, 84, 84}, 201, []blk{{0, 300, 3}}},
		{"frames exactly BlockSize", []int{84, 84}, 100, []blk{{0, 100, 1}, {100, 100, 1}}},
		{"frames larger than BlockSize stand alone", []int{84, 84}, 99, []blk{{0, 100, 1}, {100, 100, 1}}},
		{"huge record between empty ones", []int{0, 4000, 0}, 1000, []blk{{0, 4032, 2}, {4032, 16, 1}}},
		{"small records then a huge one", []int{10, 10, 4000, 10}, 1000, []blk{{0, 4068, 3}, {4068, 26, 1}}},
		{"a huge record spans multiples", []int{10, 4000, 10, 1000}, 1000, []blk{{0, 4042, 2}, {4042, 1042, 2}}},
		{"a cut at every multiple", []int{84, 84, 84, 84}, 100, []blk{{0, 100, 1}, {100, 100, 1}, {200, 100, 1}, {300, 100, 1}}},
		{"whole file in one block", []int{1, 2, 3}, 1 << 20, []blk{{0, 54, 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			f := blocktest.WriteRecords(t, root, "a.tfrecord", blocktest.PayloadsOfLen(rand.New(rand.NewPCG(3, 4)), tc.lens...))
			ix := build(t, root, Options{BlockSize: tc.blockSize})
			var got []blk
			for _, b := range ix.Blocks {
				got = append(got, blk{b.Offset, b.Len, int64(b.Records)})
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("blocks %v, want %v", got, tc.want)
			}
			checkBlocks(t, ix, []*blocktest.SrcFile{f})
		})
	}
}

func TestBuildFindsMatchingFilesRecursivelySortedWithoutFollowingSymlinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	r := rand.New(rand.NewPCG(5, 6))
	rec := func(rel string) { blocktest.WriteRecords(t, root, rel, blocktest.RandomPayloads(r, 3, 100)) }
	for _, rel := range []string{
		"b.tfrecord", "a.tfrecords", "a/x.tfrecord", "a/deep/er/y.tfrecord",
		"d.tfrecord/z.tfrecord", // inside a directory whose name matches
		"c.tfrecord.bak", "UPPER.TFRECORD", "data.rec", "sub/data.rec",
	} {
		rec(rel)
	}
	blocktest.WriteBytes(t, filepath.Join(root, "notes.txt"), []byte("not a record file"))
	blocktest.WriteRecords(t, outside, "o.tfrecord", blocktest.RandomPayloads(r, 3, 100))
	for link, target := range map[string]string{
		"link.tfrecord":     filepath.Join(root, "b.tfrecord"),
		"linkdir":           filepath.Join(root, "a"),
		"linkout":           outside,
		"out.tfrecord":      filepath.Join(outside, "o.tfrecord"),
		"dangling.tfrecord": filepath.Join(root, "missing"),
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		include []string
		want    []string
	}{
		{"default patterns", nil, []string{"a.tfrecords", "a/deep/er/y.tfrecord", "a/x.tfrecord", "b.tfrecord", "d.tfrecord/z.tfrecord"}},
		{"patterns match base names", []string{"x.*", "y.*"}, []string{"a/deep/er/y.tfrecord", "a/x.tfrecord"}},
		{"other extension", []string{"*.rec"}, []string{"data.rec", "sub/data.rec"}},
		{"patterns are case sensitive", []string{"*.TFRECORD"}, []string{"UPPER.TFRECORD"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := build(t, root, Options{Include: tc.include})
			var got []string
			for _, f := range ix.Files {
				got = append(got, f.Path)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("files %q, want %q", got, tc.want)
			}
			if !slices.IsSorted(got) {
				t.Fatalf("files %q are not sorted", got)
			}
			for i, f := range ix.Files {
				if f.Records != 3 {
					t.Fatalf("%s: %d records, want 3", f.Path, f.Records)
				}
				if p := ix.Path(int32(i)); p != filepath.Join(root, filepath.FromSlash(f.Path)) {
					t.Fatalf("Path(%d) = %s", i, p)
				}
			}
		})
	}
}

func TestBuildBadIncludePatternFails(t *testing.T) {
	root := t.TempDir()
	blocktest.WriteRecords(t, root, "a.tfrecord", [][]byte{{1}})
	_, err := Build(t.Context(), blocktest.Dir(t, root, false), Options{Include: []string{"*.tfrecord", "["}})
	if err == nil || !strings.Contains(err.Error(), `"["`) {
		t.Fatalf("err %v, want one naming the bad pattern", err)
	}
}

func TestBuildRecordSizeStatistics(t *testing.T) {
	for _, tc := range []struct {
		name             string
		files            [][]int // payload lengths per file
		min, median, max int64
		medianAlt        int64 // the other middle value, for an even count
	}{
		{"odd count across files", [][]int{{9, 1}, {5, 3, 7}}, 1, 5, 9, 5},
		{"single empty record", [][]int{{0}}, 0, 0, 0, 0},
		{"all equal", [][]int{{2, 2}, {2}}, 2, 2, 2, 2},
		{"even count", [][]int{{4, 1}, {3, 2}}, 1, 3, 4, 2},
		{"large record", [][]int{{100000, 0, 10}}, 0, 10, 100000, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			r := rand.New(rand.NewPCG(7, 8))
			for i, lens := range tc.files {
				blocktest.WriteRecords(t, root, fmt.Sprintf("f%d.tfrecord", i), blocktest.PayloadsOfLen(r, lens...))
			}
			ix := build(t, root, Options{BlockSize: 64})
			if ix.RecordMin != tc.min || ix.RecordMax != tc.max || (ix.RecordMedian != tc.median && ix.RecordMedian != tc.medianAlt) {
				t.Fatalf("min/median/max %d/%d/%d, want %d/%d/%d", ix.RecordMin, ix.RecordMedian, ix.RecordMax, tc.min, tc.median, tc.max)
			}
		})
	}
}

func TestBuildWithoutMatchingFilesFailsClearly(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, root string)
		include []string
		want    []string
	}{
		{"empty directory", func(*testing.T, string) {}, nil, []string{"no files matching", "*.tfrecord or *.tfrecords", "{include}"}},
		{"only other files", func(t *testing.T, root string) {
			blocktest.WriteBytes(t, filepath.Join(root, "sub", "notes.md"), []byte("x"))
		}, nil, []string{"no files matching", "*.tfrecord"}},
		{"only a symlink to a record file", func(t *testing.T, root string) {
			other := t.TempDir()
			blocktest.WriteRecords(t, other, "a.tfrecord", [][]byte{{1}})
			if err := os.Symlink(filepath.Join(other, "a.tfrecord"), filepath.Join(root, "a.tfrecord")); err != nil {
				t.Fatal(err)
			}
		}, nil, []string{"no files matching"}},
		{"records under other names", func(t *testing.T, root string) {
			blocktest.WriteRecords(t, root, "a.tfrecord", [][]byte{{1}})
		}, []string{"*.rec"}, []string{"no files matching *.rec"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.setup(t, root)
			_, err := Build(t.Context(), blocktest.Dir(t, root, false), Options{Include: tc.include})
			if err == nil {
				t.Fatal("Build succeeded")
			}
			for _, w := range append(tc.want, root) {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestBuildStopsWhenContextCancelled(t *testing.T) {
	root, _ := blocktest.Dataset(t, 1, 2, 10, 100)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Build(ctx, blocktest.Dir(t, root, false), Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

// damage describes a change made to a good file and what the index must
// make of it.
type damage struct {
	name  string
	apply func(f *blocktest.SrcFile) []byte // returns the damaged file bytes
	// Expected result, in terms of f's frame offsets.
	errOffset func(f *blocktest.SrcFile) int64
	reason    string
	damaged   func(f *blocktest.SrcFile) [][2]int64 // ranges left out with SkipCorrupt
	lost      int                                   // records lost with SkipCorrupt
}

// victim is the record that the damage cases hit; its payload is not empty.
const victim = 5

func damages() []damage {
	flip := func(at func(f *blocktest.SrcFile) int64) func(f *blocktest.SrcFile) []byte {
		return func(f *blocktest.SrcFile) []byte {
			d := slices.Clone(f.Data)
			d[at(f)] ^= 0x40
			return d
		}
	}
	frame := func(i int) func(f *blocktest.SrcFile) int64 {
		return func(f *blocktest.SrcFile) int64 { return f.Starts[i] }
	}
	last := func(f *blocktest.SrcFile) int64 { return f.Starts[len(f.Starts)-1] }
	recordRange := func(i int) func(f *blocktest.SrcFile) [][2]int64 {
		return func(f *blocktest.SrcFile) [][2]int64 { return [][2]int64{{f.Starts[i], f.Starts[i+1]}} }
	}
	return []damage{
		{
			name:      "flipped data byte",
			apply:     flip(func(f *blocktest.SrcFile) int64 { return f.Starts[victim] + formats.HeaderLen + 1 }),
			errOffset: frame(victim), reason: "data CRC mismatch",
			damaged: recordRange(victim), lost: 1,
		},
		{
			name:      "flipped data CRC byte",
			apply:     flip(func(f *blocktest.SrcFile) int64 { return f.Starts[victim+1] - 1 }),
			errOffset: frame(victim), reason: "data CRC mismatch",
			damaged: recordRange(victim), lost: 1,
		},
		{
			name:      "flipped length byte",
			apply:     flip(func(f *blocktest.SrcFile) int64 { return f.Starts[victim] }),
			errOffset: frame(victim), reason: "length CRC mismatch",
			damaged: recordRange(victim), lost: 1,
		},
		{
			name: "two damaged records",
			apply: func(f *blocktest.SrcFile) []byte {
				d := flip(func(f *blocktest.SrcFile) int64 { return f.Starts[2] + formats.HeaderLen })(f)
				d[f.Starts[victim]+3] ^= 1
				return d
			},
			errOffset: frame(2), reason: "data CRC mismatch",
			damaged: func(f *blocktest.SrcFile) [][2]int64 {
				return [][2]int64{{f.Starts[2], f.Starts[3]}, {f.Starts[victim], f.Starts[victim+1]}}
			},
			lost: 2,
		},
		{
			name:      "truncated inside the last record's data",
			apply:     func(f *blocktest.SrcFile) []byte { return f.Data[:last(f)+formats.FrameExtra+1] },
			errOffset: last, reason: "runs past the end",
			damaged: func(f *blocktest.SrcFile) [][2]int64 { return [][2]int64{{last(f), last(f) + formats.FrameExtra + 1}} },
			lost:    1,
		},
		{
			name:      "truncated inside the last record's header",
			apply:     func(f *blocktest.SrcFile) []byte { return f.Data[:last(f)+5] },
			errOffset: last, reason: "truncated frame",
			damaged: func(f *blocktest.SrcFile) [][2]int64 { return [][2]int64{{last(f), last(f) + 5}} },
			lost:    1,
		},
		{
			name:      "stray bytes at the end",
			apply:     func(f *blocktest.SrcFile) []byte { return append(slices.Clone(f.Data), 1, 2, 3, 4, 5, 6, 7) },
			errOffset: func(f *blocktest.SrcFile) int64 { return int64(len(f.Data)) }, reason: "truncated frame",
			damaged: func(f *blocktest.SrcFile) [][2]int64 { return [][2]int64{{int64(len(f.Data)), int64(len(f.Data)) + 7}} },
			lost:    0,
		},
	}
}

// damagedDataset writes three files and damages the middle one.
func damagedDataset(t *testing.T, d damage) (root string, files []*blocktest.SrcFile, bad *blocktest.SrcFile, badData []byte) {
	t.Helper()
	root = t.TempDir()
	r := rand.New(rand.NewPCG(9, 10))
	for i := range 3 {
		ps := blocktest.RandomPayloads(r, 40, 2000)
		for j := range ps {
			if len(ps[j]) < 8 {
				ps[j] = append(ps[j], make([]byte, 8)...) // every payload can be hit
			}
		}
		files = append(files, blocktest.WriteRecords(t, root, fmt.Sprintf("f%d.tfrecord", i), ps))
	}
	bad = files[1]
	badData = d.apply(bad)
	blocktest.WriteBytes(t, bad.Path, badData)
	return root, files, bad, badData
}

func TestBuildFailsOnCorruptRecordNamingFileAndOffset(t *testing.T) {
	for _, d := range damages() {
		t.Run(d.name, func(t *testing.T) {
			root, _, bad, _ := damagedDataset(t, d)
			_, err := Build(t.Context(), blocktest.Dir(t, root, false), Options{BlockSize: 4096})
			if err == nil {
				t.Fatal("Build succeeded on a damaged file")
			}
			off := d.errOffset(bad)
			for _, w := range []string{bad.Path, fmt.Sprintf("offset %d", off), d.reason, "{skip-corrupt}"} {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
			var ce *formats.CorruptError
			if !errors.As(err, &ce) || ce.Offset != off {
				t.Fatalf("error %v does not wrap a *CorruptError at offset %d", err, off)
			}
		})
	}
}

func TestBuildSkipCorruptLeavesOutOnlyTheDamage(t *testing.T) {
	for _, d := range damages() {
		t.Run(d.name, func(t *testing.T) {
			root, files, bad, badData := damagedDataset(t, d)
			ix := build(t, root, Options{BlockSize: 4096, SkipCorrupt: true})
			wantRanges := d.damaged(bad)
			var gotRanges [][2]int64
			for _, dm := range ix.Damaged {
				if dm.File != bad.Rel || dm.Reason == "" {
					t.Fatalf("damage %+v, want file %s and a reason", dm, bad.Rel)
				}
				gotRanges = append(gotRanges, [2]int64{dm.From, dm.To})
			}
			if !slices.Equal(gotRanges, wantRanges) {
				t.Fatalf("damaged ranges %v, want %v", gotRanges, wantRanges)
			}
			// Every intact record outside the damage is in exactly one block.
			intact := map[[2]int64]int{} // file, offset
			var total int64
			for fi, f := range files {
				for _, s := range f.Starts {
					if fi == 1 && slices.ContainsFunc(wantRanges, func(r [2]int64) bool { return s >= r[0] && s < r[1] }) {
						continue
					}
					intact[[2]int64{int64(fi), s}] = 0
					total++
				}
			}
			if want := total; ix.Records != want || int64(len(files)*40-d.lost) != want {
				t.Fatalf("%d records indexed, want %d (%d lost)", ix.Records, want, d.lost)
			}
			data := [][]byte{files[0].Data, badData, files[2].Data}
			var fileRecords [3]int64
			for _, b := range ix.Blocks {
				for _, r := range wantRanges {
					if b.File == 1 && b.Offset < r[1] && r[0] < b.Offset+b.Len {
						t.Fatalf("block %+v overlaps damage %v", b, r)
					}
				}
				starts, err := formats.Split(data[b.File][b.Offset:b.Offset+b.Len], b.Offset, nil)
				if err != nil || len(starts) != int(b.Records) {
					t.Fatalf("block %+v: %d intact records, err %v", b, len(starts), err)
				}
				for _, s := range starts {
					k := [2]int64{int64(b.File), b.Offset + s}
					n, ok := intact[k]
					if !ok || n != 0 {
						t.Fatalf("record at %v indexed %d times before, or is not a record", k, n)
					}
					intact[k]++
				}
				fileRecords[b.File] += int64(b.Records)
			}
			for k, n := range intact {
				if n != 1 {
					t.Fatalf("intact record %v is in %d blocks", k, n)
				}
			}
			for i, f := range ix.Files {
				if f.Records != fileRecords[i] {
					t.Fatalf("file %s says %d records, its blocks hold %d", f.Path, f.Records, fileRecords[i])
				}
			}
		})
	}
}

func TestBuildRejectsCompressedFilesWithCompressionNone(t *testing.T) {
	rec, _ := blocktest.Frames(t, blocktest.RandomPayloads(rand.New(rand.NewPCG(1, 1)), 20, 500))
	gz := func() []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write(rec)
		w.Close()
		return b.Bytes()
	}()
	zl := func() []byte {
		var b bytes.Buffer
		w := zlib.NewWriter(&b)
		w.Write(rec)
		w.Close()
		return b.Bytes()
	}()
	for _, tc := range []struct {
		name, file string
		data       []byte
		o          Options
	}{
		{"gzip named .tfrecord", "b.tfrecord", gz, Options{Compression: CompressionNone}},
		{"gzip with SkipCorrupt", "b.tfrecord", gz, Options{SkipCorrupt: true, Compression: CompressionNone}},
		{"zlib named .tfrecord", "b.tfrecord", zl, Options{Compression: CompressionNone}},
		{"gzip named .tfrecord.gz", "b.tfrecord.gz", gz, Options{Include: []string{"*.tfrecord", "*.gz"}, Compression: CompressionNone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			blocktest.WriteRecords(t, root, "a.tfrecord", [][]byte{{1, 2, 3}})
			path := filepath.Join(root, tc.file)
			blocktest.WriteBytes(t, path, tc.data)
			_, err := Build(t.Context(), blocktest.Dir(t, root, false), tc.o)
			if !errors.Is(err, formats.ErrCompressed) {
				t.Fatalf("err %v, want formats.ErrCompressed", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name %s", err, path)
			}
		})
	}
}

func TestBuildProgressReachesTotal(t *testing.T) {
	root := t.TempDir()
	r := rand.New(rand.NewPCG(11, 12))
	var total int64
	for i, n := range []int{80, 0, 3, 75} { // 64 KiB records: two files > 4 MiB
		ps := make([][]byte, n)
		for j := range ps {
			ps[j] = make([]byte, 64<<10)
			ps[j][0] = byte(r.Uint32())
		}
		total += int64(len(blocktest.WriteRecords(t, root, fmt.Sprintf("f%d.tfrecord", i), ps).Data))
	}
	type call struct{ done, total int64 }
	var calls []call
	build(t, root, Options{Progress: func(done, total int64) { calls = append(calls, call{done, total}) }})
	if len(calls) < 2 {
		t.Fatalf("progress called %d times, want updates before the end", len(calls))
	}
	var last int64
	for i, c := range calls {
		if c.total != total || c.done < last || c.done > c.total {
			t.Fatalf("call %d: progress(%d, %d) after done=%d, total is %d", i, c.done, c.total, last, total)
		}
		last = c.done
	}
	if c := calls[len(calls)-1]; c.done != total {
		t.Fatalf("last progress call (%d, %d), want done == total", c.done, c.total)
	}
	if calls[0].done == total {
		t.Fatalf("first progress call is already done: %v", calls[0])
	}
}

func TestIndexRecordLocatesEveryRecordInBlockOrder(t *testing.T) {
	root, files := blocktest.Dataset(t, 13, 3, 120, 2500)
	type rec struct{ file, off, n int64 }
	var want []rec
	for fi, f := range files {
		for i, s := range f.Starts {
			want = append(want, rec{int64(fi), s, f.FrameLen(i)})
		}
	}
	cache := t.TempDir()
	for _, tc := range []struct {
		name string
		open func(t *testing.T) *Index
	}{
		{"built", func(t *testing.T) *Index { return build(t, root, Options{BlockSize: 8192}) }},
		{"from the sidecar", func(t *testing.T) *Index {
			o := Options{BlockSize: 8192, CacheDir: cache}
			openLogged(t, root, o)
			ix, fromCache, _ := openLogged(t, root, o)
			if !fromCache {
				t.Fatal("not from the sidecar")
			}
			return ix
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := tc.open(t)
			if len(ix.Frames) != len(want) {
				t.Fatalf("%d frame lengths, %d records", len(ix.Frames), len(want))
			}
			// The tables are built once, lazily, possibly by several readers.
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for r := g; r < len(want); r += 4 {
						f, off, n := ix.Record(int32(r))
						if got := (rec{int64(f), off, n}); got != want[r] {
							t.Errorf("Record(%d) = %+v, want %+v", r, got, want[r])
							return
						}
					}
				})
			}
			wg.Wait()
			var first int64
			for b, blk := range ix.Blocks {
				if got := ix.BlockRecords(int32(b)); got != first {
					t.Fatalf("BlockRecords(%d) = %d, want %d", b, got, first)
				}
				if f, off, _ := ix.Record(int32(first)); f != blk.File || off != blk.Offset {
					t.Fatalf("first record of block %d at file %d offset %d, block is %+v", b, f, off, blk)
				}
				first += int64(blk.Records)
			}
		})
	}
}

func TestIndexRecordSkipsDamagedRecords(t *testing.T) {
	d := damages()[0] // one flipped data byte in record victim of f1
	root, files, bad, _ := damagedDataset(t, d)
	ix := build(t, root, Options{BlockSize: 4096, SkipCorrupt: true})
	r := int32(len(files[0].Starts) + victim) // would be the damaged record
	if f, off, _ := ix.Record(r); f != 1 || off != bad.Starts[victim+1] {
		t.Fatalf("Record(%d) = file %d offset %d, want the record after the damage at %d", r, f, off, bad.Starts[victim+1])
	}
}
