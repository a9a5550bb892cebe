package blockcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// loaderFixture is a dataset of three files indexed in 16 KiB blocks.
type loaderFixture struct {
	root  string
	files []*blocktest.SrcFile
	ix    *index.Index
}

func newLoaderFixture(t *testing.T) *loaderFixture {
	t.Helper()
	root, files := blocktest.Dataset(t, 21, 3, 150, 3000)
	return &loaderFixture{root, files, build(t, root, index.Options{BlockSize: 16 << 10})}
}

// want returns the bytes and record starts a Buf of u must hold, computed
// from the test's copy of the files.
func (f *loaderFixture) want(u Unit) ([]byte, []int64) {
	var data []byte
	var starts []int64
	for _, r := range u.Records {
		file, off, n := f.ix.Record(r)
		starts = append(starts, int64(len(data)))
		data = append(data, f.files[file].Data[off:off+n]...)
	}
	for _, id := range u.Blocks {
		b := f.ix.Blocks[id]
		src := f.files[b.File]
		for i := src.RecordAt(b.Offset); i < len(src.Starts) && src.Starts[i] < b.Offset+b.Len; i++ {
			starts = append(starts, int64(len(data))+src.Starts[i]-b.Offset)
		}
		data = append(data, blockBytes(f.files, b)...)
	}
	return data, starts
}

func (f *loaderFixture) size(blocks ...int32) int64 {
	var n int64
	for _, id := range blocks {
		n += f.ix.Blocks[id].Len
	}
	return n
}

// check fails the test unless b holds u as it is in the source.
func (f *loaderFixture) check(t testing.TB, b *Buf, u Unit) {
	t.Helper()
	data, starts := f.want(u)
	if !bytes.Equal(b.Data, data) {
		t.Fatalf("Buf of %+v: %d bytes differ from the %d source bytes", u, len(b.Data), len(data))
	}
	if !slices.Equal(b.Starts, starts) {
		t.Fatalf("Buf of %+v: Starts %v, want %v", u, b.Starts, starts)
	}
	for i := range b.Starts {
		if b.RecordLen(i) != int64(len(formats.Payload(b.Data[b.Starts[i]:])))+formats.FrameExtra {
			t.Fatalf("RecordLen(%d) = %d, frame says otherwise", i, b.RecordLen(i))
		}
	}
}

// getUnit is Get that checks the Buf.
func (f *loaderFixture) getUnit(t testing.TB, l *Loader, u Unit) *Buf {
	t.Helper()
	b, err := l.Get(t.Context(), u)
	if err != nil {
		t.Fatalf("Get(%+v): %v", u, err)
	}
	f.check(t, b, u)
	return b
}

// get is getUnit of blocks.
func (f *loaderFixture) get(t testing.TB, l *Loader, blocks ...int32) *Buf {
	t.Helper()
	return f.getUnit(t, l, Unit{Blocks: blocks})
}

func blockUnit(blocks ...int32) Unit { return Unit{Blocks: blocks} }

// bySize returns block ids ordered by length, shortest first.
func (f *loaderFixture) bySize() []int32 {
	ids := make([]int32, len(f.ix.Blocks))
	for i := range ids {
		ids[i] = int32(i)
	}
	slices.SortStableFunc(ids, func(a, b int32) int { return int(f.ix.Blocks[a].Len - f.ix.Blocks[b].Len) })
	return ids
}

