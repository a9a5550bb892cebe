package shuffler

import (
	"runtime"
	"slices"
	"testing"

	"github.com/corgifs/corgifs/index"
)

// sizedIndex is an index of one file whose blocks hold the records of the
// given frame lengths, perBlock records a block (a frame longer than the
// block size is a block by itself, as the indexer cuts it).
func sizedIndex(frames []uint32, perBlock int) *index.Index {
	ix := &index.Index{Root: "/sized", BlockSize: 1 << 20, Files: []index.File{{Path: "f.tfrecord"}}}
	var off int64
	blk := index.Block{}
	flush := func() {
		if blk.Records > 0 {
			ix.Blocks = append(ix.Blocks, blk)
		}
		blk = index.Block{Offset: off}
	}
	for _, f := range frames {
		if int64(f) > ix.BlockSize || int(blk.Records) == perBlock {
			flush()
		}
		blk.Records++
		blk.Len += int64(f)
		off += int64(f)
		if int64(f) > ix.BlockSize {
			flush()
		}
		ix.Frames = append(ix.Frames, f)
		ix.Records++
		ix.Bytes += int64(f)
	}
	flush()
	return ix
}

func equalFrames(n int, size uint32) []uint32 {
	f := make([]uint32, n)
	for i := range f {
		f[i] = size
	}
	return f
}

