package blockcache

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/diskcache"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
	"github.com/corgifs/corgifs/source"
)

// storeSource is a source.Source of files in memory read as an object
// store is: every read a request, counted, adjacent ranges with one
// (source.RunRequester). It logs the range of every request.
type storeSource struct {
	files map[string][]byte
	// flip, if set, is a byte offset of file "f1.tfrecord" served with
	// its bits flipped (a store that rots).
	flip int64
	// hold, if set, is received from before a run's second range is
	// copied: the test sees what arrived with the first alone.
	hold chan struct{}
	// lose, if set, is a source that fills the ranges of a run but hands
	// on none of them and says it succeeded.
	lose bool

	mu     sync.Mutex
	ranges map[string][][2]int64 // name: off, len; one a request
}

func (s *storeSource) String() string { return "store://test" }
func (s *storeSource) ID() string     { return "store://test" }
func (s *storeSource) List(_ context.Context, match func(string) bool) ([]source.Object, error) {
	var objs []source.Object
	for name, b := range s.files {
		if match(path.Base(name)) {
			objs = append(objs, source.Object{Path: name, Size: int64(len(b)), Version: "1"})
		}
	}
	slices.SortFunc(objs, func(a, b source.Object) int { return strings.Compare(a.Path, b.Path) })
	return objs, nil
}
func (s *storeSource) Open(p, _ string) (source.File, error) {
	return &storeFile{s: s, name: p}, nil
}

// take returns the requests so far, each file's sorted, and starts again.
func (s *storeSource) take() map[string][][2]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.ranges
	s.ranges = nil
	for _, r := range got {
		slices.SortFunc(r, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	}
	return got
}

type storeFile struct {
	s    *storeSource
	name string
}

func (f *storeFile) Close() error { return nil }
func (f *storeFile) Name() string { return f.name }

// copyAt copies the file's bytes at off into p, as the store serves them.
func (f *storeFile) copyAt(p []byte, off int64) {
	copy(p, f.s.files[f.name][off:])
	if f.s.flip > 0 && f.name == "f1.tfrecord" && f.s.flip >= off && f.s.flip < off+int64(len(p)) {
		p[f.s.flip-off] ^= 0xff
	}
}

func (f *storeFile) request(off, n int64) error {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	if f.s.ranges == nil {
		f.s.ranges = map[string][][2]int64{}
	}
	f.s.ranges[f.name] = append(f.s.ranges[f.name], [2]int64{off, n})
	if off < 0 || off+n > int64(len(f.s.files[f.name])) {
		return errors.New("range past the end")
	}
	return nil
}

func (f *storeFile) ReadAt(p []byte, off int64) (int, error) {
	n, _, err := f.ReadAtCounted(p, off)
	return n, err
}

func (f *storeFile) ReadAtCounted(p []byte, off int64) (int, int64, error) {
	if err := f.request(off, int64(len(p))); err != nil {
		return 0, 1, err
	}
	f.copyAt(p, off)
	return len(p), 1, nil
}

func (f *storeFile) ReadRunCounted(ps [][]byte, off int64, arrived func(int) error) (int64, error) {
	var n int64
	for _, p := range ps {
		n += int64(len(p))
	}
	if err := f.request(off, n); err != nil {
		return 1, err
	}
	for i, p := range ps {
		if i == 1 && f.s.hold != nil {
			<-f.s.hold
		}
		f.copyAt(p, off)
		off += int64(len(p))
		if f.s.lose {
			continue
		}
		if err := arrived(i); err != nil {
			return 1, err
		}
	}
	return 1, nil
}