func TestLoaderGetReturnsSourceBytesAndRecordStarts(t *testing.T) {
	f := newLoaderFixture(t)
	nb := int32(len(f.ix.Blocks))
	firstOf := func(file int32) int32 {
		return int32(slices.IndexFunc(f.ix.Blocks, func(b index.Block) bool { return b.File == file }))
	}
	all := make([]int32, nb)
	for i := range all {
		all[i] = int32(i)
	}
	nr := int32(f.ix.Records)
	lastOf := func(file int32) int32 { // last record of a file
		b := int32(slices.IndexFunc(f.ix.Blocks, func(b index.Block) bool { return b.File == file+1 })) - 1
		return int32(f.ix.BlockRecords(b)) + f.ix.Blocks[b].Records - 1
	}
	everyRecord := make([]int32, nr)
	for i := range everyRecord {
		everyRecord[i] = nr - 1 - int32(i)
	}
	for _, tc := range []struct {
		name string
		u    Unit
	}{
		{"first block", blockUnit(0)},
		{"last block", blockUnit(nb - 1)},
		{"consecutive blocks", blockUnit(3, 4, 5)},
		{"blocks of three files", blockUnit(firstOf(2), firstOf(0), firstOf(1))},
		{"last block of a file then the first of the next", blockUnit(firstOf(1)-1, firstOf(1))},
		{"reverse order", blockUnit(9, 7, 2, 1)},
		{"every block", blockUnit(all...)},
		{"one record", Unit{Records: []int32{17}}},
		{"records of three files", Unit{Records: []int32{nr - 1, 0, lastOf(0), lastOf(0) + 1, 200}}},
		{"every record backwards", Unit{Records: everyRecord}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLoader(f.ix, LoaderOptions{MaxMemory: f.ix.Bytes, InFlight: 3})
			b := f.getUnit(t, l, tc.u)
			records := len(tc.u.Records)
			var size int64
			for _, r := range tc.u.Records {
				_, _, n := f.ix.Record(r)
				size += n
			}
			for _, id := range tc.u.Blocks {
				records += int(f.ix.Blocks[id].Records)
				size += f.ix.Blocks[id].Len
			}
			if len(b.Starts) != records {
				t.Fatalf("%d record starts, the unit holds %d records", len(b.Starts), records)
			}
			// A second Get of the same unit shares the Buf without reading.
			b2 := f.getUnit(t, l, tc.u)
			if b2 != b {
				t.Fatal("second Get of the same unit returned another Buf")
			}
			s := l.Stats()
			if s.BlocksRead != int64(len(tc.u.Blocks)) || s.RecordsRead != int64(len(tc.u.Records)) || s.BytesRead != size || s.CacheHits != 1 || s.BuffersLoaded != 1 {
				t.Fatalf("stats %+v", s)
			}
			l.Release(b)
			l.Release(b2)
		})
	}
}

func TestLoaderTellsBlockAndRecordUnitsApart(t *testing.T) {
	// Block 0 and record 0 have the same id: they must not share a Buf.
	f := newLoaderFixture(t)
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: 1 << 20})
	a := f.getUnit(t, l, blockUnit(0))
	b := f.getUnit(t, l, Unit{Records: []int32{0}})
	if a == b || l.Stats().CacheHits != 0 {
		t.Fatalf("a record unit was served from a block unit's Buf: stats %+v", l.Stats())
	}
	l.Release(a)
	l.Release(b)
}

