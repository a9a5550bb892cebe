package shuffler

import (
	"testing"

	"github.com/corgifs/corgifs/diskcache"
)

// blockOrder returns the blocks of plan in the order they are read.
func blockOrder(plan *Plan) []int32 {
	var ids []int32
	for _, b := range plan.Buffers {
		ids = append(ids, b.Blocks...)
	}
	return ids
}

func TestNextUseIsEachBlocksPlaceInTheOpenedPartsPlansOfThisAndTheNextEpochs(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "corgipile", 64<<10)
	nu := pl.NextUse()
	if got := nu.Next(0, -1); got != diskcache.Never {
		t.Fatalf("before any part is opened, Next = %d, want Never", got)
	}
	s, err := OpenStream(pl, f.loader(), 0, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p0, p1 := blockOrder(s.Plan()), blockOrder(mustPlan(t, pl, 1, 1, 3))
	in := func(ids []int32, id int32) int {
		for i, v := range ids {
			if v == id {
				return i
			}
		}
		return -1
	}
	for id := range int32(len(f.ix.Blocks)) {
		at0, at1 := in(p0, id), in(p1, id)
		// From the start of epoch 0: its place in epoch 0 if part 1
		// reads it then, else in epoch 1, else never (for 3 epochs).
		first := nu.Next(id, -1)
		switch {
		case at0 >= 0:
			if first>>32 != 0 {
				t.Fatalf("block %d is read by part 1 of 3 in epoch 0, Next says epoch %d", id, first>>32)
			}
			// Past that read, the next is in epoch 1 or later.
			if next := nu.Next(id, first); next != diskcache.Never && next>>32 < 1 {
				t.Fatalf("block %d: the use after %d is %d, still in epoch 0", id, first, next)
			}
			if at1 >= 0 && nu.Next(id, first)>>32 != 1 {
				t.Fatalf("block %d is read in epoch 1 too, Next after epoch 0's read says %d", id, nu.Next(id, first))
			}
		case at1 >= 0:
			if first>>32 != 1 {
				t.Fatalf("block %d is read by part 1 only from epoch 1, Next says %d", id, first)
			}
		}
	}
	// Order within an epoch follows the plan.
	for i := 1; i < len(p0); i++ {
		if a, b := nu.Next(p0[i-1], -1), nu.Next(p0[i], -1); a >= b {
			t.Fatalf("blocks %d and %d are read in this order in epoch 0, Next gives %d and %d", p0[i-1], p0[i], a, b)
		}
	}
}

func mustPlan(t *testing.T, pl *Planner, epoch, part, parts int) *Plan {
	t.Helper()
	p, err := pl.Plan(epoch, part, parts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
