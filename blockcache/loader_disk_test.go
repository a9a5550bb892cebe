package blockcache

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corgifs/corgifs/diskcache"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
	"github.com/corgifs/corgifs/source/local"
)

// diskLoader returns a loader of f's index over a disk cache in dir,
// which the test closes at its end.
func diskLoader(t *testing.T, f *loaderFixture, dir string, log *blocktest.LockedBuffer) (*Loader, *diskcache.Cache) {
	t.Helper()
	lg := slog.New(slog.NewTextHandler(log, nil))
	dc, err := diskcache.Open(f.ix, diskcache.Options{Dir: dir, MaxBytes: 1 << 30, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	return NewLoader(f.ix, LoaderOptions{MaxMemory: 1 << 30, Buffered: true, Logger: lg, DiskCache: dc}), dc
}

// loadAll gets every block of the index, one unit each, for epoch, and
// checks its bytes.
func (f *loaderFixture) loadAll(t *testing.T, l *Loader, epoch int) {
	t.Helper()
	for id := range f.ix.Blocks {
		u := Unit{Blocks: []int32{int32(id)}, Epoch: epoch}
		b, err := l.Get(t.Context(), u)
		if err != nil {
			t.Fatalf("Get(%+v): %v", u, err)
		}
		if why := f.placed(b); why != "" {
			t.Fatalf("Buf of %+v: %s", u, why)
		}
		l.Release(b)
	}
}

// placed says how b, a Buf of blocks, differs from the source, or "": a
// loader with a disk cache that reads into pages places each block in
// pages of its own (placeBlock), so its bytes are compared where its
// extent says it is.
func (f *loaderFixture) placed(b *Buf) string {
	k := 0
	for _, e := range b.exts {
		blk := f.ix.Blocks[e.block]
		if !bytes.Equal(b.Data[e.at:e.at+e.n], blockBytes(f.files, blk)) {
			return fmt.Sprintf("block %d: bytes differ from the source", e.block)
		}
		src := f.files[blk.File]
		for i := src.RecordAt(blk.Offset); i < len(src.Starts) && src.Starts[i] < blk.Offset+blk.Len; i++ {
			if k >= len(b.Starts) || b.Starts[k] != e.at+src.Starts[i]-blk.Offset {
				return fmt.Sprintf("block %d: record %d does not start where the source's does", e.block, k)
			}
			k++
		}
	}
	if k != len(b.Starts) {
		return fmt.Sprintf("%d records, the blocks have %d", len(b.Starts), k)
	}
	return ""
}

func (f *loaderFixture) total() int64 {
	var n int64
	for _, b := range f.ix.Blocks {
		n += b.Len
	}
	return n
}

func TestDiskCacheServesALaterLoaderFromDiskWithoutReadingTheSource(t *testing.T) {
	f := newLoaderFixture(t)
	dir := filepath.Join(t.TempDir(), "dc")
	var log blocktest.LockedBuffer
	l, dc := diskLoader(t, f, dir, &log)
	f.loadAll(t, l, 0)
	n := int64(len(f.ix.Blocks))
	blocktest.Eventually(t, "every block is written", func() bool { return dc.Stats().Written == n })
	dc.Close()

	// A new loader and cache, as after a remount: nothing in memory.
	l2, dc2 := diskLoader(t, f, dir, &log)
	if got := dc2.Stats().Entries; got != int(n) {
		t.Fatalf("reopened cache holds %d entries, want %d", got, n)
	}
	f.loadAll(t, l2, 3)
	s := l2.Stats()
	if s.SourceRequests != 0 || s.BytesRead != 0 {
		t.Fatalf("the later loader read the source: %d requests, %d bytes", s.SourceRequests, s.BytesRead)
	}
	if e := s.Epochs[3]; e.DiskCacheBytes != f.total() || e.SourceBytes != 0 {
		t.Fatalf("epoch 3 counters %+v, want %d bytes from the disk cache and none from the source", e, f.total())
	}
	if s.Totals != s.Epochs[3] {
		t.Fatalf("totals %+v, want epoch 3's %+v (the only epoch)", s.Totals, s.Epochs[3])
	}
	if s.DiskCache == nil || s.DiskCache.Hits != n {
		t.Fatalf("disk cache stats %+v, want %d hits", s.DiskCache, n)
	}
}

func TestDiskCacheDropsADamagedEntryLogsItAndReadsTheSourceAgain(t *testing.T) {
	f := newLoaderFixture(t)
	dir := filepath.Join(t.TempDir(), "dc")
	var log blocktest.LockedBuffer
	l, dc := diskLoader(t, f, dir, &log)
	f.loadAll(t, l, 0)
	n := int64(len(f.ix.Blocks))
	blocktest.Eventually(t, "every block is written", func() bool { return dc.Stats().Written == n })
	dc.Close()
	names, _ := filepath.Glob(filepath.Join(dir, "b*"))
	slices.Sort(names)
	if len(names) < 3 {
		t.Fatalf("%d entries, want at least 3", len(names))
	}
	// A flipped data byte, a truncated entry, a flipped key byte.
	flip := func(name string, at func(size int) int) {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		b[at(len(b))] ^= 0x40
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	flip(names[0], func(n int) int { return n - 10 })
	if err := os.Truncate(names[1], 100); err != nil {
		t.Fatal(err)
	}
	flip(names[2], func(int) int { return 28 + 2 }) // past the 28-byte header: a byte of the key

	l2, dc2 := diskLoader(t, f, dir, &log)
	f.loadAll(t, l2, 1) // checks every byte
	s := l2.Stats()
	if s.SourceRequests != 3 {
		t.Fatalf("%d source requests, want 3 (the damaged entries' blocks)", s.SourceRequests)
	}
	if s.DiskCache.Damaged != 3 {
		t.Fatalf("%d entries found damaged, want 3", s.DiskCache.Damaged)
	}
	if got := strings.Count(log.String(), "disk cache entry damaged"); got != 3 {
		t.Fatalf("%d log lines about damaged entries, want 3:\n%s", got, log.String())
	}
	// Fetched again, they are cached again.
	blocktest.Eventually(t, "the refetched blocks are written", func() bool { return dc2.Stats().Written == 3 })
}

// cacheThenRewrite fills a disk cache in dir with every block of f, then
// rewrites f's first file with other records of the same lengths (so the
// same blocks), gives it mtime and indexes the root again: the fixture
// returned has the new bytes and their index, the cache the old entries.
func cacheThenRewrite(t *testing.T, f *loaderFixture, dir string, log *blocktest.LockedBuffer, mtime int64) *loaderFixture {
	t.Helper()
	l, dc := diskLoader(t, f, dir, log)
	f.loadAll(t, l, 0)
	blocktest.Eventually(t, "every block is written", func() bool { return dc.Stats().Written == int64(len(f.ix.Blocks)) })
	dc.Close()
	src := f.files[0]
	f2 := &loaderFixture{root: f.root, files: slices.Clone(f.files)}
	var other [][]byte
	for _, p := range src.Payloads {
		q := slices.Clone(p)
		for i := range q {
			q[i] ^= 0x5a
		}
		other = append(other, q)
	}
	f2.files[0] = blocktest.WriteRecords(t, f.root, src.Rel, other)
	blocktest.SetMtime(t, src.Path, mtime)
	f2.ix = build(t, f.root, index.Options{BlockSize: 16 << 10})
	return f2
}

func TestDiskCacheEntryOfAChangedFileIsNeverServed(t *testing.T) {
	f := newLoaderFixture(t)
	dir := filepath.Join(t.TempDir(), "dc")
	var log blocktest.LockedBuffer
	// The same file with other records of the same lengths, so the same
	// blocks, and a new mtime: the entries of its blocks are stale, valid
	// records that must not be served.
	f2 := cacheThenRewrite(t, f, dir, &log, 1_700_000_000_000_000_000)
	l2, _ := diskLoader(t, f2, dir, &log)
	f2.loadAll(t, l2, 1) // checks every byte against the new content
	if s := l2.Stats(); s.SourceRequests == 0 {
		t.Fatal("the changed file's blocks were all served from the disk cache")
	}
}

func TestDiskCacheEntryRemovedBehindItsBackIsAMissNotDamage(t *testing.T) {
	// As when another mount sharing the directory evicts it.
	f := newLoaderFixture(t)
	dir := filepath.Join(t.TempDir(), "dc")
	var log blocktest.LockedBuffer
	l, dc := diskLoader(t, f, dir, &log)
	f.loadAll(t, l, 0)
	blocktest.Eventually(t, "every block is written", func() bool { return dc.Stats().Written == int64(len(f.ix.Blocks)) })
	names, _ := filepath.Glob(filepath.Join(dir, "b*"))
	for _, n := range names {
		os.Remove(n)
	}
	l2 := NewLoader(f.ix, LoaderOptions{MaxMemory: 1 << 30, Buffered: true, DiskCache: dc})
	f.loadAll(t, l2, 1)
	if s := dc.Stats(); s.Damaged != 0 || s.Hits != 0 || strings.Contains(log.String(), "damaged") {
		t.Fatalf("entries removed by someone else: %+v\n%s", s, log.String())
	}
}

func TestDiskCacheUnderConcurrentLoadsAndEvictionsServesTheSourceBytes(t *testing.T) {
	f := newLoaderFixture(t)
	var log blocktest.LockedBuffer
	// Room for about a third of the blocks, and a few in memory: loads
	// repeat, entries are written, read and evicted all at once.
	dc, err := diskcache.Open(f.ix, diskcache.Options{Dir: filepath.Join(t.TempDir(), "dc"), MaxBytes: f.total() / 3,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: 4 * MinMemory(f.ix, LoaderOptions{Buffered: true}, false), Buffered: true, DiskCache: dc})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 60 {
				id := int32(r.IntN(len(f.ix.Blocks)))
				u := Unit{Blocks: []int32{id}, Epoch: i / 20}
				b, err := l.Get(t.Context(), u)
				if err != nil {
					t.Error(err)
					return
				}
				if why := f.placed(b); why != "" {
					t.Error(why)
				}
				l.Release(b)
			}
		})
	}
	wg.Wait()
	s := dc.Stats()
	if s.Damaged != 0 || s.PeakHeld > s.MaxBytes || s.Evictions == 0 && s.NotAdmitted == 0 {
		t.Fatalf("stats %+v: want no damage, a peak within the bound, and evictions\n%s", s, log.String())
	}
}

