package shuffler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

const (
	streamBlockSize = 16 << 10
	streamBuffer    = 64 << 10
	streamMemory    = 1 << 20
)

// srcRecord is one record of the test dataset as the test wrote it.
type srcRecord struct {
	file     int32
	off, len int64
}

// streamFixture is a real dataset on disk: three TFRecord files of records
// of random lengths 0..3000 bytes, indexed in 16 KiB blocks.
type streamFixture struct {
	paths   []string
	files   [][]byte
	records []srcRecord // in file order, which is the index's record order
	ix      *index.Index
}

func newStreamFixture(t testing.TB) *streamFixture {
	t.Helper()
	root := t.TempDir()
	r := rand.New(rand.NewPCG(2024, 7))
	fill := rand.NewChaCha8([32]byte{1})
	f := &streamFixture{}
	id := 0
	for i, n := range []int{700, 900, 800} {
		var buf bytes.Buffer
		w := formats.NewWriter(&buf)
		for range n {
			p := make([]byte, r.IntN(3001))
			fill.Read(p)
			for j := 0; j < 4 && j < len(p); j++ { // records of 4+ bytes are unique
				p[j] = byte(id >> (8 * j))
			}
			id++
			off := w.Written()
			if err := w.Write(p); err != nil {
				t.Fatal(err)
			}
			f.records = append(f.records, srcRecord{int32(i), off, w.Written() - off})
		}
		path := filepath.Join(root, fmt.Sprintf("part-%d.tfrecord", i))
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		f.paths = append(f.paths, path)
		f.files = append(f.files, buf.Bytes())
	}
	ix, err := index.Build(t.Context(), blocktest.Dir(t, root, false), index.Options{BlockSize: streamBlockSize})
	if err != nil {
		t.Fatal(err)
	}
	if ix.Records != int64(len(f.records)) {
		t.Fatalf("index has %d records, wrote %d", ix.Records, len(f.records))
	}
	f.ix = ix
	return f
}

