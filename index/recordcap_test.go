package index

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// frameStats must give the minimum, the median (the element at len/2 of
// the sorted values) and the maximum that sorting a copy gives, for values
// spread over all 32 bits and for values crowded into one bucket.
func TestFrameStatsEqualsSortedCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, spread := range []uint32{1, 7, 1 << 16, 1<<32 - 1} {
		for _, n := range []int{1, 2, 3, 10, 1001} {
			v := make([]uint32, n)
			for i := range v {
				v[i] = 16 + uint32(r.Uint64()%uint64(spread))
			}
			s := slices.Sorted(slices.Values(v))
			lo, med, hi := frameStats(v)
			if lo != s[0] || med != s[n/2] || hi != s[n-1] {
				t.Errorf("spread %d, %d values: frameStats %d %d %d, sorted copy %d %d %d", spread, n, lo, med, hi, s[0], s[n/2], s[n-1])
			}
		}
	}
}

// joinTables must keep the files' order and drop each file's own table.
func TestJoinTablesKeepsFileOrder(t *testing.T) {
	scans := []fileScan{{frames: []uint32{1, 2}}, {}, {frames: []uint32{3}}}
	got := joinTables(scans, func(sc *fileScan) *[]uint32 { return &sc.frames })
	if !slices.Equal(got, []uint32{1, 2, 3}) {
		t.Errorf("joined %v, want [1 2 3]", got)
	}
	for i, sc := range scans {
		if sc.frames != nil {
			t.Errorf("scan %d keeps its table", i)
		}
	}
	one := []fileScan{{}, {frames: []uint32{5, 6}}}
	if got := joinTables(one, func(sc *fileScan) *[]uint32 { return &sc.frames }); !slices.Equal(got, []uint32{5, 6}) {
		t.Errorf("one file's table joined as %v", got)
	}
}

// A full index refuses the record past Options.MaxTables, counting the
// records of every file together, naming the file and the offset; the
// same dataset within the limit is indexed, and its sidecar, cached, is
// refused by a later Open with a lower limit rather than used.
func TestIndexTablesPastMaxTablesAreRefused(t *testing.T) {
	root, _ := blocktest.Dataset(t, 3, 3, 20, 64) // 60 records, 4 bytes of tables each
	_, err := Build(t.Context(), blocktest.Dir(t, root, false), Options{BlockSize: 1 << 10, MaxTables: 4 * 50})
	// Files are scanned a few at once: any of them may hold the 51st.
	if err == nil || !strings.Contains(err.Error(), ".tfrecord: more than 50 records by offset") {
		t.Fatalf("60 records over 3 files with room for 50: %v", err)
	}
	cache := t.TempDir()
	if _, _, err := Open(t.Context(), blocktest.Dir(t, root, false), Options{BlockSize: 1 << 10, MaxTables: 4 * 60, CacheDir: cache}); err != nil {
		t.Fatalf("60 records with room for 60: %v", err)
	}
	_, cached, err := Open(t.Context(), blocktest.Dir(t, root, false), Options{BlockSize: 1 << 10, MaxTables: 4 * 50, CacheDir: cache})
	if err == nil || cached || !strings.Contains(err.Error(), "60 records") {
		t.Fatalf("the cached index of 60 records opened with room for 50: cached %v, %v", cached, err)
	}
}

// A .tfrecord.gz of 200,000 empty records in one block's worth of bytes:
// its blocks end after MaxBlockRecords records (CapCuts), and the sidecar
// of such cuts passes the
// check of compressed cuts: a second Open uses it. The same records, of
// 40 bytes each, are one block.
func TestCompressedBlocksOfTinyRecordsEndAtCapCutsAndReopenFromTheSidecar(t *testing.T) {
	for _, c := range []struct {
		payload int
		blocks  int
	}{{0, 4}, {24, 1}} {
		root := t.TempDir()
		plain := bytes.Repeat(formats.AppendFrame(nil, make([]byte, c.payload)), 200_000)
		blocktest.WriteBytes(t, filepath.Join(root, "a.tfrecord.gz"), blocktest.GzipMembers(1, 6)(t, plain))
		o := Options{BlockSize: 8 << 20, CacheDir: t.TempDir()}
		ix, _, _ := openLogged(t, root, o)
		if len(ix.Blocks) != c.blocks || ix.Records != 200_000 {
			t.Fatalf("records of %d bytes: %d blocks, %d records; want %d blocks of 200000 records", 16+c.payload, len(ix.Blocks), ix.Records, c.blocks)
		}
		for _, b := range ix.Blocks[:len(ix.Blocks)-1] {
			if c.payload == 0 && b.Records != MaxBlockRecords {
				t.Errorf("block %+v: want %d records", b, MaxBlockRecords)
			}
		}
		again, cached, log := openLogged(t, root, o)
		if !cached || !slices.Equal(again.Blocks, ix.Blocks) {
			t.Errorf("records of %d bytes: the sidecar was not used (cached %v); log:\n%s", 16+c.payload, cached, log)
		}
	}
}
