package shuffler

import (
	"bytes"
	"cmp"
	"slices"
	"testing"

	"github.com/corgifs/corgifs/formats"
)

// mrsCounts returns how often each record is served in epoch e by the K
// parts, and which part serves it.
func mrsCounts(t *testing.T, pl *Planner, e, k int) (count map[int32]int, owner map[int32]int) {
	t.Helper()
	count, owner = map[int32]int{}, map[int32]int{}
	for i := range k {
		p, err := pl.Plan(e, i, k)
		if err != nil {
			t.Fatal(err)
		}
		all, _ := planRecords(pl.Index(), p)
		for _, r := range all {
			count[r]++
			if o, ok := owner[r]; ok && o != i {
				t.Fatalf("epoch %d K=%d: record %d served by parts %d and %d", e, k, r, o, i)
			}
			owner[r] = i
		}
	}
	return count, owner
}

// TestMRSServesEachScannedRecordOnceInThatEpochOrTheNext checks what mrs
// promises instead of exactly once (mrs.go): a record is served c_e times
// in epoch e, and kept_e = kept_{e−1} + 1 − c_e (kept_{−1} = 0) says
// whether the reservoir held it at the end of epoch e. That stays 0 or 1
// for every record and epoch, each part keeps the same R records' worth
// every epoch, R ≤ half the part, epoch 0 serves N − R and later epochs N.
func TestMRSServesEachScannedRecordOnceInThatEpochOrTheNext(t *testing.T) {
	for _, buf := range []BufferSize{{Percent: 10}, {Percent: 30}, {Percent: 100}} {
		for _, k := range []int{1, 3, 8} {
			pl := newPlanner(t, "mrs", buf)
			n := len(pl.Index().Frames)
			kept := make([]int, n)
			var keptPerPart []int
			changed := false
			for e := range 5 {
				count, _ := mrsCounts(t, pl, e, k)
				perPart := make([]int, k)
				var prev []int
				for r := range n {
					c := count[int32(r)]
					if c > 2 || (e == 0 && c > 1) {
						t.Fatalf("%v K=%d epoch %d: record %d served %d times", buf, k, e, r, c)
					}
					prev = append(prev, kept[r])
					kept[r] += 1 - c
					if kept[r] != 0 && kept[r] != 1 {
						t.Fatalf("%v K=%d epoch %d: record %d served %d times, kept before %d: not once in this epoch or the next", buf, k, e, r, c, prev[r])
					}
				}
				for i := range k {
					p, _ := pl.Plan(e, i, k)
					share := pl.share(pl.sequence(e, k), i, k)
					for _, r := range share {
						perPart[i] += kept[r]
					}
					if want := int64(len(share) - perPart[i]); e == 0 && p.Records != want {
						t.Fatalf("%v K=%d epoch 0 part %d: %d records, want N − R = %d", buf, k, i, p.Records, want)
					}
					if e > 0 && p.Records != int64(len(share)) {
						t.Fatalf("%v K=%d epoch %d part %d: %d records, want N = %d", buf, k, e, i, p.Records, len(share))
					}
					if 2*perPart[i] > len(share) {
						t.Fatalf("%v K=%d part %d keeps %d of %d records: more than half", buf, k, i, perPart[i], len(share))
					}
				}
				if e > 0 && !slices.Equal(perPart, keptPerPart) {
					t.Fatalf("%v K=%d epoch %d: parts keep %v records, epoch before %v", buf, k, e, perPart, keptPerPart)
				}
				if e > 0 && !slices.Equal(prev, kept) {
					changed = true
				}
				keptPerPart = perPart
			}
			if !changed && keptPerPart[0] > 0 {
				t.Fatalf("%v K=%d: the reservoir kept the same records every epoch", buf, k)
			}
		}
	}
}