func (f *streamFixture) planner(t testing.TB, strategy string, buffer int64) *Planner {
	t.Helper()
	pl, err := NewPlanner(f.ix, Params{Strategy: strategy, Seed: 42, Buffer: BufferSize{Bytes: buffer}, MaxMemory: streamMemory})
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func (f *streamFixture) loader() *blockcache.Loader {
	return blockcache.NewLoader(f.ix, blockcache.LoaderOptions{MaxMemory: streamMemory})
}

func (f *streamFixture) frame(r srcRecord) []byte { return f.files[r.file][r.off : r.off+r.len] }

// expected computes what a stream of plan must serve, from the plan and the
// test's own copy of the files: the bytes, and where each record comes from.
func (f *streamFixture) expected(t testing.TB, plan *Plan) ([]byte, []RecordRef) {
	t.Helper()
	var out []byte
	var refs []RecordRef
	for g, b := range plan.Buffers {
		if int64(len(out)) != b.Start {
			t.Fatalf("buffer %d starts at %d, the buffers before it hold %d bytes", g, b.Start, len(out))
		}
		var recs []srcRecord
		var ids []int32 // the index's record order is f.records's
		for _, id := range b.Records {
			recs, ids = append(recs, f.records[id]), append(ids, id)
		}
		for _, id := range b.Blocks {
			blk := f.ix.Blocks[id]
			i := slices.IndexFunc(f.records, func(r srcRecord) bool { return r.file == blk.File && r.off == blk.Offset })
			if i < 0 {
				t.Fatalf("block %d does not start at a record", id)
			}
			recs = append(recs, f.records[i:i+int(blk.Records)]...)
			for k := range int(blk.Records) {
				ids = append(ids, int32(i+k))
			}
		}
		perm := make([]uint32, len(recs))
		for i := range perm {
			perm[i] = uint32(i)
		}
		if b.Shuffle {
			permute(perm, b.Seed)
		}
		for i, k := range b.Perm {
			perm[i] = uint32(k)
		}
		for _, k := range perm {
			r := recs[k]
			out = append(out, f.frame(r)...)
			refs = append(refs, RecordRef{ids[k], r.file, r.off, r.len, r.len})
		}
	}
	if int64(len(out)) != plan.Size {
		t.Fatalf("buffers hold %d bytes, plan says %d", len(out), plan.Size)
	}
	return out, refs
}

// readAll reads [from, to) of s sequentially, chunk bytes at a time,
// checking that every read is full until the end of the stream.
func readAll(t testing.TB, s *Stream, chunk int, from, to int64) []byte {
	t.Helper()
	out := make([]byte, 0, to-from)
	p := make([]byte, chunk)
	for off := from; off < to; {
		n, err := s.ReadAt(t.Context(), p, off)
		if err != nil {
			t.Fatalf("ReadAt(%d bytes at %d): %v", chunk, off, err)
		}
		if want := min(int64(chunk), s.Size()-off); int64(n) != want {
			t.Fatalf("ReadAt(%d bytes at %d) = %d bytes, want %d", chunk, off, n, want)
		}
		out = append(out, p[:n]...)
		off += int64(n)
	}
	return out[:min(int64(len(out)), to-from)]
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// partsOf returns the plans of all parts of epoch.
func partsOf(t testing.TB, pl *Planner, epoch, parts int) []*Plan {
	t.Helper()
	var plans []*Plan
	for i := range parts {
		p, err := pl.Plan(epoch, i, parts)
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
	}
	return plans
}

// partCounts says into how many parts each strategy is cut in the
// slower tests: the block strategies of the brief in 1 and 3, the others in 2.
func partCounts() []struct {
	strategy string
	parts    []int
} {
	var out []struct {
		strategy string
		parts    []int
	}
	for _, s := range Strategies() {
		parts := []int{2}
		if s == "corgipile" || s == "none" {
			parts = []int{1, 3}
		}
		out = append(out, struct {
			strategy string
			parts    []int
		}{s, parts})
	}
	return out
}

func TestStreamChunkedReadsGiveIdenticalBytes(t *testing.T) {
	f := newStreamFixture(t)
	for _, tc := range partCounts() {
		for _, k := range tc.parts {
			t.Run(fmt.Sprintf("%s/K=%d", tc.strategy, k), func(t *testing.T) {
				pl := f.planner(t, tc.strategy, streamBuffer)
				ld := f.loader()
				for _, plan := range partsOf(t, pl, 0, k) {
					want, _ := f.expected(t, plan)
					s := NewStream(pl, ld, plan)
					if len(plan.Buffers) < 3 {
						t.Fatalf("part %d has %d buffers: too few to cross boundaries", plan.Part, len(plan.Buffers))
					}
					for _, chunk := range []int{997, 4096, 65535, 65536, 65537, 300000, int(plan.Size), int(plan.Size) + 1000} {
						if got := readAll(t, s, chunk, 0, plan.Size); !bytes.Equal(got, want) {
							t.Fatalf("part %d read in chunks of %d differs at byte %d of %d", plan.Part, chunk, firstDiff(got, want), len(want))
						}
					}
					// Tiny reads only around two buffer boundaries and the end:
					// they are slow.
					for _, at := range []int64{plan.Buffers[1].Start, plan.Buffers[2].Start, plan.Size} {
						from, to := at-1500, min(at+1500, plan.Size)
						for _, chunk := range []int{1, 3, 16, 17, 61} {
							if got := readAll(t, s, chunk, from, to); !bytes.Equal(got, want[from:to]) {
								t.Fatalf("part %d [%d, %d) read in chunks of %d differs at byte %d", plan.Part, from, to, chunk, from+int64(firstDiff(got, want[from:to])))
							}
						}
					}
					s.Close()
				}
				if s := ld.Stats(); s.MemoryPeak > streamMemory {
					t.Fatalf("memory peak %d over the budget %d", s.MemoryPeak, streamMemory)
				}
			})
		}
	}
}

func TestStreamRandomReadAtMatchesSequentialBytes(t *testing.T) {
	f := newStreamFixture(t)
	for _, strategy := range Strategies() {
		t.Run(strategy, func(t *testing.T) {
			pl := f.planner(t, strategy, streamBuffer)
			plan, err := pl.Plan(1, 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			s := NewStream(pl, f.loader(), plan)
			defer s.Close()
			want := readAll(t, s, 1<<20, 0, plan.Size)
			if oracle, _ := f.expected(t, plan); !bytes.Equal(want, oracle) {
				t.Fatalf("sequential read differs from the plan at byte %d", firstDiff(want, oracle))
			}
			r := rand.New(rand.NewPCG(3, 4))
			p := make([]byte, 150000)
			for i := range 600 {
				var off int64
				switch i % 4 {
				case 0:
					off = r.Int64N(plan.Size + 5000) // sometimes past the end
				case 1: // around a buffer boundary
					off = max(0, plan.Buffers[r.IntN(len(plan.Buffers))].Start+r.Int64N(201)-100)
				case 2: // near the end
					off = plan.Size - r.Int64N(3000) + 100
				case 3:
					off = r.Int64N(plan.Size)
				}
				var n int
				switch r.IntN(4) {
				case 0:
					n = r.IntN(20)
				case 1:
					n = r.IntN(4097)
				case 2:
					n = r.IntN(len(p) + 1)
				case 3: // up to just past the next buffer boundary
					g := slices.IndexFunc(plan.Buffers, func(b Buffer) bool { return b.Start > off })
					if g < 0 {
						n = r.IntN(5000)
					} else {
						n = int(min(plan.Buffers[g].Start-off+int64(r.IntN(50)), int64(len(p))))
					}
				}
				for j := range p[:n] {
					p[j] = 0xa5
				}
				got, err := s.ReadAt(t.Context(), p[:n], off)
				if err != nil {
					t.Fatalf("ReadAt(%d bytes at %d): %v", n, off, err)
				}
				wantN := int(max(0, min(int64(n), plan.Size-off)))
				if got != wantN {
					t.Fatalf("ReadAt(%d bytes at %d) of a %d-byte stream = %d bytes, want %d", n, off, plan.Size, got, wantN)
				}
				if wantN > 0 && !bytes.Equal(p[:got], want[off:off+int64(got)]) {
					t.Fatalf("ReadAt(%d bytes at %d) differs at byte %d", n, off, off+int64(firstDiff(p[:got], want[off:])))
				}
				for j := got; j < n; j++ {
					if p[j] != 0xa5 {
						t.Fatalf("ReadAt(%d bytes at %d) wrote past the %d bytes it returned", n, off, got)
					}
				}
			}
		})
	}
}

func TestStreamConcurrentReadersOfOneStreamSeeTheSameBytes(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "corgipile", streamBuffer)
	plan, err := pl.Plan(0, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := f.expected(t, plan)
	s := NewStream(pl, f.loader(), plan)
	defer s.Close()
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			p := make([]byte, 100000)
			for range 150 {
				off, n := r.Int64N(plan.Size), r.IntN(len(p))
				var got int
				var err error
				if g%2 == 0 {
					got, err = s.ReadAt(t.Context(), p[:n], off)
				} else {
					// As fs reads: slices of the slab, or a copy into p.
					var vecs [][]byte
					var hold *blockcache.Buf
					vecs, got, hold, err = s.ReadSlices(t.Context(), p[:n], nil, off)
					if hold != nil {
						copy(p, bytes.Join(vecs, nil))
						s.Done(hold)
					}
				}
				if err != nil || !bytes.Equal(p[:got], want[off:min(off+int64(n), plan.Size)]) {
					t.Errorf("ReadAt(%d bytes at %d): %d bytes, err %v, bytes right %v", n, off, got, err, err == nil && bytes.Equal(p[:got], want[off:off+int64(got)]))
					return
				}
			}
		})
	}
	wg.Wait()
	// Six readers may have needed six views at once; the next buffer
	// entered trims the idle ones.
	for _, g := range []int{0, len(plan.Buffers) - 1} {
		readAll(t, s, 100, plan.Buffers[g].Start, plan.Buffers[g].Start+100)
	}
	if len(s.views) > maxViews {
		t.Errorf("the stream keeps %d views after the concurrent reads, want at most %d", len(s.views), maxViews)
	}
}