func TestLoaderMemoryNeverExceedsBudgetUnderConcurrentUse(t *testing.T) {
	f := newLoaderFixture(t)
	budget := 4 * 16 << 10 * 2 // room for two buffers of the largest size
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: int64(budget), InFlight: 2})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	stop := make(chan struct{})
	var over []Stats
	var overMu sync.Mutex
	wg.Go(func() { // samples the accounting while the readers run
		for {
			select {
			case <-stop:
				return
			default:
			}
			if s := l.Stats(); s.MemoryInUse > s.MemoryBudget || s.MemoryPeak > s.MemoryBudget {
				overMu.Lock()
				over = append(over, s)
				overMu.Unlock()
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	errs := make(chan error, 100)
	var readers sync.WaitGroup
	for g := range 12 {
		readers.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 99))
			pick := func() []int32 {
				blocks := make([]int32, 1+r.IntN(4))
				for i := range blocks {
					blocks[i] = int32(r.IntN(len(f.ix.Blocks)))
				}
				return blocks
			}
			for range 40 {
				blocks := pick()
				if r.IntN(3) == 0 {
					l.Prefetch(context.Background(), Unit{Blocks: pick()})
				}
				b, err := l.Get(ctx, Unit{Blocks: blocks})
				if err != nil {
					errs <- err
					return
				}
				data, starts := f.want(Unit{Blocks: blocks})
				if !bytes.Equal(b.Data, data) || !slices.Equal(b.Starts, starts) {
					errs <- fmt.Errorf("Buf of %v differs from the source", blocks)
				}
				if r.IntN(4) == 0 {
					time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
				}
				l.Release(b)
				if r.IntN(3) == 0 && l.Reacquire(b) {
					if !bytes.Equal(b.Data, data) {
						errs <- fmt.Errorf("reacquired Buf of %v differs from the source", blocks)
					}
					l.Release(b)
				}
			}
		})
	}
	readers.Wait()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(over) > 0 {
		t.Fatalf("memory over budget: %+v", over[0])
	}
	s := l.Stats()
	if s.MemoryPeak > s.MemoryBudget || s.MemoryInUse > s.MemoryBudget {
		t.Fatalf("peak %d, in use %d, budget %d", s.MemoryPeak, s.MemoryInUse, s.MemoryBudget)
	}
	if s.Evictions == 0 || s.MemoryWaits == 0 {
		t.Fatalf("the budget was never tight (evictions %d, memory waits %d): the test proves nothing", s.Evictions, s.MemoryWaits)
	}
	t.Logf("stats: %+v", s)
}

// holdTwo fills a budget of exactly two buffers, a (the largest block) and
// b, both held, and returns a third block c that fits once a is released.
func holdTwo(t *testing.T, f *loaderFixture) (l *Loader, a, b *Buf, c int32) {
	t.Helper()
	ids := f.bySize()
	ia, ib, ic := ids[len(ids)-1], ids[len(ids)-2], ids[len(ids)-3]
	l = NewLoader(f.ix, LoaderOptions{MaxMemory: f.size(ia, ib)})
	return l, f.get(t, l, ia), f.get(t, l, ib), ic
}

func TestLoaderGetWaitsForMemoryUntilARelease(t *testing.T) {
	f := newLoaderFixture(t)
	l, a, b, c := holdTwo(t, f)
	done := make(chan *Buf)
	go func() {
		buf, err := l.Get(context.Background(), blockUnit(c))
		if err != nil {
			t.Error(err)
		}
		done <- buf
	}()
	blocktest.Eventually(t, "Get waits for memory", func() bool { return l.Stats().MemoryWaits > 0 })
	// Nothing else can wake it: every load has finished.
	time.Sleep(20 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("Get returned while the budget was held")
	default:
	}
	l.Release(a)
	select {
	case buf := <-done:
		f.check(t, buf, blockUnit(c))
		l.Release(buf)
	case <-time.After(10 * time.Second):
		t.Fatal("Get still waits after a Release")
	}
	if s := l.Stats(); s.Evictions != 1 || s.MemoryPeak > s.MemoryBudget {
		t.Fatalf("stats %+v, want one eviction within budget", s)
	}
	if l.Reacquire(a) {
		t.Fatal("Reacquire of the evicted Buf succeeded")
	}
	l.Release(b)
}

func TestLoaderGetWaitingForMemoryStopsWithItsContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (ctx context.Context, cancel func(), stop func())
		want error
	}{
		{"cancelled", func() (context.Context, func(), func()) {
			ctx, cancel := context.WithCancel(context.Background())
			return ctx, cancel, cancel
		}, context.Canceled},
		{"deadline", func() (context.Context, func(), func()) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			return ctx, cancel, func() {}
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLoaderFixture(t)
			l, a, b, c := holdTwo(t, f)
			ctx, cancel, stop := tc.ctx()
			defer cancel()
			done := make(chan error)
			go func() {
				buf, err := l.Get(ctx, blockUnit(c))
				if buf != nil {
					t.Error("Get returned a Buf with its error")
				}
				done <- err
			}()
			blocktest.Eventually(t, "Get waits for memory", func() bool { return l.Stats().MemoryWaits > 0 })
			stop()
			select {
			case err := <-done:
				if !errors.Is(err, tc.want) {
					t.Fatalf("err %v, want %v", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Get did not stop with its context")
			}
			if s := l.Stats(); s.MemoryInUse != f.size(blocksOf(a, b)...) {
				t.Fatalf("memory in use %d after the cancelled Get, want %d", s.MemoryInUse, f.size(blocksOf(a, b)...))
			}
			// The loader still works.
			l.Release(a)
			l.Release(b)
			l.Release(f.get(t, l, c))
		})
	}
}

