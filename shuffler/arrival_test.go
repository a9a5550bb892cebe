package shuffler

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
	"github.com/corgifs/corgifs/source"
)

// hookedSource is a real local directory whose reads go through hook
// first, when one is set: a read can be held back, slowed or failed, as a
// remote store's GETs may be. Its files are plain readers (no page cache
// queries), so each block is one ReadAt, as from an object store.
type hookedSource struct {
	source.Source
	hook atomic.Pointer[func(name string, off int64, n int) error]
}

func (s *hookedSource) Open(rel, version string) (source.File, error) {
	f, err := s.Source.Open(rel, version)
	if err != nil {
		return nil, err
	}
	return hookedFile{f, s}, nil
}

type hookedFile struct {
	f source.File
	s *hookedSource
}

func (f hookedFile) Name() string { return f.f.Name() }
func (f hookedFile) Close() error { return f.f.Close() }
func (f hookedFile) ReadAt(p []byte, off int64) (int, error) {
	if h := f.s.hook.Load(); h != nil {
		if err := (*h)(f.f.Name(), off, len(p)); err != nil {
			return 0, err
		}
	}
	return f.f.ReadAt(p, off)
}

// hooked returns the stream fixture's dataset indexed through a
// hookedSource.
func hooked(t *testing.T, f *streamFixture) (*index.Index, *hookedSource) {
	t.Helper()
	src := &hookedSource{Source: blocktest.Dir(t, filepath.Dir(f.paths[0]), false)}
	ix, err := index.Build(t.Context(), src, index.Options{BlockSize: streamBlockSize})
	if err != nil {
		t.Fatal(err)
	}
	return ix, src
}