func TestStreamPartsServeEverySourceRecordOnce(t *testing.T) {
	f := newStreamFixture(t)
	source := map[string]int{}
	for _, r := range f.records {
		source[string(f.frame(r))]++
	}
	var sourceOrder []byte
	for _, d := range f.files {
		sourceOrder = append(sourceOrder, d...)
	}
	for _, strategy := range Strategies() {
		if !ExactlyOnce(strategy) {
			continue // mrs: see TestMRSServesEachScannedRecordOnceInThatEpochOrTheNext
		}
		for _, k := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/K=%d", strategy, k), func(t *testing.T) {
				pl := f.planner(t, strategy, streamBuffer)
				ld := f.loader()
				for epoch := range 2 {
					served := map[string]int{}
					var all []byte
					for _, plan := range partsOf(t, pl, epoch, k) {
						s := NewStream(pl, ld, plan)
						data := readAll(t, s, 64<<10, 0, plan.Size)
						s.Close()
						starts, err := formats.Split(data, 0, nil)
						if err != nil {
							t.Fatalf("epoch %d part %d does not split into frames: %v", epoch, plan.Part, err)
						}
						if int64(len(starts)) != plan.Records {
							t.Fatalf("epoch %d part %d serves %d records, plan says %d", epoch, plan.Part, len(starts), plan.Records)
						}
						for i, st := range starts {
							end := int64(len(data))
							if i+1 < len(starts) {
								end = starts[i+1]
							}
							served[string(data[st:end])]++
						}
						all = append(all, data...)
					}
					if len(served) != len(source) {
						t.Fatalf("epoch %d: %d distinct records served, source has %d", epoch, len(served), len(source))
					}
					for rec, n := range source {
						if served[rec] != n {
							t.Fatalf("epoch %d: a record of %d bytes written %d times is served %d times", epoch, len(rec), n, served[rec])
						}
					}
					inOrder := bytes.Equal(all, sourceOrder)
					if want := strategy == "none"; inOrder != want {
						t.Fatalf("epoch %d: served in source order %v, want %v", epoch, inOrder, want)
					}
				}
			})
		}
	}
}

