package s3

import "testing"

// The ranges of a split read tile it exactly: no byte twice, none left
// out, none beyond, and none larger than the split size but for page
// rounding.
func TestRangesTileTheReadExactlyAndNoneExceedsTheSplitSizeRoundedToAPage(t *testing.T) {
	for _, c := range []struct{ n, split int64 }{
		{1, 2 << 20}, {2 << 20, 2 << 20}, {2<<20 + 1, 2 << 20}, {8 << 20, 2 << 20}, {8<<20 - 12345, 2 << 20},
		{4 << 20, 1 << 20}, {123457, 4096}, {5 << 20, 0}, {7, 4096},
	} {
		size, k := ranges(c.n, c.split)
		var covered int64
		for i := range k {
			lo := int64(i) * size
			hi := min(lo+size, c.n)
			if hi <= lo {
				t.Fatalf("n=%d split=%d: range %d of %d is empty (%d-%d)", c.n, c.split, i, k, lo, hi)
			}
			covered += hi - lo
		}
		if covered != c.n {
			t.Fatalf("n=%d split=%d: %d ranges of %d cover %d bytes", c.n, c.split, k, size, covered)
		}
		if c.split > 0 && c.n > c.split && size > c.split+splitAlign {
			t.Fatalf("n=%d split=%d: ranges of %d", c.n, c.split, size)
		}
		if (c.split <= 0 || c.n <= c.split) && k != 1 {
			t.Fatalf("n=%d split=%d: split in %d though not above the split size", c.n, c.split, k)
		}
	}
}

// A read is split into no more ranges than there are free GET slots, and
// not at all when every slot is taken.
func TestSplitForUsesNoMoreRangesThanFreeGETSlots(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		n     int64
		free  int
		wantK int
	}{
		{8 * mib, 24, 4}, {8 * mib, 4, 4}, {8 * mib, 3, 3}, {8 * mib, 2, 2}, {8 * mib, 1, 1}, {8 * mib, 0, 1}, {mib, 24, 1},
	} {
		size, k := splitFor(c.n, 2*mib, c.free)
		if k != c.wantK || size*int64(k) < c.n || size*int64(k-1) >= c.n {
			t.Errorf("%d bytes, %d slots free: %d ranges of %d, want %d tiling it", c.n, c.free, k, size, c.wantK)
		}
	}
}