func (f *streamFixture) plannerOf(t *testing.T, ix *index.Index, strategy string, buffer int64) *Planner {
	t.Helper()
	pl, err := NewPlanner(ix, Params{Strategy: strategy, Seed: 42, Buffer: BufferSize{Bytes: buffer}, MaxMemory: streamMemory})
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// lastNeeded returns the file offset of the block of buffer g that the
// permutation needs last, and the file offset of the block it needs first.
func lastNeeded(t *testing.T, s *Stream, g int) (first, last int64) {
	t.Helper()
	s.mu.Lock()
	u := s.unit(&s.plan.Buffers[g])
	s.mu.Unlock()
	if len(u.Order) < 2 {
		t.Fatalf("buffer %d: fetch order %v, want one of two blocks or more", g, u.Order)
	}
	ix := s.pl.ix
	return ix.Blocks[u.Blocks[u.Order[0]]].Offset, ix.Blocks[u.Blocks[u.Order[len(u.Order)-1]]].Offset
}

func TestStreamServesTheFirstRecordsOfABufferWhileItsLastBlockIsStillLoading(t *testing.T) {
	f := newStreamFixture(t)
	ix, src := hooked(t, f)
	pl := f.plannerOf(t, ix, "corgipile", 8*streamBlockSize)
	plan, _ := pl.Plan(0, 0, 1)
	want, _ := f.expected(t, plan)
	s := NewStream(pl, blockcache.NewLoader(ix, blockcache.LoaderOptions{MaxMemory: streamMemory, Prefetch: blockcache.NoPrefetch}), plan)
	defer s.Close()
	_, last := lastNeeded(t, s, 0)
	held := make(chan struct{})
	hook := func(name string, off int64, n int) error {
		if off == last {
			<-held
		}
		return nil
	}
	src.hook.Store(&hook)
	defer close(held)
	// The first record served comes from the block needed first: it is
	// served while the last one is held back.
	p := make([]byte, 100)
	done := make(chan error, 1)
	go func() {
		_, err := s.ReadAt(t.Context(), p, plan.Buffers[0].Start)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first 100 bytes of a buffer waited for the block its permutation needs last")
	}
	if !bytes.Equal(p, want[plan.Buffers[0].Start:plan.Buffers[0].Start+100]) {
		t.Fatal("the first bytes served before the buffer loaded differ from the plan's")
	}
}

func TestStreamReadNeedingAFailedBlockFailsWithItsFileAndOffsetAndTheNextReadLoadsAgain(t *testing.T) {
	f := newStreamFixture(t)
	ix, src := hooked(t, f)
	pl := f.plannerOf(t, ix, "corgipile", 8*streamBlockSize)
	plan, _ := pl.Plan(0, 0, 1)
	want, _ := f.expected(t, plan)
	s := NewStream(pl, blockcache.NewLoader(ix, blockcache.LoaderOptions{MaxMemory: streamMemory, Prefetch: blockcache.NoPrefetch}), plan)
	defer s.Close()
	_, last := lastNeeded(t, s, 0)
	release := make(chan struct{})
	var fail atomic.Bool
	fail.Store(true)
	hook := func(name string, off int64, n int) error {
		if off == last && fail.Load() {
			<-release
			return fmt.Errorf("read %s at offset %d: the test's store failed", name, off)
		}
		return nil
	}
	src.hook.Store(&hook)
	b := plan.Buffers[0]
	p := make([]byte, 100)
	if _, err := s.ReadAt(t.Context(), p, b.Start); err != nil {
		t.Fatalf("a read of records whose blocks arrived: %v", err)
	}
	close(release)
	all := make([]byte, b.Size)
	n, err := s.ReadAt(t.Context(), all, b.Start)
	if err == nil {
		t.Fatalf("a read of the whole buffer, one of whose blocks failed, returned %d bytes and no error", n)
	}
	for _, s := range []string{fmt.Sprintf("at offset %d", last), "the test's store failed", "buffer 0"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if !bytes.Equal(all[:n], want[b.Start:b.Start+int64(n)]) {
		t.Fatal("the bytes before the failure differ from the plan's")
	}
	fail.Store(false)
	if got := readAll(t, s, 64<<10, 0, plan.Size); !bytes.Equal(got, want) {
		t.Fatalf("after the store recovered, the bytes differ at %d", firstDiff(got, want))
	}
}

func TestStreamServedWhileLoadingGivesThePlansBytesAtEveryOffsetInEveryPartOfSeveralEpochs(t *testing.T) {
	f := newStreamFixture(t)
	ix, src := hooked(t, f)
	// Blocks arrive late and out of order, as from a store.
	var seed atomic.Uint64
	hook := func(name string, off int64, n int) error {
		time.Sleep(time.Duration(rand.New(rand.NewPCG(seed.Add(1), uint64(off))).IntN(1500)) * time.Microsecond)
		return nil
	}
	src.hook.Store(&hook)
	for _, strategy := range []string{"corgipile", "none", "pls"} {
		pl := f.plannerOf(t, ix, strategy, 6*streamBlockSize)
		ld := blockcache.NewLoader(ix, blockcache.LoaderOptions{MaxMemory: streamMemory})
		for epoch := range 3 {
			for _, plan := range partsOf(t, pl, epoch, 2) {
				want, _ := f.expected(t, plan)
				// Sequential reads, and reads at random offsets of a
				// fresh stream from three goroutines at once.
				s := NewStream(pl, ld, plan)
				got := readAll(t, s, 48<<10, 0, plan.Size)
				s.Close()
				if !bytes.Equal(got, want) {
					t.Fatalf("%s epoch %d part %d: sequential bytes differ at %d", strategy, epoch, plan.Part, firstDiff(got, want))
				}
				s = NewStream(pl, ld, plan)
				var wg sync.WaitGroup
				for w := range 3 {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(uint64(epoch), uint64(w)))
						for range 20 {
							off := r.Int64N(plan.Size)
							p := make([]byte, 1+r.IntN(40<<10))
							n, err := s.ReadAt(t.Context(), p, off)
							if err != nil {
								t.Errorf("ReadAt(%d bytes at %d): %v", len(p), off, err)
								return
							}
							if !bytes.Equal(p[:n], want[off:off+int64(n)]) || (n < len(p) && off+int64(n) != plan.Size) {
								t.Errorf("%s epoch %d part %d: %d bytes at %d differ from the plan's", strategy, epoch, plan.Part, n, off)
								return
							}
						}
					})
				}
				wg.Wait()
				s.Close()
			}
		}
	}
}

func TestStreamsServedWhileLoadingUnderATightBudgetAllFinish(t *testing.T) {
	f := newStreamFixture(t)
	ix, src := hooked(t, f)
	hook := func(name string, off int64, n int) error {
		time.Sleep(200 * time.Microsecond)
		return nil
	}
	src.hook.Store(&hook)
	pl := f.plannerOf(t, ix, "corgipile", 4*streamBlockSize)
	plans := partsOf(t, pl, 0, 3)
	var largest int64
	for _, p := range plans {
		for _, b := range p.Buffers {
			largest = max(largest, b.Size)
		}
	}
	// Room for two buffers of the largest size, shared by three readers
	// and their prefetches.
	ld := blockcache.NewLoader(ix, blockcache.LoaderOptions{MaxMemory: 2*largest + 2*streamBlockSize})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, plan := range plans {
		want, _ := f.expected(t, plan)
		wg.Go(func() {
			s := NewStream(pl, ld, plan)
			defer s.Close()
			got := make([]byte, 0, plan.Size)
			p := make([]byte, 32<<10)
			for off := int64(0); off < plan.Size; {
				n, err := s.ReadAt(ctx, p, off)
				if err != nil {
					t.Errorf("part %d: ReadAt at %d: %v", plan.Part, off, err)
					return
				}
				got = append(got, p[:n]...)
				off += int64(n)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("part %d: bytes differ at %d", plan.Part, firstDiff(got, want))
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("three readers sharing a budget of two buffers did not finish within a minute")
	}
}