func TestStreamWalkPointsAtTheServedRecords(t *testing.T) {
	f := newStreamFixture(t)
	for _, strategy := range Strategies() {
		if !ExactlyOnce(strategy) {
			continue // mrs: see TestMRSServesEachScannedRecordOnceInThatEpochOrTheNext
		}
		t.Run(strategy, func(t *testing.T) {
			pl := f.planner(t, strategy, streamBuffer)
			ld := f.loader()
			seen := map[RecordRef]int{}
			for _, plan := range partsOf(t, pl, 1, 3) {
				s := NewStream(pl, ld, plan)
				var refs []RecordRef
				if err := s.Walk(t.Context(), func(r RecordRef) error { refs = append(refs, r); return nil }); err != nil {
					t.Fatal(err)
				}
				data := readAll(t, s, 50000, 0, plan.Size)
				s.Close()
				if _, want := f.expected(t, plan); !slices.Equal(refs, want) {
					t.Fatalf("part %d: Walk gives %d refs, differing from the plan's %d", plan.Part, len(refs), len(want))
				}
				var at int64
				for i, r := range refs {
					if r.File < 0 || int(r.File) >= len(f.files) || r.Offset < 0 || r.Offset+r.Len > int64(len(f.files[r.File])) {
						t.Fatalf("part %d ref %d %+v points outside the source", plan.Part, i, r)
					}
					src := f.files[r.File][r.Offset : r.Offset+r.Len]
					if at+r.Len > int64(len(data)) || !bytes.Equal(src, data[at:at+r.Len]) {
						t.Fatalf("part %d record %d: source frame at %+v differs from the served bytes at %d", plan.Part, i, r, at)
					}
					at += r.Len
					seen[r]++
				}
				if at != plan.Size {
					t.Fatalf("part %d: refs cover %d bytes, stream has %d", plan.Part, at, plan.Size)
				}
			}
			for i, r := range f.records {
				if n := seen[RecordRef{int32(i), r.file, r.off, r.len, r.len}]; n != 1 {
					t.Fatalf("source record %+v walked %d times over all parts", r, n)
				}
			}
			if len(seen) != len(f.records) {
				t.Fatalf("%d refs walked, source has %d records", len(seen), len(f.records))
			}
		})
	}
}

