package tune

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func writeRandom(t *testing.T, path string, n int) {
	t.Helper()
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{1}).Read(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A size reads its byte budget in whole reads, split over the rounds (the
// reads in flight claim their bytes first, so the budget is not
// overshot), a dataset smaller
// than the budget is read once per size, and a size no file can hold is
// skipped, not measured on short reads.
func TestProbeReadsEachSizeWithinItsBudgetAndSkipsSizesLargerThanEveryFile(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	writeRandom(t, a, 3<<20)
	writeRandom(t, b, 512<<10+100)
	files := []ProbeFile{{a, 3<<20 + 0}, {b, 512<<10 + 100}}
	var last, total int64
	rep, err := Probe(context.Background(), files, ProbeOptions{
		Sizes: []int64{64 << 10, 1 << 20, 4 << 20, 8 << 20}, Bytes: 2 << 20, InFlight: 3, Seed: 1, Rounds: 2,
		Progress: func(d, tot int64) { last, total = d, tot },
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]int64{64 << 10: 32, 1 << 20: 2}
	for _, s := range rep.Sizes {
		switch s.BlockSize {
		case 64 << 10, 1 << 20:
			if s.Reads != want[s.BlockSize] || s.Bytes != s.Reads*s.BlockSize || s.Skipped != "" || s.MBps <= 0 {
				t.Errorf("%d: %+v, want %d whole reads", s.BlockSize, s, want[s.BlockSize])
			}
		default:
			if s.Skipped == "" || s.Reads != 0 {
				t.Errorf("%d: %+v, want skipped (no file that large)", s.BlockSize, s)
			}
		}
	}
	if rep.Recommended != 64<<10 && rep.Recommended != 1<<20 {
		t.Errorf("recommended %d, want a measured size", rep.Recommended)
	}
	if last != total || total != 2<<20+2<<20 {
		t.Errorf("progress ended at %d of %d, want 4 MiB of 4 MiB", last, total)
	}
	// Just written, the files are in the page cache.
	if rep.Cached < 0.9 {
		t.Errorf("cached fraction %v right after writing, want about 1", rep.Cached)
	}
	if !rep.Direct && !rep.Warm {
		t.Errorf("read through the page cache while it held the data, but not called warm: %+v", rep)
	}
}