// TestPlansOfOneEpochAreComputedOnceAndShared opens (Acquire) every part of
// one epoch of a record-level strategy twice, as 128 open files would: the
// epoch's permutation of all records must be computed once, every part
// planned once, and the memory allocated must be one permutation, not one
// per open part. The issue saw 64 open parts of 5M records grow RSS by
// 1.3 GB.
func TestPlansOfOneEpochAreComputedOnceAndShared(t *testing.T) {
	const n, k = 400_000, 64
	pl, err := NewPlanner(sizedIndex(equalFrames(n, 20), 1000), Params{Strategy: "full", Seed: 3, Buffer: BufferSize{Percent: 10}, MaxMemory: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	pl.Index().BlockRecords(0) // the index's own record tables, not the plans'
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var plans []*Plan
	for range 2 {
		for i := range k {
			p, err := pl.Acquire(1, i, k)
			if err != nil {
				t.Fatal(err)
			}
			plans = append(plans, p)
		}
	}
	runtime.ReadMemStats(&after)
	perm := int64(4 * n)
	// A sequence holds its permutation and its kept prefix sums (balance.go).
	seqMem := perm + 8*(n/prefixStride+1)
	if got := int64(after.TotalAlloc - before.TotalAlloc); got > 2*perm {
		t.Errorf("%d open parts allocated %d bytes, want about one permutation of %d bytes", len(plans), got, perm)
	}
	s := pl.Stats()
	if s.SequencesComputed != 1 || s.PlansBuilt != k || s.OpenPlans != k {
		t.Errorf("stats %+v, want 1 sequence, %d plans built, %d open", s, k, k)
	}
	for i := range k {
		if plans[i] != plans[k+i] {
			t.Fatalf("part %d: two opens got different plans", i)
		}
	}
	// The plans are shares of one permutation: together every record once.
	var all []int32
	for _, p := range plans[:k] {
		for _, b := range p.Buffers {
			all = append(all, b.Records...)
		}
	}
	slices.Sort(all)
	if len(all) != n || len(slices.Compact(all)) != n {
		t.Fatalf("the parts hold %d records, want each of %d once", len(all), n)
	}

	for _, p := range plans {
		pl.Release(p)
	}
	if s := pl.Stats(); s.OpenPlans != 0 || s.SequenceBytes != seqMem {
		t.Errorf("after the last close: %+v, want no open plan and the sequence kept idle", s)
	}
	// Reopened, and stat, from the kept sequence: nothing recomputed.
	p, _ := pl.Acquire(1, 5, k)
	if _, err := pl.Size(1, 6, k); err != nil {
		t.Fatal(err)
	}
	if s := pl.Stats(); s.SequencesComputed != 1 {
		t.Errorf("reopening epoch 1 computed its permutation again: %+v", s)
	}
	pl.Release(p)
	// Idle sequences are bounded: after other epochs, at most two are kept.
	for e := 2; e < 8; e++ {
		if _, err := pl.Size(e, 0, k); err != nil {
			t.Fatal(err)
		}
	}
	if s := pl.Stats(); s.SequenceBytes > idleSequences*seqMem || s.SequencesComputed != 7 {
		t.Errorf("after 6 more epochs: %+v, want 7 computed and at most %d kept", s, idleSequences)
	}
}

// TestEqualPartsStatPlansOnlyItsOwnPart looks up parts of a large K with
// --equal-parts. Padding needs the largest part of the epoch; it used to
// plan all K parts on every lookup and open (148 s for one stat at
// K=1,048,576). The strategy must now run once per part asked for, and
// the epoch's sequence once.
func TestEqualPartsStatPlansOnlyItsOwnPart(t *testing.T) {
	for _, strategy := range []string{"corgipile", "none", "full"} {
		pl, err := NewPlanner(fixedIndex(), Params{Strategy: strategy, Seed: 7, Buffer: BufferSize{Percent: 30}, MaxMemory: 1 << 30, EqualParts: true})
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		inner := pl.strategy
		pl.strategy = func(pl *Planner, seq *sequence, epoch, part, parts int) order {
			calls++
			return inner(pl, seq, epoch, part, parts)
		}
		const k = 100_000
		parts := []int{0, 1, 4999, k - 1}
		counts := map[int64]bool{}
		for _, i := range parts {
			if _, err := pl.Size(2, i, k); err != nil {
				t.Fatal(err)
			}
			p, err := pl.Acquire(2, i, k)
			if err != nil {
				t.Fatal(err)
			}
			counts[p.Records] = true
			pl.Release(p)
		}
		if calls > 2*len(parts) {
			t.Errorf("%s: %d lookups and opens of parts of %d ran the strategy %d times, want one per part", strategy, 2*len(parts), k, calls)
		}
		if s := pl.Stats(); s.SequencesComputed > 1 {
			t.Errorf("%s: %d sequences computed, want one", strategy, s.SequencesComputed)
		}
		if len(counts) != 1 {
			t.Errorf("%s: parts hold %v records, want one count", strategy, counts)
		}
	}
}

// planRecords returns every record of p in served order, and those of its
// padding.
func planRecords(ix *index.Index, p *Plan) (all, pad []int32) {
	for _, b := range p.Buffers {
		all = append(all, b.Records...)
		for _, id := range b.Blocks {
			for r := range ix.Blocks[id].Records {
				all = append(all, int32(ix.BlockRecords(id))+r)
			}
		}
	}
	return all, all[len(all)-p.Padding:]
}

// TestEqualPartsPaddingStaysWithinTheAverageFrame has one 2 MB record among
// 10,000 small ones, K=3, with so few blocks that the part holding the big
// record holds nothing else. The padding used to repeat that record
// thousands of times (an 18 GB part) in one buffer beyond --max-memory. The
// rule: padding records are never larger than the average frame, the own
// records first, each once, then those that follow the part in the epoch.
func TestEqualPartsPaddingStaysWithinTheAverageFrame(t *testing.T) {
	frames := equalFrames(10_001, 100)
	frames[5000] = 2 << 20 // a block of its own, between two of 5000
	ix := sizedIndex(frames, 5000)
	avg := ix.Bytes / ix.Records
	for _, strategy := range Strategies() {
		pl, err := NewPlanner(ix, Params{Strategy: strategy, Seed: 5, Buffer: BufferSize{Percent: 10}, MaxMemory: 8 << 20, EqualParts: true})
		if err != nil {
			t.Fatal(err)
		}
		const k = 3
		seen := map[int32]int{}
		var most int64
		for i := range k {
			p, err := pl.Plan(0, i, k)
			if err != nil {
				t.Fatal(err)
			}
			all, pad := planRecords(ix, p)
			var padBytes int64
			for _, r := range pad {
				padBytes += int64(ix.Frames[r])
				if int64(ix.Frames[r]) > avg {
					t.Fatalf("%s part %d: padding record %d of %d bytes, over the average %d", strategy, i, r, ix.Frames[r], avg)
				}
			}
			if padBytes > int64(p.Padding)*avg {
				t.Fatalf("%s part %d: %d padding bytes for %d records", strategy, i, padBytes, p.Padding)
			}
			own := map[int32]bool{}
			for _, r := range all[:len(all)-len(pad)] {
				own[r] = true
			}
			// Own small records first, distinct; borrowed ones after.
			var ownPad []int32
			for _, r := range pad {
				if own[r] {
					ownPad = append(ownPad, r)
				}
			}
			smallOwn := 0
			for r := range own {
				if int64(ix.Frames[r]) <= avg {
					smallOwn++
				}
			}
			if len(ownPad) != min(smallOwn, p.Padding) || len(slices.Compact(slices.Sorted(slices.Values(ownPad)))) != len(ownPad) || !slices.Equal(ownPad, pad[:len(ownPad)]) {
				t.Fatalf("%s part %d: %d of %d padding records are its own (%d small ones), want them first, each once", strategy, i, len(ownPad), p.Padding, smallOwn)
			}
			for _, b := range p.Buffers {
				if b.Size > p.Target && b.Count > 1 && len(b.Blocks) != 1 {
					t.Fatalf("%s part %d: a buffer of %d records and %d bytes, over the target %d", strategy, i, b.Count, b.Size, p.Target)
				}
			}
			for _, r := range all {
				seen[r]++
			}
			most = max(most, p.Records)
			if p.Records != most {
				t.Fatalf("%s: parts hold different record counts", strategy)
			}
		}
		if seen[5000] != 1 {
			t.Errorf("%s: the 2 MiB record is served %d times in the epoch, want once", strategy, seen[5000])
		}
	}
}

// TestEqualPartsWithMorePartsThanBlocksBorrowsFromTheNextPart has 32 parts
// of a 16-block set: half the parts are empty. Each part holds M records,
// M those of the largest block, so the epoch holds K×M; an empty part
// borrows the records of the part after it, so no record is served more
// than ⌈K/blocks⌉ times. (The old padding drew the empty parts' records
// from the whole set: some came 8 times.)
func TestEqualPartsWithMorePartsThanBlocksBorrowsFromTheNextPart(t *testing.T) {
	ix := sizedIndex(equalFrames(16*1000, 100), 1000)
	const k = 32
	for _, strategy := range []string{"corgipile", "block", "none"} {
		pl, err := NewPlanner(ix, Params{Strategy: strategy, Seed: 9, Buffer: BufferSize{Percent: 10}, MaxMemory: 1 << 30, EqualParts: true})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int32]int{}
		var total int64
		for i := range k {
			p, _ := pl.Plan(4, i, k)
			all, _ := planRecords(ix, p)
			if p.Records != 1000 {
				t.Fatalf("%s part %d holds %d records, want 1000 (the largest block)", strategy, i, p.Records)
			}
			total += p.Records
			for _, r := range all {
				seen[r]++
			}
		}
		if total != k*1000 || len(seen) != len(ix.Frames) {
			t.Fatalf("%s: the epoch holds %d records, %d distinct; want %d, all %d", strategy, total, len(seen), k*1000, len(ix.Frames))
		}
		for r, n := range seen {
			if n > 2 {
				t.Fatalf("%s: record %d served %d times, want at most K/blocks = 2", strategy, r, n)
			}
		}
	}
}

// TestOpenStreamsShareAPlanAndCloseReleasesIt opens two streams of one part
// and reads both to the end, so that both prefetch the next epoch: each
// plan is built once for both, and when both are closed no plan stays open.
func TestOpenStreamsShareAPlanAndCloseReleasesIt(t *testing.T) {
	f := newStreamFixture(t)
	for _, strategy := range []string{"corgipile", "full"} {
		pl := f.planner(t, strategy, streamBuffer)
		ld := f.loader()
		a, err := OpenStream(pl, ld, 0, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		b, err := OpenStream(pl, ld, 0, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		if a.Plan() != b.Plan() {
			t.Fatalf("%s: two streams of one part have different plans", strategy)
		}
		readAll(t, a, 64<<10, 0, a.Size())
		readAll(t, b, 64<<10, 0, b.Size())
		if s := pl.Stats(); s.PlansBuilt != 2 || s.OpenPlans != 2 {
			t.Errorf("%s: after reading both to the end: %+v, want this epoch's and the next's plan, each built once", strategy, s)
		}
		a.Close()
		a.Close() // twice: the second does nothing
		b.Close()
		if s := pl.Stats(); s.OpenPlans != 0 {
			t.Errorf("%s: after closing both: %d plans open", strategy, s.OpenPlans)
		}
	}
}

// TestPaddedPartsStreamTheirPlannedBytes reads padded parts, empty ones
// included (more parts than blocks), through a Stream: the padding's
// buffers of borrowed records, shuffled, serve what the plan says.
func TestPaddedPartsStreamTheirPlannedBytes(t *testing.T) {
	f := newStreamFixture(t)
	k := len(f.ix.Blocks) + 3
	for _, strategy := range []string{"corgipile", "block", "full"} {
		pl, err := NewPlanner(f.ix, Params{Strategy: strategy, Seed: 42, Buffer: BufferSize{Bytes: streamBuffer}, MaxMemory: streamMemory, EqualParts: true})
		if err != nil {
			t.Fatal(err)
		}
		ld := f.loader()
		padded := 0
		for _, i := range []int{0, 1, k / 2, k - 1} {
			s, err := OpenStream(pl, ld, 0, i, k)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := f.expected(t, s.Plan())
			if got := readAll(t, s, 4096, 0, s.Size()); !slices.Equal(got, want) {
				t.Errorf("%s part %d of %d: %d bytes read, not the plan's %d (padding %d)", strategy, i, k, len(got), len(want), s.Plan().Padding)
			}
			padded += s.Plan().Padding
			s.Close()
		}
		if padded == 0 {
			t.Errorf("%s: no padding in parts of %d with %d blocks", strategy, k, len(f.ix.Blocks))
		}
	}
}