func TestStreamWalkStopsAtTheCallbacksError(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "corgipile", streamBuffer)
	plan, _ := pl.Plan(0, 0, 1)
	s := NewStream(pl, f.loader(), plan)
	defer s.Close()
	stop := errors.New("enough")
	calls := 0
	err := s.Walk(t.Context(), func(RecordRef) error {
		calls++
		if calls == 10 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 10 {
		t.Fatalf("Walk returned %v after %d calls", err, calls)
	}
}

// eventually polls cond for up to 10 seconds.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// mallocs counts the heap allocations of fn, in every goroutine.
func mallocs(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.Mallocs - a.Mallocs
}

func TestStreamSequentialReadDoesNotAllocatePerRecord(t *testing.T) {
	f := newStreamFixture(t)
	const chunk = 64 << 10
	t.Run("chunk within a buffer", func(t *testing.T) {
		// Buffers of 512 KiB (half the memory) hold several 64 KiB chunks.
		pl := f.planner(t, "corgipile", streamMemory/2)
		plan, _ := pl.Plan(0, 0, 1)
		ld := f.loader()
		s := NewStream(pl, ld, plan)
		defer s.Close()
		b := plan.Buffers[0]
		chunks := int(b.Size / chunk)
		if chunks < 4 {
			t.Fatalf("buffer 0 holds %d bytes: too small", b.Size)
		}
		want, _ := f.expected(t, plan)
		p := make([]byte, chunk)
		i := 0
		read := func() {
			off := b.Start + int64(i%chunks)*chunk
			i++
			if n, err := s.ReadAt(t.Context(), p, off); n != chunk || err != nil || !bytes.Equal(p, want[off:off+chunk]) {
				t.Fatalf("ReadAt(%d at %d): %d, %v", chunk, off, n, err)
			}
		}
		read() // loads the buffer and prefetches the next
		// The prefetch's allocations must not land in the count.
		eventually(t, func() bool { return ld.Stats().BuffersLoaded == 2 })
		perChunk := testing.AllocsPerRun(100, read)
		// The same read in 64 pieces of 1 KiB: if allocations grew with the
		// records copied they would differ.
		small := make([]byte, chunk/64)
		perSmall := testing.AllocsPerRun(100, func() {
			off := b.Start + int64(i%(chunks*64))*int64(len(small))
			i++
			if n, err := s.ReadAt(t.Context(), small, off); n != len(small) || err != nil {
				t.Fatalf("ReadAt: %d, %v", n, err)
			}
		})
		t.Logf("allocations per ReadAt within one buffer: %v for 64 KiB (~%d records), %v for 1 KiB", perChunk, chunk/1500, perSmall)
		if perChunk != 0 {
			t.Errorf("a 64 KiB ReadAt within the current buffer allocates %v times, want 0", perChunk)
		}
		if perSmall != perChunk {
			t.Errorf("allocations per ReadAt depend on its size: %v for 64 KiB, %v for 1 KiB", perChunk, perSmall)
		}
		// ReadSlices, as fs calls it with a reused slice table: slices
		// (4 KiB, a few records) or a copy (the whole buffer, too many).
		vecs := make([][]byte, 0, MaxSlices)
		whole := make([]byte, b.Size)
		for _, q := range [][]byte{p[:4<<10], whole} {
			perSlices := testing.AllocsPerRun(50, func() {
				_, _, hold, err := s.ReadSlices(t.Context(), q, vecs[:0], b.Start)
				if err != nil {
					t.Fatal(err)
				}
				if hold != nil {
					s.Done(hold)
				}
			})
			if perSlices != 0 {
				t.Errorf("a ReadSlices of %d bytes within the current buffer allocates %v times, want 0", len(q), perSlices)
			}
		}
	})
	t.Run("whole epoch", func(t *testing.T) {
		for _, tc := range []struct {
			strategy string
			buffer   int64
		}{{"corgipile", streamBuffer}, {"none", streamBuffer}, {"corgipile", streamMemory / 2}, {"none", streamMemory / 2}} {
			pl := f.planner(t, tc.strategy, tc.buffer)
			plan, _ := pl.Plan(0, 0, 1)
			s := NewStream(pl, f.loader(), plan)
			p := make([]byte, chunk)
			reads := 0
			n := mallocs(func() {
				for off := int64(0); off < plan.Size; off += chunk {
					if _, err := s.ReadAt(t.Context(), p, off); err != nil {
						t.Fatal(err)
					}
					reads++
				}
			})
			s.Close()
			// Allocations follow buffers and reads, not records: each buffer
			// load (its slab, extent tables, file opens, worker goroutines,
			// the growth of its record table, the prefetch of the next two) costs
			// about 40-50, each read 2 (see above), the next epoch's plan a
			// few. 64 per buffer + 4 per read + 100 bounds that with room.
			bound := uint64(64*len(plan.Buffers) + 4*reads + 100)
			t.Logf("%s, %d KiB buffers: %d allocations for %d records, %d buffers, %d reads (bound %d)",
				tc.strategy, tc.buffer>>10, n, plan.Records, len(plan.Buffers), reads, bound)
			if n > bound {
				t.Errorf("%s: reading an epoch of %d records in %d buffers allocated %d times, want at most %d", tc.strategy, plan.Records, len(plan.Buffers), n, bound)
			}
			// With buffers of ~300 records, far fewer allocations than
			// records, though the count includes the loads of the next
			// epoch's first two buffers.
			if tc.buffer == streamMemory/2 && n > uint64(plan.Records/3) {
				t.Errorf("%s: %d allocations for %d records, want at most a third", tc.strategy, n, plan.Records)
			}
		}
	})
}

func TestStreamSequentialReaderHitsPrefetch(t *testing.T) {
	f := newStreamFixture(t)
	for _, strategy := range Strategies() {
		for _, chunk := range []int{4096, 64 << 10, 200000} {
			t.Run(fmt.Sprintf("%s/chunk=%d", strategy, chunk), func(t *testing.T) {
				pl := f.planner(t, strategy, streamBuffer)
				ld := f.loader()
				plan, _ := pl.Plan(0, 0, 1)
				s := NewStream(pl, ld, plan)
				readAll(t, s, chunk, 0, plan.Size)
				s.Close()
				st := ld.Stats()
				if st.PrefetchHits < int64(len(plan.Buffers)-1) {
					t.Fatalf("%d prefetch hits for %d buffers read in order, want at least %d: %+v", st.PrefetchHits, len(plan.Buffers), len(plan.Buffers)-1, st)
				}
				if st.MemoryPeak > streamMemory {
					t.Fatalf("memory peak %d over the budget", st.MemoryPeak)
				}
				// The last buffer prefetched the first of the next epoch.
				next, _ := pl.Plan(1, 0, 1)
				s = NewStream(pl, ld, next)
				defer s.Close()
				if n, err := s.ReadAt(t.Context(), make([]byte, 10), 0); n != 10 || err != nil {
					t.Fatalf("ReadAt: %d, %v", n, err)
				}
				if got := ld.Stats().PrefetchHits; got != st.PrefetchHits+1 {
					t.Fatalf("first read of the next epoch: prefetch hits %d -> %d, want one more", st.PrefetchHits, got)
				}
			})
		}
	}
}

func TestStreamIdleOpenStreamDoesNotHoldTheBudget(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "corgipile", streamBuffer)
	plans := partsOf(t, pl, 0, 2)
	// Room for two buffers: one stream's and one more.
	ld := blockcache.NewLoader(f.ix, blockcache.LoaderOptions{MaxMemory: 2*streamBuffer + 1})
	idle, busy := NewStream(pl, ld, plans[0]), NewStream(pl, ld, plans[1])
	defer idle.Close()
	defer busy.Close()
	wantIdle, _ := f.expected(t, plans[0])
	wantBusy, _ := f.expected(t, plans[1])
	p := make([]byte, 1000)
	if _, err := idle.ReadAt(t.Context(), p, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	got := make([]byte, 0, plans[1].Size)
	q := make([]byte, 64<<10)
	for off := int64(0); off < plans[1].Size; {
		n, err := busy.ReadAt(ctx, q, off)
		if err != nil {
			t.Fatalf("the busy stream is stuck behind the idle one: %v", err)
		}
		got = append(got, q[:n]...)
		off += int64(n)
	}
	if !bytes.Equal(got, wantBusy) {
		t.Fatal("busy stream bytes differ")
	}
	// The idle stream's buffer was evicted; it reads again correctly.
	if got := readAll(t, idle, 64<<10, 0, plans[0].Size); !bytes.Equal(got, wantIdle) {
		t.Fatal("idle stream bytes differ after its buffer was evicted")
	}
	if s := ld.Stats(); s.Evictions == 0 || s.MemoryPeak > s.MemoryBudget {
		t.Fatalf("stats %+v", s)
	}
}

func TestStreamPartsReadConcurrentlyThroughOneLoader(t *testing.T) {
	f := newStreamFixture(t)
	for _, strategy := range []string{"corgipile", "full"} {
		t.Run(strategy, func(t *testing.T) {
			pl := f.planner(t, strategy, streamBuffer)
			ld := blockcache.NewLoader(f.ix, blockcache.LoaderOptions{MaxMemory: 5 * streamBuffer})
			var wg sync.WaitGroup
			for _, plan := range partsOf(t, pl, 0, 4) {
				want, _ := f.expected(t, plan)
				wg.Go(func() {
					s := NewStream(pl, ld, plan)
					defer s.Close()
					r := rand.New(rand.NewPCG(uint64(plan.Part), 5))
					var got []byte
					p := make([]byte, 100000)
					for off := int64(0); off < plan.Size; {
						n, err := s.ReadAt(t.Context(), p[:1+r.IntN(len(p))], off)
						if err != nil {
							t.Error(err)
							return
						}
						got = append(got, p[:n]...)
						off += int64(n)
					}
					if !bytes.Equal(got, want) {
						t.Errorf("part %d differs at byte %d", plan.Part, firstDiff(got, want))
					}
				})
			}
			wg.Wait()
			if s := ld.Stats(); s.MemoryPeak > s.MemoryBudget {
				t.Fatalf("memory peak %d over the budget %d", s.MemoryPeak, s.MemoryBudget)
			}
		})
	}
}

func TestStreamReportsAChangedSourceAndRecovers(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "none", streamBuffer)
	plan, _ := pl.Plan(0, 0, 1)
	want, _ := f.expected(t, plan)
	s := NewStream(pl, f.loader(), plan)
	defer s.Close()
	fi, err := os.Stat(f.paths[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f.paths[0], 100); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 1000)
	n, err := s.ReadAt(t.Context(), p, 0)
	if err == nil || n != 0 || !strings.Contains(err.Error(), f.paths[0]) || !strings.Contains(err.Error(), "buffer 0") {
		t.Fatalf("ReadAt of a truncated source: %d bytes, err %v", n, err)
	}
	if err := os.WriteFile(f.paths[0], f.files[0], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(f.paths[0], fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, 64<<10, 0, plan.Size); !bytes.Equal(got, want) {
		t.Fatal("bytes differ after the source was restored")
	}
}

func TestStreamReadAtNegativeOffsetFails(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "corgipile", streamBuffer)
	plan, _ := pl.Plan(0, 0, 1)
	s := NewStream(pl, f.loader(), plan)
	defer s.Close()
	for _, off := range []int64{-1, -5000, -1 << 63} {
		if n, err := s.ReadAt(t.Context(), make([]byte, 10), off); n != 0 || err == nil {
			t.Fatalf("ReadAt at %d: %d bytes, err %v; want an error", off, n, err)
		}
	}
}

