package tests

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/corgifs/corgifs/api"
)

// readFirstByte opens part 0 of 1 of epoch e and reads its first byte,
// which enters its first buffer. The file stays open until the test ends:
// closing it gives up the prefetches not yet started.
func (m *mount) readFirstByte(e int) {
	m.t.Helper()
	f, err := os.Open(m.part(e, 0, 1))
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { f.Close() })
	if _, err := f.Read(make([]byte, 1)); err != nil {
		m.t.Fatal(err)
	}
}

// waitPrefetches waits until stats.json shows want prefetches issued and
// returns it; it fails after 20 s.
func (m *mount) waitPrefetches(want int64) api.Stats {
	m.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := m.stats()
		if s.PrefetchIssued >= want || time.Now().After(deadline) {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPrefetchZeroServesTheSameEpochsAndIssuesNoPrefetch: with --prefetch
// 0 a mount serves the bytes of a default mount and stats.json counts no
// prefetch, while the default one loads 2 buffers ahead of the first;
// config.json says the depth.
func TestPrefetchZeroServesTheSameEpochsAndIssuesNoPrefetch(t *testing.T) {
	src := genSynthetic(t, 8000, 16, 4, 4, "clustered")
	off := startMount(t, src, append(smallFlags, "--prefetch", "0")...)
	def := startMount(t, src, smallFlags...)
	def.readFirstByte(0)
	if s := def.waitPrefetches(2); s.PrefetchIssued != 2 {
		t.Fatalf("default mount: %d prefetches issued after the first byte, want 2", s.PrefetchIssued)
	}
	for e := range 2 {
		if !bytes.Equal(off.read(e, 0, 1), def.read(e, 0, 1)) {
			t.Fatalf("epoch %d: --prefetch 0 serves other bytes than the default", e)
		}
	}
	if s := off.stats(); s.PrefetchIssued != 0 || s.BuffersLoaded == 0 {
		t.Fatalf("--prefetch 0: %d prefetches issued, %d buffers loaded; want 0 and some", s.PrefetchIssued, s.BuffersLoaded)
	}
	for _, c := range []struct {
		m    *mount
		want int
	}{{off, 0}, {def, 2}} {
		var cfg struct{ Prefetch *int }
		b, err := os.ReadFile(api.ConfigPath(c.m.dir))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil || cfg.Prefetch == nil || *cfg.Prefetch != c.want {
			t.Fatalf("config.json says prefetch %v (%v), want %d", cfg.Prefetch, err, c.want)
		}
	}
}

// TestDeepPrefetchLoadsFurtherAheadWithinMaxMemory: --prefetch 4 loads 4
// buffers ahead of the first one read. --prefetch 1000 under a 2 MiB
// --max-memory (8 buffers of 256 KiB; an epoch holds about 16)
// loads ahead until memory is short, then skips the rest rather than wait
// or exceed the budget, and serves the same bytes.
func TestDeepPrefetchLoadsFurtherAheadWithinMaxMemory(t *testing.T) {
	src := genSynthetic(t, 30000, 16, 4, 4, "clustered") // about 16 buffers an epoch
	four := startMount(t, src, append(smallFlags, "--prefetch", "4")...)
	four.readFirstByte(0)
	if s := four.waitPrefetches(4); s.PrefetchIssued != 4 {
		t.Fatalf("--prefetch 4: %d prefetches issued after the first byte, want 4", s.PrefetchIssued)
	}
	deep := startMount(t, src, append(smallFlags, "--prefetch", "1000", "--max-memory", "2MiB")...)
	deep.readFirstByte(0)
	deadline := time.Now().Add(20 * time.Second)
	s := deep.stats()
	for ; s.PrefetchSkipped == 0 && time.Now().Before(deadline); s = deep.stats() {
		time.Sleep(20 * time.Millisecond)
	}
	if s.PrefetchSkipped == 0 || s.PrefetchIssued < 5 || s.MemoryPeak > s.MemoryBudget || s.MemoryBudget > 2<<20 {
		t.Fatalf("--prefetch 1000 after the first byte: %+v; want more than 4 issued, then some skipped, the peak within a budget of at most 2 MiB", s)
	}
	for e := range 2 {
		if !bytes.Equal(deep.read(e, 0, 1), four.read(e, 0, 1)) {
			t.Fatalf("epoch %d: --prefetch 1000 serves other bytes than --prefetch 4", e)
		}
	}
	if s := deep.stats(); s.MemoryPeak > s.MemoryBudget {
		t.Fatalf("--prefetch 1000: memory peak %d over the budget %d", s.MemoryPeak, s.MemoryBudget)
	}
}