func blocksOf(bufs ...*Buf) []int32 {
	var ids []int32
	for _, b := range bufs {
		ids = append(ids, b.unit.Blocks...)
	}
	return ids
}

func TestLoaderBufferLargerThanBudgetFailsAtOnce(t *testing.T) {
	f := newLoaderFixture(t)
	for _, tc := range []struct {
		name   string
		budget int64
		blocks []int32
	}{
		{"one block over an empty budget", f.ix.Blocks[0].Len - 1, []int32{0}},
		{"two blocks one byte over", f.size(0, 1) - 1, []int32{0, 1}},
		{"zero budget", 0, []int32{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLoader(f.ix, LoaderOptions{MaxMemory: tc.budget})
			// Even with part of the budget held, the answer is immediate.
			if small := f.bySize()[0]; f.size(small) <= tc.budget {
				defer l.Release(f.get(t, l, small))
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err := l.Get(ctx, Unit{Blocks: tc.blocks})
			if err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err %v, want an immediate error", err)
			}
			for _, w := range []string{"does not fit", fmt.Sprint(f.size(tc.blocks...)), fmt.Sprint(tc.budget)} {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
			if s := l.Stats(); s.MemoryWaits != 0 || s.BlocksRead > 1 {
				t.Fatalf("stats %+v: the Get waited or read", s)
			}
		})
	}
}

func TestLoaderPrefetchThenGetCountsAHit(t *testing.T) {
	f := newLoaderFixture(t)
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: 1 << 20})
	blocks := []int32{4, 5, 6}
	l.Prefetch(context.Background(), blockUnit(blocks...))
	l.Prefetch(context.Background(), blockUnit(blocks...)) // already loading: nothing more
	b := f.get(t, l, blocks...)
	if s := l.Stats(); s.PrefetchIssued != 1 || s.PrefetchHits != 1 || s.CacheHits != 0 || s.BlocksRead != 3 || s.BuffersLoaded != 1 {
		t.Fatalf("stats %+v, want one prefetch issued and hit", s)
	}
	b2 := f.get(t, l, blocks...)
	if s := l.Stats(); s.PrefetchHits != 1 || s.CacheHits != 1 {
		t.Fatalf("stats %+v: a second Get is a cache hit, not a prefetch hit", s)
	}
	l.Release(b)
	l.Release(b2)
	l.Prefetch(context.Background(), blockUnit(blocks...)) // loaded and idle: nothing to do
	if s := l.Stats(); s.PrefetchIssued != 1 || s.PrefetchSkipped != 0 {
		t.Fatalf("stats %+v after prefetching a loaded buffer", s)
	}
}

func TestLoaderPrefetchLoadsUnitsInTurnUntilItsContextEnds(t *testing.T) {
	f := newLoaderFixture(t)
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: 1 << 20})
	l.Prefetch(t.Context(), blockUnit(1), blockUnit(2), blockUnit(3))
	blocktest.Eventually(t, "three prefetched buffers are loaded", func() bool { return l.Stats().BuffersLoaded == 3 })
	for _, id := range []int32{1, 2, 3} {
		l.Release(f.get(t, l, id))
	}
	if s := l.Stats(); s.PrefetchIssued != 3 || s.PrefetchHits != 3 || s.BuffersLoaded != 3 {
		t.Fatalf("stats %+v, want three prefetches issued and hit", s)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	l.Prefetch(ctx, blockUnit(4), blockUnit(5))
	blocktest.Eventually(t, "the first unit is loaded", func() bool { return l.Stats().BuffersLoaded == 4 })
	time.Sleep(20 * time.Millisecond)
	if s := l.Stats(); s.PrefetchIssued != 4 || s.BuffersLoaded != 4 {
		t.Fatalf("stats %+v: the unit after the first was prefetched although the context had ended", s)
	}
}

