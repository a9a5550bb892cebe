package shuffler

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/corgifs/corgifs/blockcache"
)

// TestStreamPrefetchesAsManyBuffersAsTheLoaderSays: entering the first
// buffer starts loading the next LoaderOptions.Prefetch buffers (2 by
// default), and NoPrefetch loads each buffer only when a read reaches it,
// the bytes served the same either way.
func TestStreamPrefetchesAsManyBuffersAsTheLoaderSays(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "corgipile", streamBuffer)
	plan, _ := pl.Plan(0, 0, 1)
	want, _ := f.expected(t, plan)
	for _, c := range []struct{ option, depth int }{{blockcache.NoPrefetch, 0}, {0, 2}, {1, 1}, {4, 4}} {
		t.Run(fmt.Sprint(c.option), func(t *testing.T) {
			ld := blockcache.NewLoader(f.ix, blockcache.LoaderOptions{MaxMemory: streamMemory, Prefetch: c.option})
			if ld.PrefetchDepth() != c.depth {
				t.Fatalf("PrefetchDepth %d, want %d", ld.PrefetchDepth(), c.depth)
			}
			s := NewStream(pl, ld, plan)
			defer s.Close()
			if _, err := s.ReadAt(t.Context(), make([]byte, 1), 0); err != nil {
				t.Fatal(err)
			}
			eventually(t, func() bool { st := ld.Stats(); return st.BuffersLoaded == int64(1+c.depth) })
			if st := ld.Stats(); st.PrefetchIssued != int64(c.depth) || st.PrefetchSkipped != 0 {
				t.Fatalf("after the first read: %d prefetches issued, %d skipped; want %d and 0", st.PrefetchIssued, st.PrefetchSkipped, c.depth)
			}
			if got := readAll(t, s, 64<<10, 0, plan.Size); !bytes.Equal(got, want) {
				t.Fatalf("bytes differ from the plan's at %d", firstDiff(got, want))
			}
			if c.depth == 0 {
				// A reader takes a buffer's records as they arrive
				// (arrival.go), so the last buffer's load may count
				// itself just after its last byte was served.
				eventually(t, func() bool { return ld.Stats().BuffersLoaded == int64(len(plan.Buffers)) })
				if st := ld.Stats(); st.PrefetchIssued != 0 || st.BuffersLoaded != int64(len(plan.Buffers)) {
					t.Fatalf("without prefetch: %d prefetches issued, %d buffers loaded for %d", st.PrefetchIssued, st.BuffersLoaded, len(plan.Buffers))
				}
			}
		})
	}
}

func TestStreamPrefetchesBeyondTheNextBufferOnlyWhileTheBuffersAheadFitPrefetchBytes(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "corgipile", streamBuffer)
	plan, _ := pl.Plan(0, 0, 1)
	want, _ := f.expected(t, plan)
	b := plan.Buffers
	// Room for the next two buffers but not three, and for less than one:
	// the next buffer is always prefetched.
	for _, c := range []struct {
		bytes int64
		depth int
	}{{b[1].Size + b[2].Size + b[3].Size/2, 2}, {b[1].Size / 2, 1}} {
		t.Run(fmt.Sprint(c.bytes), func(t *testing.T) {
			ld := blockcache.NewLoader(f.ix, blockcache.LoaderOptions{MaxMemory: streamMemory, Prefetch: 4, PrefetchBytes: c.bytes})
			s := NewStream(pl, ld, plan)
			defer s.Close()
			if _, err := s.ReadAt(t.Context(), make([]byte, 1), 0); err != nil {
				t.Fatal(err)
			}
			eventually(t, func() bool { return ld.Stats().BuffersLoaded == int64(1+c.depth) })
			time.Sleep(50 * time.Millisecond) // no more come
			if st := ld.Stats(); st.PrefetchIssued != int64(c.depth) {
				t.Fatalf("after the first read: %d prefetches issued, want %d", st.PrefetchIssued, c.depth)
			}
			if got := readAll(t, s, 64<<10, 0, plan.Size); !bytes.Equal(got, want) {
				t.Fatalf("bytes differ from the plan's at %d", firstDiff(got, want))
			}
		})
	}
}

// TestStreamDeepPrefetchStaysWithinTheBudget asks for 1000 buffers ahead
// with room for 4: prefetches take only the memory that is free, so the
// peak stays within the budget, the reader never waits for memory a
// prefetch holds, and the bytes are right.
func TestStreamDeepPrefetchStaysWithinTheBudget(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "corgipile", streamBuffer)
	const budget = 4 * streamBuffer
	ld := blockcache.NewLoader(f.ix, blockcache.LoaderOptions{MaxMemory: budget, Prefetch: 1000})
	for e := range 2 {
		plan, _ := pl.Plan(e, 0, 1)
		want, _ := f.expected(t, plan)
		s := NewStream(pl, ld, plan)
		got := readAll(t, s, 32<<10, 0, plan.Size)
		s.Close()
		if !bytes.Equal(got, want) {
			t.Fatalf("epoch %d: bytes differ from the plan's at %d", e, firstDiff(got, want))
		}
	}
	st := ld.Stats()
	if st.MemoryPeak > budget {
		t.Fatalf("memory peak %d over the budget %d", st.MemoryPeak, budget)
	}
	if st.PrefetchSkipped == 0 || st.PrefetchIssued < 3 {
		t.Fatalf("%d prefetches issued, %d skipped: want several, and some skipped for want of memory", st.PrefetchIssued, st.PrefetchSkipped)
	}
}