// TestSequentialReaderUsesAFewBuffersOfMemory checks that a reader going
// through a part from start to end recycles memory: with a budget of 16
// buffers, the loader's peak stays at a few buffers (the one served, the one
// prefetched, and the recently used ones kept for readers that step back).
func TestSequentialReaderUsesAFewBuffersOfMemory(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "corgipile", streamBuffer)
	ld := blockcache.NewLoader(f.ix, blockcache.LoaderOptions{MaxMemory: 16 * streamBuffer})
	// Buffers are whole blocks, which are the block size plus up to a
	// record: they differ in size, and slabs are made as large as the
	// largest buffer so far, so memory counts in the largest.
	var largest int64
	for e := range 2 {
		plan, _ := pl.Plan(e, 0, 1)
		for _, b := range plan.Buffers {
			largest = max(largest, b.Size)
		}
		s := NewStream(pl, ld, plan)
		p := make([]byte, 8<<10)
		for off := int64(0); off < plan.Size; off += int64(len(p)) {
			if _, err := s.ReadAt(t.Context(), p, off); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
	}
	// The one served, two prefetched, the two released last (kept for
	// late readahead requests), and one being recycled.
	if st := ld.Stats(); st.MemoryPeak > 6*largest {
		t.Fatalf("peak memory %d bytes, %.1f buffers of %d: a sequential reader should need about 5", st.MemoryPeak, float64(st.MemoryPeak)/float64(largest), largest)
	}
}