// TestEveryBlockOfAFullIndexOfEveryFormatHoldsTheCRC32COfItsBytes builds a
// full index of every format, stored and compressed every way, TFRecord
// included (whose records carry CRCs of their own, so that its index once
// kept none per block): every block's CRC must be the CRC32C of its stored
// bytes (decompressed), which the disk cache checks its entries against.
func TestEveryBlockOfAFullIndexOfEveryFormatHoldsTheCRC32COfItsBytes(t *testing.T) {
	plain := compressor{name: "stored", fn: func(_ testing.TB, b []byte) []byte { return b }}
	for _, c := range blocktest.FormatCases(t) {
		for _, z := range append([]compressor{plain}, compressors...) {
			t.Run(c.Format.Name()+"/"+z.name, func(t *testing.T) {
				root := t.TempDir()
				data := map[string][]byte{}
				for name, b := range c.Files {
					blocktest.WriteBytes(t, filepath.Join(root, name+z.ext), z.fn(t, b))
					data[name+z.ext] = b
				}
				o := index.Options{BlockSize: 150}
				if _, ok := c.Format.(formats.Fixed); ok {
					o.Format = c.Format
				}
				ix := build(t, root, o)
				if len(ix.Blocks) == 0 {
					t.Fatal("no blocks")
				}
				for id, b := range ix.Blocks {
					stored := data[ix.Files[b.File].Path][b.Offset : b.Offset+b.Len]
					if want := formats.UpdateChecksum(0, stored); b.CRC != want {
						t.Fatalf("block %d (%s at %d, %d bytes): CRC %08x, its bytes have %08x", id, ix.Files[b.File].Path, b.Offset, b.Len, b.CRC, want)
					}
				}
			})
		}
	}
}