func TestLoaderForgottenPrefetchGivesWayToANewOne(t *testing.T) {
	f := newLoaderFixture(t)
	ids := f.bySize()
	a, b := ids[len(ids)-1], ids[len(ids)-2]
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: f.size(a)})
	l.Prefetch(t.Context(), blockUnit(a))
	blocktest.Eventually(t, "the prefetch is loaded", func() bool { return l.Stats().BuffersLoaded == 1 })
	l.Prefetch(t.Context(), blockUnit(b))
	if s := l.Stats(); s.PrefetchSkipped != 1 {
		t.Fatalf("stats %+v: a prefetch took the memory of another prefetch nobody has used yet", s)
	}
	l.Forget(blockUnit(a))
	l.Prefetch(t.Context(), blockUnit(b))
	blocktest.Eventually(t, "the new prefetch is loaded", func() bool { return l.Stats().BuffersLoaded == 2 })
	l.Release(f.get(t, l, b))
	if s := l.Stats(); s.PrefetchIssued != 2 || s.PrefetchHits != 1 || s.Evictions != 1 {
		t.Fatalf("stats %+v, want the forgotten prefetch evicted for the new one, which is hit", s)
	}
}

func TestLoaderPrefetchIsSkippedWhenMemoryIsShort(t *testing.T) {
	f := newLoaderFixture(t)
	ids := f.bySize()
	small, mid, large := ids[0], ids[len(ids)-2], ids[len(ids)-1]
	for _, tc := range []struct {
		name string
		run  func(t *testing.T) (l *Loader, keep []*Buf, keepIdle []*Buf)
	}{
		{"memory held by a reader", func(t *testing.T) (*Loader, []*Buf, []*Buf) {
			l := NewLoader(f.ix, LoaderOptions{MaxMemory: f.size(large)})
			a := f.get(t, l, large)
			l.Prefetch(context.Background(), blockUnit(mid))
			return l, []*Buf{a}, nil
		}},
		{"memory held by other prefetches", func(t *testing.T) (*Loader, []*Buf, []*Buf) {
			l := NewLoader(f.ix, LoaderOptions{MaxMemory: f.size(large, mid)})
			l.Prefetch(context.Background(), blockUnit(large))
			l.Prefetch(context.Background(), blockUnit(mid))
			blocktest.Eventually(t, "prefetches load", func() bool { return l.Stats().BuffersLoaded == 2 })
			l.Prefetch(context.Background(), blockUnit(small))
			a, b := f.get(t, l, large), f.get(t, l, mid)
			if s := l.Stats(); s.PrefetchHits != 2 {
				t.Fatalf("stats %+v: the first prefetches were evicted", s)
			}
			return l, []*Buf{a, b}, nil
		}},
		{"idle buffer in front of a prefetch", func(t *testing.T) (*Loader, []*Buf, []*Buf) {
			// The idle Buf alone is not enough room: evicting it would
			// free memory the prefetch cannot use, so it must stay.
			l := NewLoader(f.ix, LoaderOptions{MaxMemory: f.size(small, large)})
			a := f.get(t, l, small)
			l.Release(a)
			l.Prefetch(context.Background(), blockUnit(large))
			blocktest.Eventually(t, "prefetch loads", func() bool { return l.Stats().BuffersLoaded == 2 })
			l.Prefetch(context.Background(), blockUnit(mid))
			return l, nil, []*Buf{a}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, keep, keepIdle := tc.run(t)
			s := l.Stats()
			if s.PrefetchSkipped != 1 || s.Evictions != 0 || s.MemoryPeak > s.MemoryBudget {
				t.Fatalf("stats %+v, want one skipped prefetch and no eviction", s)
			}
			for _, b := range keep {
				f.check(t, b, b.unit)
				l.Release(b)
			}
			for _, b := range keepIdle {
				if !l.Reacquire(b) {
					t.Fatal("a skipped prefetch evicted an idle Buf")
				}
				f.check(t, b, b.unit)
				l.Release(b)
			}
		})
	}
}