// sliceRead is one ReadSlices call whose slices the test still holds.
type sliceRead struct {
	off  int64
	vecs [][]byte
	hold *blockcache.Buf
}

func TestStreamReadSlicesGiveTheBytesOfReadAtAndKeepThemUntilDone(t *testing.T) {
	f := newStreamFixture(t)
	for _, strategy := range []string{"corgipile", "none"} {
		t.Run(strategy, func(t *testing.T) {
			pl := f.planner(t, strategy, streamBuffer)
			plan, err := pl.Plan(0, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := f.expected(t, plan)
			ld := f.loader()
			s := NewStream(pl, ld, plan)
			defer s.Close()
			r := rand.New(rand.NewPCG(5, 6))
			var held []sliceRead
			var sliced, fallback int
			for range 400 {
				off := r.Int64N(plan.Size + 10)
				n := 1 + r.IntN(40<<10)
				p := make([]byte, n)
				vecs, got, hold, err := s.ReadSlices(t.Context(), p, nil, off)
				if err != nil {
					t.Fatalf("ReadSlices(%d at %d): %v", n, off, err)
				}
				if wantN := max(0, min(off+int64(n), plan.Size)-off); int64(got) != wantN {
					t.Fatalf("ReadSlices(%d at %d) served %d bytes, want %d", n, off, got, wantN)
				}
				if hold == nil {
					fallback++
					if len(vecs) != 0 {
						t.Fatalf("ReadSlices(%d at %d) copied but gave %d slices", n, off, len(vecs))
					}
					if !bytes.Equal(p[:got], want[min(off, plan.Size):min(off, plan.Size)+int64(got)]) {
						t.Fatalf("ReadSlices(%d at %d) copied wrong bytes", n, off)
					}
					continue
				}
				if g := plan.Buffers[s.find(off)]; off+int64(got) > g.Start+g.Size {
					t.Fatalf("ReadSlices(%d at %d) gave slices of two buffers", n, off)
				}
				sliced++
				if len(vecs) > MaxSlices {
					t.Fatalf("ReadSlices(%d at %d) gave %d slices, more than %d", n, off, len(vecs), MaxSlices)
				}
				if strategy == "none" && len(vecs) > len(plan.Buffers[s.find(off)].Blocks) {
					t.Fatalf("source order: %d slices for a read within a buffer of %d blocks; back-to-back records must share a slice", len(vecs), len(plan.Buffers[s.find(off)].Blocks))
				}
				held = append(held, sliceRead{off, vecs, hold})
				// Keep up to 4 reads' slices (4 buffers of the 16 the budget
				// holds) across many reads that load, evict and recycle other
				// buffers; give back one at random.
				if len(held) > 4 {
					j := r.IntN(len(held))
					checkSlices(t, held[j], want)
					s.Done(held[j].hold)
					held = slices.Delete(held, j, j+1)
				}
			}
			for _, h := range held {
				checkSlices(t, h, want)
				s.Done(h.hold)
			}
			t.Logf("%s: %d reads served as slices, %d copied", strategy, sliced, fallback)
			if sliced < 100 {
				t.Errorf("only %d of 400 reads were served as slices", sliced)
			}
			if ld.Stats().Evictions == 0 {
				t.Errorf("no buffer was evicted: the test did not check that held slices survive recycling")
			}
		})
	}
}

func TestStreamReadSlicesCopiesReadsThatNeedTooManySlices(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "corgipile", streamMemory/2)
	plan, _ := pl.Plan(0, 0, 1)
	want, _ := f.expected(t, plan)
	s := NewStream(pl, f.loader(), plan)
	defer s.Close()
	b := plan.Buffers[0]
	var sliced, copied int
	for _, n := range []int{1, 4 << 10, 64 << 10, 200 << 10, int(b.Size)} {
		p := make([]byte, n)
		vecs, got, hold, err := s.ReadSlices(t.Context(), p, nil, b.Start)
		if err != nil || got != n {
			t.Fatalf("ReadSlices(%d at %d): %d bytes, %v", n, b.Start, got, err)
		}
		if hold != nil {
			sliced++
			if len(vecs) > MaxSlices {
				t.Fatalf("ReadSlices(%d) gave %d slices, more than %d", n, len(vecs), MaxSlices)
			}
			p = bytes.Join(vecs, nil)
			s.Done(hold)
		} else {
			copied++
		}
		if !bytes.Equal(p, want[b.Start:b.Start+int64(n)]) {
			t.Fatalf("ReadSlices(%d at %d) served wrong bytes (held slices: %v)", n, b.Start, hold != nil)
		}
	}
	// About 1.5 KB a record: 200 KiB and the whole 512 KiB buffer need more
	// than MaxSlices slices, the small reads fewer.
	if sliced == 0 || copied == 0 {
		t.Errorf("%d reads served as slices and %d copied; want both", sliced, copied)
	}
}

