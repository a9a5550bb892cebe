package blockcache

import (
	"bytes"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// lockedBuffer is a log sink safe for the cache's writer goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// diskLoader returns a loader of f's index over a disk cache in dir,
// which the test closes at its end.
func diskLoader(t *testing.T, f *loaderFixture, dir string, log *lockedBuffer) (*Loader, *DiskCache) {
	t.Helper()
	lg := slog.New(slog.NewTextHandler(log, nil))
	dc, err := OpenDiskCache(f.ix, DiskCacheOptions{Dir: dir, MaxBytes: 1 << 30, Logger: lg})
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
		l.Release(f.getUnit(t, l, u))
	}
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
	var log lockedBuffer
	l, dc := diskLoader(t, f, dir, &log)
	f.loadAll(t, l, 0)
	n := int64(len(f.ix.Blocks))
	eventually(t, "every block is written", func() bool { return dc.Stats().Written == n })
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
	var log lockedBuffer
	l, dc := diskLoader(t, f, dir, &log)
	f.loadAll(t, l, 0)
	n := int64(len(f.ix.Blocks))
	eventually(t, "every block is written", func() bool { return dc.Stats().Written == n })
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
	flip(names[2], func(int) int { return diskHeader + 2 })

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
	eventually(t, "the refetched blocks are written", func() bool { return dc2.Stats().Written == 3 })
}

// cacheThenRewrite fills a disk cache in dir with every block of f, then
// rewrites f's first file with other records of the same lengths (so the
// same blocks), gives it mtime and indexes the root again: the fixture
// returned has the new bytes and their index, the cache the old entries.
func cacheThenRewrite(t *testing.T, f *loaderFixture, dir string, log *lockedBuffer, mtime int64) *loaderFixture {
	t.Helper()
	l, dc := diskLoader(t, f, dir, log)
	f.loadAll(t, l, 0)
	eventually(t, "every block is written", func() bool { return dc.Stats().Written == int64(len(f.ix.Blocks)) })
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
	var log lockedBuffer
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

// planUses is a NextUse from a plan written out by hand: epoch e reads
// the blocks of plan[e] in order.
type planUses [][]int32

func (p planUses) Next(block int32, after int64) int64 {
	for e, blocks := range p {
		for pos, b := range blocks {
			if t := UseTime(e, uint32(pos)); b == block && t > after {
				return t
			}
		}
	}
	return Never
}

// simulate reads plan through a disk cache that holds capacity blocks of
// the same size and returns the hits and the blocks held at the end.
func simulate(t *testing.T, plan [][]int32, nu NextUse, capacity int) (hits int, held []int32) {
	t.Helper()
	root := t.TempDir()
	ix := &index.Index{Root: root, Files: []index.File{{Path: "f", Size: 100_000, Mtime: 1}}}
	data := bytes.Repeat([]byte{7}, 100)
	for i := range 10 {
		// Every block holds data, as its CRC says.
		ix.Blocks = append(ix.Blocks, index.Block{File: 0, Offset: int64(10_000 + 1000*i), Len: 100, CRC: formats.UpdateChecksum(0, data)})
	}
	c, err := OpenDiskCache(ix, DiskCacheOptions{Dir: filepath.Join(t.TempDir(), "dc"), MaxBytes: 1 << 30, NextUse: nu})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ext := func(id int32) Extent {
		b := ix.Blocks[id]
		return Extent{File: 0, Block: id, Off: b.Offset, Len: b.Len}
	}
	c.max = int64(capacity) * int64(diskHeader+len(c.key(ext(0)))+100)
	dst := make([]byte, 100)
	for e, blocks := range plan {
		for _, id := range blocks {
			if c.read(ext(id), dst) {
				hits++
				continue
			}
			key := c.key(ext(id))
			c.store(diskJob{name: nameOf(key), key: key, block: id, epoch: e, data: data})
		}
	}
	for _, ent := range c.entries {
		held = append(held, ent.block)
	}
	slices.Sort(held)
	return hits, held
}

func TestDiskCacheEvictsTheBlockReadFarthestInTheFutureWhereLRUWouldMissEveryTime(t *testing.T) {
	// Block 4 is read once, first; then every epoch reads 0 1 2 3 in
	// order, through a cache of 3 blocks. LRU always evicts the block
	// about to be read: after epoch 0 it never hits. Belady's rule
	// evicts 4 first (never read again), then keeps 0 1 2 and leaves 3
	// out, read later than all of them: 3 hits an epoch.
	const A, B, C, D, E = 0, 1, 2, 3, 4
	plan := [][]int32{{E, A, B, C, D}, {A, B, C, D}, {A, B, C, D}}
	hits, held := simulate(t, plan[:2], planUses(plan), 3)
	if hits != 3 || !slices.Equal(held, []int32{A, B, C}) {
		t.Fatalf("next-use eviction, epochs 0 and 1: %d hits holding %v, want 3 hits holding [0 1 2]", hits, held)
	}
	if hits, _ = simulate(t, plan, planUses(plan), 3); hits != 6 {
		t.Fatalf("next-use eviction, epochs 0 to 2: %d hits, want 6", hits)
	}
	hits, held = simulate(t, plan, nil, 3)
	if hits != 0 || !slices.Equal(held, []int32{B, C, D}) {
		t.Fatalf("LRU eviction (no NextUse): %d hits holding %v, want 0 hits holding [1 2 3]", hits, held)
	}
}

func TestDiskCacheEvictsBlocksNoPlanReadsAgainBeforeAnyOther(t *testing.T) {
	// Epoch 0 reads 0..4 through a cache of 3; epoch 1 reads only 3 and
	// 4, and then 0. After epoch 0 the cache holds what is read soonest.
	plan := [][]int32{{0, 1, 2, 3, 4}, {3, 4, 0}}
	_, held := simulate(t, plan[:1], planUses(plan), 3)
	if !slices.Equal(held, []int32{0, 3, 4}) {
		t.Fatalf("after epoch 0 the cache holds %v, want [0 3 4] (1 and 2 are never read again)", held)
	}
}

func TestDiskCacheEntryRemovedBehindItsBackIsAMissNotDamage(t *testing.T) {
	// As when another mount sharing the directory evicts it.
	f := newLoaderFixture(t)
	dir := filepath.Join(t.TempDir(), "dc")
	var log lockedBuffer
	l, dc := diskLoader(t, f, dir, &log)
	f.loadAll(t, l, 0)
	eventually(t, "every block is written", func() bool { return dc.Stats().Written == int64(len(f.ix.Blocks)) })
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
	var log lockedBuffer
	// Room for about a third of the blocks, and a few in memory: loads
	// repeat, entries are written, read and evicted all at once.
	dc, err := OpenDiskCache(f.ix, DiskCacheOptions{Dir: filepath.Join(t.TempDir(), "dc"), MaxBytes: f.total() / 3,
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
				want, _ := f.want(u)
				if !bytes.Equal(b.Data[:len(want)], want) {
					t.Errorf("block %d: bytes differ from the source", id)
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