func TestLoaderPrefetchReusesTheMemoryOfIdleBuffers(t *testing.T) {
	// Prefetch never waits and never evicts a Buf in use or another
	// prefetch, but recycles released Bufs, least recently used first:
	// otherwise a sequential reader's old buffers would fill the budget and
	// stop prefetch for good.
	f := newLoaderFixture(t)
	ids := f.bySize()
	large, mid := ids[len(ids)-1], ids[len(ids)-2]
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: f.size(large)})
	a := f.get(t, l, large)
	l.Release(a)
	l.Prefetch(context.Background(), blockUnit(mid))
	b := f.get(t, l, mid)
	defer l.Release(b)
	if s := l.Stats(); s.PrefetchIssued != 1 || s.PrefetchHits != 1 || s.Evictions != 1 || s.MemoryPeak > s.MemoryBudget {
		t.Fatalf("stats %+v", s)
	}
	if l.Reacquire(a) {
		t.Fatal("the recycled Buf can still be reacquired")
	}
}

func TestLoaderReacquireWorksUntilEviction(t *testing.T) {
	f := newLoaderFixture(t)
	ids := f.bySize()
	large, other := ids[len(ids)-1], ids[len(ids)-2]
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: f.size(large)})
	a := f.get(t, l, large)
	l.Release(a)
	for range 3 {
		if !l.Reacquire(a) {
			t.Fatal("Reacquire failed before any eviction")
		}
		f.check(t, a, blockUnit(large))
		l.Release(a)
	}
	if s := l.Stats(); s.BlocksRead != 1 {
		t.Fatalf("Reacquire read again: %+v", s)
	}
	b := f.get(t, l, other) // evicts a
	if l.Reacquire(a) {
		t.Fatal("Reacquire succeeded after eviction")
	}
	l.Release(b)
	if s := l.Stats(); s.Evictions != 1 {
		t.Fatalf("stats %+v, want one eviction", s)
	}
	// The blocks load again through Get.
	l.Release(f.get(t, l, large))
}