// TestMRSOrderIsAPureFunctionOfTheSeed: the same seed gives the same
// order in any planner; another seed or epoch, another order.
func TestMRSOrderIsAPureFunctionOfTheSeed(t *testing.T) {
	orderOf := func(seed uint64, e, i, k int) []int32 {
		pl, err := NewPlanner(fixedIndex(), Params{Strategy: "mrs", Seed: seed, Buffer: BufferSize{Percent: 20}, MaxMemory: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		p, err := pl.Plan(e, i, k)
		if err != nil {
			t.Fatal(err)
		}
		all, _ := planRecords(pl.Index(), p)
		return all
	}
	for _, k := range []int{1, 2} {
		a := orderOf(7, 2, 0, k)
		if !slices.Equal(a, orderOf(7, 2, 0, k)) {
			t.Fatalf("K=%d: two planners with seed 7 give different orders", k)
		}
		if slices.Equal(a, orderOf(8, 2, 0, k)) {
			t.Fatalf("K=%d: seeds 7 and 8 give the same order", k)
		}
		if slices.Equal(a, orderOf(7, 3, 0, k)) {
			t.Fatalf("K=%d: epochs 2 and 3 give the same order", k)
		}
		if slices.IsSorted(a) {
			t.Fatalf("K=%d: served in source order", k)
		}
	}
}

// TestMRSMultiplexPacesTheKeptRecordsWithTheScan checks the interleaving
// on a small case against its rule: the records dropped by the scan in
// drop order, and kept[j] served before scan step ⌊j·N/|kept|⌋.
func TestMRSMultiplexPacesTheKeptRecordsWithTheScan(t *testing.T) {
	src := span(100, 140) // 40 records
	kept := []int32{1, 2, 3, 4, 5}
	out := multiplex(src, 8, 99, kept)
	var dropped []int32
	at := map[int32]int{} // scan step at which each record was dropped
	slots := reservoir(src, 8, 99, func(n int, id int32) { dropped = append(dropped, id); at[id] = n })
	if len(out) != 40-8+5 || len(slots) != 8 {
		t.Fatalf("%d served, %d kept: want 37 and 8", len(out), len(slots))
	}
	// The rule, stated as events sorted by (scan step, memory before scan).
	type event struct {
		step, kind int
		id         int32
	}
	var ev []event
	for j, id := range kept {
		ev = append(ev, event{j * 40 / 5, 0, id})
	}
	for _, id := range dropped {
		ev = append(ev, event{at[id], 1, id})
	}
	slices.SortStableFunc(ev, func(a, b event) int { return cmp.Or(cmp.Compare(a.step, b.step), cmp.Compare(a.kind, b.kind)) })
	var want []int32
	for _, e := range ev {
		want = append(want, e.id)
	}
	if !slices.Equal(out, want) {
		t.Fatalf("served %v, want %v", out, want)
	}
	// Dropped and kept split the scan.
	all := append(slices.Clone(dropped), slots...)
	slices.Sort(all)
	if !slices.Equal(all, src) {
		t.Fatalf("dropped and slots do not split the scan: %v", all)
	}
}

// TestMRSStreamServesValidFramesOfItsPlan reads mrs parts through a Stream:
// whole, valid frames, the ones the plan names, in its order.
func TestMRSStreamServesValidFramesOfItsPlan(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "mrs", streamBuffer)
	ld := f.loader()
	for e := range 2 {
		for _, plan := range partsOf(t, pl, e, 2) {
			s := NewStream(pl, ld, plan)
			data := readAll(t, s, 50000, 0, plan.Size)
			s.Close()
			starts, err := formats.Split(data, 0, nil)
			if err != nil || int64(len(starts)) != plan.Records {
				t.Fatalf("epoch %d part %d: %d frames (%v), plan says %d records", e, plan.Part, len(starts), err, plan.Records)
			}
			if want, _ := f.expected(t, plan); !bytes.Equal(data, want) {
				t.Fatalf("epoch %d part %d: served bytes differ from the plan's at %d", e, plan.Part, firstDiff(data, want))
			}
		}
	}
}