// pinVersions gives the files of ix versions without a device, inode and
// change time, as a system without them lists them: the disk cache's keys
// then stay the same across a rewrite that puts sizes and mtimes back.
func pinVersions(ix *index.Index) {
	for i := range ix.Files {
		ix.Files[i].Version = local.Version(ix.Files[i].Size, ix.Files[i].Mtime)
	}
}

// TestDiskCacheEntryOfOtherBytesThanTheIndexsBlockIsAMissLoggedOnce fills
// a disk cache, then rewrites a file with other records of the same
// lengths and puts its mtime back, indexes again and keys the files so
// that the entries' keys do not change: every entry of that file is intact
// and holds valid TFRecord frames of the old data. Each must be a miss, read
// from the source, counted as mismatched (not damaged), logged once for
// all of them, and cached again with the new bytes.
func TestDiskCacheEntryOfOtherBytesThanTheIndexsBlockIsAMissLoggedOnce(t *testing.T) {
	f := newLoaderFixture(t)
	pinVersions(f.ix)
	dir := filepath.Join(t.TempDir(), "dc")
	var log blocktest.LockedBuffer
	f2 := cacheThenRewrite(t, f, dir, &log, f.ix.Files[0].Mtime)
	pinVersions(f2.ix)
	var changed int64
	for id, b := range f2.ix.Blocks {
		old := f.ix.Blocks[id]
		if b.File != old.File || b.Offset != old.Offset || b.Len != old.Len {
			t.Fatalf("block %d moved: the rewrite must keep every length", id)
		}
		if b.File == 0 {
			changed++
		}
	}
	if f2.ix.Files[0].Version != f.ix.Files[0].Version {
		t.Fatalf("version %q, was %q: the test needs the same keys", f2.ix.Files[0].Version, f.ix.Files[0].Version)
	}

	var log2 blocktest.LockedBuffer
	l2, dc2 := diskLoader(t, f2, dir, &log2)
	f2.loadAll(t, l2, 1) // checks every byte against the new content
	s := l2.Stats()
	if s.SourceRequests != changed || s.DiskCache.Mismatched != changed || s.DiskCache.Damaged != 0 {
		t.Fatalf("%d source requests, %d mismatched and %d damaged entries; want %d, %d and 0 (the rewritten file's blocks)",
			s.SourceRequests, s.DiskCache.Mismatched, s.DiskCache.Damaged, changed, changed)
	}
	if s.DiskCache.Hits != int64(len(f2.ix.Blocks))-changed {
		t.Fatalf("%d hits, want %d (the blocks of the files left alone)", s.DiskCache.Hits, int64(len(f2.ix.Blocks))-changed)
	}
	if n := strings.Count(log2.String(), "disk cache entry holds other bytes"); n != 1 {
		t.Fatalf("%d log lines about entries of other bytes, want 1:\n%s", n, log2.String())
	}
	if rel := f.files[0].Rel; !strings.Contains(log2.String(), rel) {
		t.Fatalf("the log line does not name the file %s:\n%s", rel, log2.String())
	}
	blocktest.Eventually(t, "the refetched blocks are written", func() bool { return dc2.Stats().Written == changed })
	dc2.Close()

	// The next loader is served every block from the cache, the new bytes.
	l3, _ := diskLoader(t, f2, dir, &log2)
	f2.loadAll(t, l3, 2)
	if s := l3.Stats(); s.SourceRequests != 0 || s.DiskCache.Mismatched != 0 {
		t.Fatalf("after the refetch: %d source requests and %d mismatched entries, want none", s.SourceRequests, s.DiskCache.Mismatched)
	}
}