func TestLoaderDetectsSourceChangedAfterIndexing(t *testing.T) {
	type change struct {
		data      []byte // new file contents
		keepMtime bool
	}
	for _, tc := range []struct {
		name   string
		change func(f *blocktest.SrcFile, b index.Block) change
		offset func(f *blocktest.SrcFile, b index.Block) int64 // named in the error
		want   string
	}{
		{"data byte flipped, mtime kept", func(f *blocktest.SrcFile, b index.Block) change {
			d := slices.Clone(f.Data)
			d[f.Starts[f.RecordAt(b.Offset)+1]+formats.HeaderLen] ^= 1
			return change{d, true}
		}, func(f *blocktest.SrcFile, b index.Block) int64 { return f.Starts[f.RecordAt(b.Offset)+1] }, "data CRC mismatch"},
		{"length byte flipped, mtime kept", func(f *blocktest.SrcFile, b index.Block) change {
			d := slices.Clone(f.Data)
			d[b.Offset] ^= 1
			return change{d, true}
		}, func(f *blocktest.SrcFile, b index.Block) int64 { return b.Offset }, "length CRC mismatch"},
		{"data byte flipped, new mtime", func(f *blocktest.SrcFile, b index.Block) change {
			d := slices.Clone(f.Data)
			d[b.Offset+formats.HeaderLen] ^= 1
			return change{d, false}
		}, func(f *blocktest.SrcFile, b index.Block) int64 { return b.Offset }, "changed since indexing"},
		{"truncated", func(f *blocktest.SrcFile, b index.Block) change {
			return change{f.Data[:b.Offset+b.Len/2], false}
		}, func(f *blocktest.SrcFile, b index.Block) int64 { return b.Offset }, "changed since indexing"},
		{"truncated, mtime kept", func(f *blocktest.SrcFile, b index.Block) change {
			return change{f.Data[:b.Offset+b.Len/2], true}
		}, func(f *blocktest.SrcFile, b index.Block) int64 { return b.Offset }, "changed since indexing"},
		{"replaced by a larger file", func(f *blocktest.SrcFile, b index.Block) change {
			d, _ := blocktest.Frames(t, blocktest.RandomPayloads(rand.New(rand.NewPCG(5, 5)), 300, 3000))
			return change{d, false}
		}, func(f *blocktest.SrcFile, b index.Block) int64 { return b.Offset }, "changed since indexing"},
		{"replaced by a same-size file of other records", func(f *blocktest.SrcFile, b index.Block) change {
			// Same bytes shifted by one record: frames no longer where the
			// index says.
			k := f.Starts[1]
			return change{append(slices.Clone(f.Data[k:]), f.Data[:k]...), true}
		}, func(f *blocktest.SrcFile, b index.Block) int64 { return b.Offset }, "offset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLoaderFixture(t)
			// A block of the middle file, not its first, with 2+ records.
			id := int32(slices.IndexFunc(f.ix.Blocks, func(b index.Block) bool { return b.File == 1 && b.Offset > 0 && b.Records >= 2 }))
			blk := f.ix.Blocks[id]
			src := f.files[1]
			other := int32(0) // a healthy block in the same buffer
			blocks := []int32{other, id}
			l := NewLoader(f.ix, LoaderOptions{MaxMemory: 1 << 20})

			ch := tc.change(src, blk)
			blocktest.WriteBytes(t, src.Path, ch.data)
			if ch.keepMtime {
				blocktest.SetMtime(t, src.Path, f.ix.Files[1].Mtime)
			}
			for i := range 2 { // a failed load is not cached
				_, err := l.Get(t.Context(), blockUnit(blocks...))
				if err == nil {
					t.Fatal("Get succeeded on a changed file")
				}
				for _, w := range []string{src.Path, fmt.Sprintf("offset %d", tc.offset(src, blk)), tc.want, "reindex"} {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("error %q does not mention %q", err, w)
					}
				}
				if s := l.Stats(); s.LoadErrors != int64(i+1) {
					t.Fatalf("LoadErrors %d after %d failed Gets", s.LoadErrors, i+1)
				}
			}
			if s := l.Stats(); s.MemoryInUse > s.MemoryBudget {
				t.Fatalf("stats %+v", s)
			}
			// Restored (contents and mtime, as a backup tool would), the file
			// loads again.
			blocktest.WriteBytes(t, src.Path, src.Data)
			blocktest.SetMtime(t, src.Path, f.ix.Files[1].Mtime)
			l.Release(f.get(t, l, blocks...))
		})
	}
}

func TestLoaderFailedPrefetchDoesNotOutliveTheFix(t *testing.T) {
	f := newLoaderFixture(t)
	src := f.files[2]
	id := int32(slices.IndexFunc(f.ix.Blocks, func(b index.Block) bool { return b.File == 2 }))
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: 1 << 20})
	blocktest.WriteBytes(t, src.Path, src.Data[:len(src.Data)/2])
	l.Prefetch(context.Background(), blockUnit(id))
	blocktest.Eventually(t, "the prefetch fails", func() bool { return l.Stats().LoadErrors == 1 })
	blocktest.WriteBytes(t, src.Path, src.Data)
	blocktest.SetMtime(t, src.Path, f.ix.Files[2].Mtime)
	l.Release(f.get(t, l, id))
}