func checkSlices(t *testing.T, h sliceRead, want []byte) {
	t.Helper()
	got := bytes.Join(h.vecs, nil)
	if !bytes.Equal(got, want[h.off:h.off+int64(len(got))]) {
		t.Fatalf("slices of the read at %d (%d bytes) changed or are wrong: differ at byte %d", h.off, len(got), firstDiff(got, want[h.off:]))
	}
}

func TestStreamHeldSlicesKeepTheirBufferFromOtherStreams(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "corgipile", streamMemory/2)
	plan, _ := pl.Plan(0, 0, 1)
	want, _ := f.expected(t, plan)
	ld := f.loader()
	s := NewStream(pl, ld, plan)
	vecs, _, hold, err := s.ReadSlices(t.Context(), make([]byte, 4<<10), nil, 0)
	if hold == nil || err != nil {
		t.Fatalf("ReadSlices of 4 KiB: held %v, %v; want slices", hold != nil, err)
	}
	s.Close()
	// Half the budget is held; another stream reading a whole epoch must
	// make do with the rest, and must not take the held slab.
	other := NewStream(pl, ld, plan)
	readAll(t, other, 64<<10, 0, plan.Size)
	other.Close()
	checkSlices(t, sliceRead{0, vecs, hold}, want)
	s.Done(hold)
}

// A read that waits for memory must not stop another read of the same
// stream from giving back the buffer it copied from: that buffer may be
// the memory the first one waits for.
func TestStreamReadWaitingForMemoryLetsAnotherReadOfTheStreamRelease(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "corgipile", streamMemory/2)
	plan, _ := pl.Plan(0, 0, 1)
	if len(plan.Buffers) < 3 {
		t.Fatalf("%d buffers, want 3 or more", len(plan.Buffers))
	}
	want, _ := f.expected(t, plan)
	ld := f.loader()
	s := NewStream(pl, ld, plan)
	defer s.Close()
	// The budget holds two buffers: one held by a reply of slices, one by
	// a read copying from buffer 1 (the test stands in for it).
	_, _, hold, err := s.ReadSlices(t.Context(), make([]byte, 1), nil, 0)
	if hold == nil || err != nil {
		t.Fatalf("ReadSlices of 1 byte: held %v, %v; want slices", hold != nil, err)
	}
	defer s.Done(hold)
	v, err := s.acquire(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	b2 := plan.Buffers[2]
	go func() {
		p := make([]byte, 1000)
		n, err := s.ReadAt(t.Context(), p, b2.Start)
		if err == nil && !bytes.Equal(p[:n], want[b2.Start:b2.Start+int64(n)]) {
			err = errors.New("wrong bytes")
		}
		done <- err
	}()
	eventually(t, func() bool { return ld.Stats().MemoryWaits > 0 })
	s.release(v, true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the read of buffer 2 still waits for memory after buffer 1 was released")
	}
}
