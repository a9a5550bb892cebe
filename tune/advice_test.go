package tune

import (
	"fmt"
	"testing"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/shuffler"
)

// A mount cuts a part into buffers of equal bytes, so a --buffer of p% can
// hold fewer than p% of a part's blocks; the percent tune prints must give
// buffers of at least the blocks the rule asked for, in the real plan.
func TestBufferPercentGivesPlannedBuffersOfAtLeastTheBlocksAskedFor(t *testing.T) {
	for _, all := range []int{20, 100, 1584, 5000} {
		ix := &index.Index{Root: "/nonexistent", BlockSize: 32 << 10, Format: "tfrecord",
			Files: []index.File{{Path: "a", Size: int64(all) * 32 << 10, Records: int64(all) * 38}}}
		for i := range all {
			ix.Blocks = append(ix.Blocks, index.Block{Records: 38, Offset: int64(i) * 32 << 10, Len: 32 << 10})
		}
		ix.Bytes = int64(all) * 32 << 10
		for _, n := range []int{1, 16, 17, 33, 128, 157, 198, all / 2, all/2 + 1, all - 1, all} {
			if n < 1 || n > all {
				continue
			}
			p, err := BufferPercent(ix, 1, n)
			if err != nil {
				t.Fatal(err)
			}
			pl, err := shuffler.NewPlanner(ix, shuffler.Params{Strategy: "corgipile", Seed: 1,
				Buffer: shuffler.BufferSize{Percent: p}, MaxMemory: 1 << 40})
			if err != nil {
				t.Fatal(err)
			}
			plan, err := pl.Plan(0, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			fewest := all
			for _, b := range plan.Buffers {
				fewest = min(fewest, len(b.Blocks))
			}
			want := max(n, min(MinBufferBlocks, all))
			if fewest < want {
				t.Errorf("%d blocks, %d asked for: --buffer %s gives a buffer of %d", all, n, fmt.Sprint(p)+"%", fewest)
			}
			if p > 0.1 {
				if _, less, err := PlannedBuffer(ix, 1, p-0.1); err != nil || less >= want {
					t.Errorf("%d blocks, %d asked for: --buffer %g%% gives buffers of %d already, not just %g%% (%v)", all, n, p-0.1, less, p, err)
				}
			}
		}
	}
}