func TestLoaderReportsRemovedSourceFile(t *testing.T) {
	f := newLoaderFixture(t)
	src := f.files[0]
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: 1 << 20})
	if err := os.Remove(src.Path); err != nil {
		t.Fatal(err)
	}
	_, err := l.Get(t.Context(), blockUnit(0))
	if err == nil || !strings.Contains(err.Error(), src.Path) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err %v, want one naming %s and wrapping ErrNotExist", err, src.Path)
	}
	if l.Stats().LoadErrors != 1 {
		t.Fatalf("stats %+v", l.Stats())
	}
}

func TestLoaderGrowsARecycledSlabRatherThanMappingANewOne(t *testing.T) {
	// A buffer a little larger than the one before is the common case;
	// mapping a whole new slab for it would make the system zero all of
	// it again. With budget to spare (the too-small slab is retired) and
	// without (it is evicted), all the memory ever mapped is still in use:
	// none was given back to be mapped again. The most recently released
	// buffer is kept either way.
	f := newLoaderFixture(t)
	ids := f.bySize()
	old, recent, large := ids[len(ids)/2], ids[len(ids)/2-1], ids[len(ids)-1]
	if f.size(old) >= f.size(large) {
		t.Fatalf("blocks %d and %d have the same size", old, large)
	}
	for _, budget := range []int64{f.size(recent) + f.size(large), 10 * f.size(large)} {
		l := NewLoader(f.ix, LoaderOptions{MaxMemory: budget})
		l.Release(f.get(t, l, old))
		l.Release(f.get(t, l, recent))
		l.Release(f.get(t, l, large))
		s := l.Stats()
		if s.MemoryMapped != s.MemoryInUse || s.MemoryInUse > budget {
			t.Errorf("budget %d: buffers of %d, %d then %d bytes mapped %d bytes in all and hold %d, want all still held",
				budget, f.size(old), f.size(recent), f.size(large), s.MemoryMapped, s.MemoryInUse)
		}
		l.Release(f.get(t, l, recent))
		if hits := l.Stats().CacheHits; hits != s.CacheHits+1 {
			t.Errorf("budget %d: the most recently released buffer was recycled", budget)
		}
	}
}

func TestLoaderRecyclingWithBudgetToSpareSparesWhatReadersNeedNext(t *testing.T) {
	// With budget to spare a new buffer takes the slab of an old idle one
	// rather than fresh memory, but never that of a prefetched buffer (its
	// reader is about to come) nor of the two buffers released last (a
	// reader's current buffer, idle between its reads, and the one before,
	// which the kernel's readahead asks for again after the next one).
	f := newLoaderFixture(t)
	ids := f.bySize()
	large := ids[len(ids)-1]
	a, b, c, d := ids[0], ids[1], ids[2], ids[3]
	for _, tc := range []struct {
		name     string
		prefetch bool // the new buffer is a prefetch; else a Get
	}{{"prefetch", true}, {"get", false}} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLoader(f.ix, LoaderOptions{MaxMemory: 20 * f.size(large)})
			// The oldest idle buffer has the largest slab: the one to recycle.
			l.Release(f.get(t, l, large))
			l.Prefetch(context.Background(), blockUnit(a))
			blocktest.Eventually(t, "the prefetch is loaded", func() bool { return l.Stats().BuffersLoaded == 2 })
			l.Release(f.get(t, l, b))
			l.Release(f.get(t, l, c))
			if tc.prefetch {
				l.Prefetch(context.Background(), blockUnit(d))
				blocktest.Eventually(t, "the prefetch is loaded", func() bool { return l.Stats().BuffersLoaded == 5 })
			} else {
				l.Release(f.get(t, l, d))
			}
			before := l.Stats()
			for _, id := range []int32{a, b, c} {
				l.Release(f.get(t, l, id))
			}
			s := l.Stats()
			if s.BuffersLoaded != before.BuffersLoaded || s.Evictions != 1 {
				t.Errorf("the prefetched buffer and the two released last were loaded again (%d loads) or more than the oldest buffer was recycled (%d evictions)",
					s.BuffersLoaded-before.BuffersLoaded, s.Evictions)
			}
		})
	}
}