// storeFixture is a dataset of three files of about 600 KB in an
// in-memory store, indexed in 16 KiB blocks.
func storeFixture(t *testing.T) (*storeSource, []*blocktest.SrcFile, *index.Index) {
	t.Helper()
	_, files := blocktest.Dataset(t, 25, 3, 400, 3000)
	src := &storeSource{files: map[string][]byte{}}
	for _, f := range files {
		src.files[f.Rel] = f.Data
	}
	ix, err := index.Build(t.Context(), src, index.Options{BlockSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	src.take()
	return src, files, ix
}

// shuffledBlocks returns the ids of ix's blocks for which keep is true, in
// a random order.
func shuffledBlocks(ix *index.Index, seed uint64, keep func(id int) bool) []int32 {
	var ids []int32
	for id := range ix.Blocks {
		if keep(id) {
			ids = append(ids, int32(id))
		}
	}
	r := rand.New(rand.NewPCG(seed, 2))
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids
}

// A buffer of every block of a store's files, in a shuffled order, is read
// with ceil(bytes/RunBytes) requests a file, whose ranges tile each file
// once, instead of one a block; it holds the same bytes and record starts
// as a buffer read a block a request (RunBytes -1), and the epoch's
// counters count the requests the store saw and the bytes.
func TestAdjacentBlocksOfAStoreAreReadWithOneRequestPerRun(t *testing.T) {
	src, files, ix := storeFixture(t)
	const run = 64 << 10
	u := Unit{Blocks: shuffledBlocks(ix, 1, func(int) bool { return true }), Epoch: 3}
	read := func(runBytes int64) ([]byte, []int64, map[string][][2]int64, EpochStats) {
		ld := NewLoader(ix, LoaderOptions{MaxMemory: 8 << 20, RunBytes: runBytes})
		b, err := ld.Get(t.Context(), u)
		if err != nil {
			t.Fatal(err)
		}
		defer ld.Release(b)
		return bytes.Clone(b.Data), slices.Clone(b.Starts), src.take(), ld.Stats().Epochs[3]
	}
	oldData, oldStarts, perBlock, _ := read(-1)
	data, starts, got, ep := read(run)
	if !bytes.Equal(data, oldData) || !slices.Equal(starts, oldStarts) {
		t.Fatalf("the buffer read in runs differs from the one read a block a request")
	}
	var want, gets, n int64
	for _, f := range files {
		size := int64(len(f.Data))
		want += (size + run - 1) / run
		var at int64
		for i, r := range got[f.Rel] {
			if r[0] != at {
				t.Fatalf("%s: request %d reads %d bytes at %d, want it at %d: the requests %v do not tile the file", f.Rel, i, r[1], r[0], at, got[f.Rel])
			}
			// A run ends at the block boundary nearest its share.
			if r[1] > run+ix.BlockSize {
				t.Fatalf("%s: a request of %d bytes, more than a block past %d", f.Rel, r[1], run)
			}
			at += r[1]
		}
		if at != size {
			t.Fatalf("%s: the requests end at %d of %d bytes", f.Rel, at, size)
		}
		gets += int64(len(got[f.Rel]))
		n += size
	}
	blocks := 0
	for _, r := range perBlock {
		blocks += len(r)
	}
	t.Logf("%d blocks of %d bytes in 3 files: %d requests a block each, %d in runs of %d", len(ix.Blocks), n, blocks, gets, run)
	if gets != want || blocks != len(ix.Blocks) {
		t.Fatalf("%d requests in runs (want %d, ceil(size/%d) a file), %d a block each (want %d)", gets, want, run, blocks, len(ix.Blocks))
	}
	if ep.SourceGETs != gets || ep.SourceBytes != n {
		t.Fatalf("epoch counters %+v, want %d GETs and %d bytes", ep, gets, n)
	}
}

// Blocks of a buffer that are not next to each other in their file (every
// other block) are read with a request each, as before.
func TestBlocksApartAreReadWithARequestEach(t *testing.T) {
	src, files, ix := storeFixture(t)
	u := Unit{Blocks: shuffledBlocks(ix, 2, func(id int) bool { return id%2 == 0 })}
	ld := NewLoader(ix, LoaderOptions{MaxMemory: 8 << 20})
	b, err := ld.Get(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Release(b)
	for k, id := range u.Blocks {
		blk := ix.Blocks[id]
		if !bytes.Equal(b.Data[b.exts[k].at:b.exts[k].at+blk.Len], blockBytes(files, blk)) {
			t.Fatalf("block %d differs from its file's bytes", id)
		}
	}
	gets := 0
	for _, r := range src.take() {
		gets += len(r)
	}
	if gets != len(u.Blocks) {
		t.Fatalf("%d blocks apart read with %d requests, want one each", len(u.Blocks), gets)
	}
}

// A run is checked block by block: a byte the store serves wrong in one
// block of a run fails the load with EIO naming the file and the block's
// offset (its record CRC), and nothing of the buffer is served.
func TestAByteWrongInARunFailsTheLoadNamingItsBlock(t *testing.T) {
	src, _, ix := storeFixture(t)
	var blk index.Block
	for _, b := range ix.Blocks {
		if ix.Files[b.File].Path == "f1.tfrecord" && b.Offset > 0 {
			blk = b
			break
		}
	}
	src.flip = blk.Offset + blk.Len/2
	ld := NewLoader(ix, LoaderOptions{MaxMemory: 8 << 20})
	_, err := ld.Get(t.Context(), Unit{Blocks: shuffledBlocks(ix, 3, func(int) bool { return true })})
	if err == nil || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "f1.tfrecord") {
		t.Fatalf("a run with a byte flipped at %d of f1.tfrecord: err %v, want EIO naming the file", src.flip, err)
	}
	t.Logf("the load failed: %v", err)
}

// A reader of a buffer served while it loads is given each block of a run
// as soon as that block's bytes are in, not once the run is: with the run
// stopped after its first block, that block's records have arrived and
// the next block's have not.
func TestARunWakesTheReaderAsEachBlockArrives(t *testing.T) {
	src, _, ix := storeFixture(t)
	src.hold = make(chan struct{})
	// The first four blocks of the first file: one run.
	var ids []int32
	for id, b := range ix.Blocks {
		if b.File == 0 && len(ids) < 4 {
			ids = append(ids, int32(id))
		}
	}
	ld := NewLoader(ix, LoaderOptions{MaxMemory: 8 << 20})
	b, err := ld.Begin(t.Context(), Unit{Blocks: ids})
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Release(b)
	if !b.partial {
		t.Fatal("the buffer is not served while it loads")
	}
	first, second := 0, int(ix.Blocks[ids[0]].Records)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := ld.Await(ctx, b, first); err != nil {
		t.Fatalf("the first block's first record: %v", err)
	}
	if b.Arrived(second) {
		t.Fatal("the second block's records arrived while the run was held after the first")
	}
	close(src.hold)
	if err := ld.Await(ctx, b, int(ix.Blocks[ids[0]].Records+ix.Blocks[ids[1]].Records+ix.Blocks[ids[2]].Records)); err != nil {
		t.Fatal(err)
	}
	if gets := len(src.take()["f0.tfrecord"]); gets != 1 {
		t.Fatalf("4 adjacent blocks read with %d requests, want 1", gets)
	}
}

// A chain of adjacent blocks is cut into ceil(bytes/limit) runs, in file
// order, each ending at the block boundary nearest its share: none is
// empty, none passes the limit by a block or more, together they are the
// chain.
func TestCutChainMakesCeilBytesOverLimitRunsOfAboutEqualSize(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for range 200 {
		m := 1 + r.IntN(40)
		exts := make([]extent, m)
		chain := make([]int, m)
		var n, most int64
		for i := range exts {
			exts[i] = extent{n: 1 + r.Int64N(1000)}
			chain[i] = i
			n += exts[i].n
			most = max(most, exts[i].n)
		}
		limit := 1 + r.Int64N(5000)
		out := cutChain(nil, exts, chain, limit)
		want := min(int64(m), (n+limit-1)/limit)
		if int64(len(out)) != want {
			t.Fatalf("%d extents of %d bytes, limit %d: %d runs, want %d", m, n, limit, len(out), want)
		}
		var flat []int
		for _, run := range out {
			var b int64
			for _, i := range run {
				b += exts[i].n
			}
			if len(run) == 0 || (len(run) > 1 && b >= limit+most) {
				t.Fatalf("a run of %d extents, %d bytes, limit %d", len(run), b, limit)
			}
			flat = append(flat, run...)
		}
		if !slices.Equal(flat, chain) {
			t.Fatalf("runs %v are not the chain in order", out)
		}
	}
}

// A block of a run that the disk cache holds is served from it, and the
// blocks either side of it, no longer adjacent in what is fetched, are
// read with a GET each: a whole file of blocks, its fourth cached, is
// two requests, of the bytes before that block and of those after.
func TestABlockOfARunInTheDiskCacheSplitsTheRunAroundIt(t *testing.T) {
	src, files, ix := storeFixture(t)
	dc, err := diskcache.Open(ix, diskcache.Options{Dir: filepath.Join(t.TempDir(), "dc"), MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	ld := NewLoader(ix, LoaderOptions{MaxMemory: 8 << 20, DiskCache: dc})
	var ids []int32
	for id, b := range ix.Blocks {
		if b.File == 0 {
			ids = append(ids, int32(id))
		}
	}
	cached := ix.Blocks[ids[3]]
	b, err := ld.Get(t.Context(), Unit{Blocks: ids[3:4]})
	if err != nil {
		t.Fatal(err)
	}
	ld.Release(b)
	blocktest.Eventually(t, "the block is in the disk cache", func() bool { return dc.Stats().Written == 1 })
	src.take()
	b, err = ld.Get(t.Context(), Unit{Blocks: ids, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Release(b)
	size := int64(len(files[0].Data))
	want := [][2]int64{{0, cached.Offset}, {cached.Offset + cached.Len, size - cached.Offset - cached.Len}}
	if got := src.take()["f0.tfrecord"]; !slices.Equal(got, want) {
		t.Fatalf("the file's %d blocks, block 3 (bytes %d-%d) in the disk cache, were read with the requests (offset, length) %v; want %v",
			len(ids), cached.Offset, cached.Offset+cached.Len-1, got, want)
	}
	if !bytes.Equal(b.Data[:size], files[0].Data) {
		t.Fatal("the buffer differs from the file")
	}
	if ep := ld.Stats().Epochs[1]; ep.DiskCacheBytes != cached.Len || ep.SourceBytes != size-cached.Len || ep.SourceGETs != 2 {
		t.Fatalf("epoch counters %+v, want %d bytes from the disk cache, %d from the store in 2 GETs", ep, cached.Len, size-cached.Len)
	}
}

// A source that says it read a run but handed on none of its blocks fails
// the load with EIO: a block is never served without its checks.
func TestARunWhoseBlocksTheSourceDidNotHandOnFailsTheLoad(t *testing.T) {
	src, _, ix := storeFixture(t)
	src.lose = true
	ld := NewLoader(ix, LoaderOptions{MaxMemory: 8 << 20})
	_, err := ld.Get(t.Context(), Unit{Blocks: shuffledBlocks(ix, 5, func(int) bool { return true })})
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "handed on 0 of the") {
		t.Fatalf("err %v, want EIO saying the source handed on none of the blocks", err)
	}
}
