package shuffler

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/grab"
	"github.com/corgifs/corgifs/index"
)

var _ Feedback = (*feedback.Store)(nil)

var feedbackStrategies = []string{"grab", "cdgrab", "corgipile-balance"}

const fbDim = 4

// fbVector is the test's "gradient" of record id in epoch e: fixed
// pseudo-random values, so that balancing has something to do.
func fbVector(id int32, epoch int) []float32 {
	r := rand.New(rand.NewPCG(uint64(id), uint64(epoch)))
	v := make([]float32, fbDim)
	for k := range v {
		v[k] = float32(r.NormFloat64())
	}
	return v
}

// fbFile is a feedback file as a trainer writes it: the header, then one
// vector per served record.
func fbFile(ids []int32, epoch int) []byte {
	var b bytes.Buffer
	b.WriteString(feedback.Magic)
	binary.Write(&b, binary.LittleEndian, []uint32{feedback.Version, fbDim, 0})
	for _, id := range ids {
		binary.Write(&b, binary.LittleEndian, fbVector(id, epoch))
	}
	return b.Bytes()
}

func openStore(t *testing.T, dir string, ix *index.Index) *feedback.Store {
	t.Helper()
	s, err := feedback.Open(feedback.Options{Dir: dir, Records: ix.Records, Dim: fbDim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func fbPlanner(t *testing.T, ix *index.Index, strategy string, s *feedback.Store, maxMemory int64, timeout time.Duration, opts ...func(*Params)) *Planner {
	t.Helper()
	p := Params{Strategy: strategy, Seed: 11, Buffer: BufferSize{Percent: 30}, MaxMemory: maxMemory,
		Feedback: s, FeedbackTimeout: timeout, BalanceRule: grab.Deterministic}
	for _, o := range opts {
		o(&p)
	}
	pl, err := NewPlanner(ix, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pl.Close)
	return pl
}

// servedEpoch plans every part of epoch and returns each part's records in
// served order.
func servedEpoch(t *testing.T, pl *Planner, epoch, parts int) [][]int32 {
	t.Helper()
	out := make([][]int32, parts)
	for i := range parts {
		p, err := pl.Plan(epoch, i, parts)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = pl.RecordIDs(p)
		if int64(len(out[i])) != p.Records {
			t.Fatalf("epoch %d part %d: %d record ids, plan says %d records", epoch, i, len(out[i]), p.Records)
		}
	}
	return out
}

// upload writes every part's feedback of epoch, as the trainer does after
// reading the parts.
func upload(t *testing.T, s *feedback.Store, epoch int, served [][]int32) {
	t.Helper()
	for i, ids := range served {
		u, err := s.Begin(epoch, i, len(served), ids)
		if err != nil {
			t.Fatal(err)
		}
		data := fbFile(ids, epoch)
		// In uneven chunks, as the kernel may split them.
		for off := 0; off < len(data); off += 1000 {
			if _, err := u.WriteAt(data[off:min(len(data), off+1000)], int64(off)); err != nil {
				t.Fatal(err)
			}
		}
		if err := u.Close(); err != nil {
			t.Fatalf("epoch %d part %d: feedback refused: %v", epoch, i, err)
		}
	}
}

func checkOncePerEpoch(t *testing.T, ix *index.Index, what string, served [][]int32) {
	t.Helper()
	var all []int32
	for _, s := range served {
		all = append(all, s...)
	}
	slices.Sort(all)
	if int64(len(all)) != ix.Records {
		t.Fatalf("%s: %d records served, the dataset holds %d", what, len(all), ix.Records)
	}
	for i, r := range all {
		if r != int32(i) {
			t.Fatalf("%s: record %d served twice or not at all", what, i)
		}
	}
}

func TestFeedbackStrategiesServeEveryRecordOncePerEpoch(t *testing.T) {
	ix := fixedIndex()
	for _, strategy := range feedbackStrategies {
		for _, parts := range []int{1, 3} {
			s := openStore(t, t.TempDir(), ix)
			pl := fbPlanner(t, ix, strategy, s, 1<<30, time.Hour)
			var prev [][]int32
			for epoch := range 4 {
				served := servedEpoch(t, pl, epoch, parts)
				checkOncePerEpoch(t, ix, strategy, served)
				if epoch > 0 && strategy != "corgipile-balance" {
					// The parts keep their records (D-RR's sets).
					for i := range parts {
						if !slices.Equal(sorted(served[i]), sorted(prev[i])) {
							t.Fatalf("%s K=%d epoch %d: part %d changed its records", strategy, parts, epoch, i)
						}
					}
				}
				upload(t, s, epoch, served)
				prev = served
			}
			if n := s.Stats().Fallbacks; n != 0 {
				t.Errorf("%s K=%d: %d fallbacks with every epoch's feedback in", strategy, parts, n)
			}
		}
	}
}

// The order of epoch 1 is the paper's: GraB over epoch 0's vectors in
// served order for grab, CD-GraB over all parts for cdgrab.
// Both ways of reading the vectors give it: a copy of the epoch's
// (Feedback.Epoch) and, with the optional Served, the store's latest
// vectors in place.
func TestFeedbackOrdersAreTheBalancedOrdersOfThePreviousEpoch(t *testing.T) {
	ix := fixedIndex()
	for _, c := range []struct {
		strategy string
		latest   bool
	}{{"grab", false}, {"cdgrab", false}, {"grab", true}, {"cdgrab", true}} {
		strategy := c.strategy
		const parts = 2
		s := openStore(t, t.TempDir(), ix)
		var src Feedback = s
		if c.latest {
			src = servedStore{s}
		}
		pl, err := NewPlanner(ix, Params{Strategy: strategy, Seed: 11, Buffer: BufferSize{Percent: 30}, MaxMemory: 1 << 30,
			Feedback: src, FeedbackTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pl.Close)
		served := servedEpoch(t, pl, 0, parts)
		upload(t, s, 0, served)
		vecs := make([][]float32, parts)
		for i, ids := range served {
			for _, id := range ids {
				vecs[i] = append(vecs[i], fbVector(id, 0)...)
			}
		}
		var want [][]int32
		if strategy == "grab" {
			for i := range parts {
				want = append(want, grab.GraB(served[i], vecs[i], fbDim, grab.Deterministic, 0))
			}
		} else {
			want = grab.CDGraB(served, vecs, fbDim, grab.Deterministic, 0)
		}
		got := servedEpoch(t, pl, 1, parts)
		for i := range parts {
			if !slices.Equal(got[i], want[i]) {
				t.Errorf("%s part %d: epoch 1 serves %v, the balanced order is %v", strategy, i, got[i], want[i])
			}
		}
	}
}

// servedStore gives the store the optional Served (grab.go), from the
// ids Epoch returns.
type servedStore struct{ *feedback.Store }

func (s servedStore) Served(epoch, part, parts int) ([]int32, bool) {
	ids, _, _, ok := s.Epoch(epoch, part, parts)
	return ids, ok
}

// Two mounts given the same feedback serve the same next epochs, and a
// remount serves the epochs already planned from the saved orders, even
// though the feedback they came from is gone.
func TestSameFeedbackGivesTheSameNextOrderAlsoAfterARemount(t *testing.T) {
	for _, rule := range []grab.Rule{grab.Deterministic, grab.Randomized} {
		t.Run(rule.String(), func(t *testing.T) { sameFeedbackSameOrder(t, rule) })
	}
}

func sameFeedbackSameOrder(t *testing.T, rule grab.Rule) {
	ix := fixedIndex()
	withRule := func(p *Params) { p.BalanceRule = rule }
	for _, strategy := range feedbackStrategies {
		const parts = 2
		dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
		a, b := openStore(t, dirA, ix), openStore(t, dirB, ix)
		pa := fbPlanner(t, ix, strategy, a, 1<<30, time.Hour, withRule)
		pb := fbPlanner(t, ix, strategy, b, 1<<30, time.Hour, withRule)
		var first [][][]int32
		for epoch := range 3 {
			sa, sb := servedEpoch(t, pa, epoch, parts), servedEpoch(t, pb, epoch, parts)
			for i := range parts {
				if !slices.Equal(sa[i], sb[i]) {
					t.Fatalf("%s epoch %d part %d: the same feedback gave two orders", strategy, epoch, i)
				}
			}
			first = append(first, sa)
			upload(t, a, epoch, sa)
			upload(t, b, epoch, sb)
		}
		if e2 := first[2]; slices.Equal(e2[0], first[1][0]) {
			t.Fatalf("%s: epochs 1 and 2 are the same order", strategy)
		}
		// The remount: a new store on A's directory holds no feedback, only
		// the saved orders; without them epochs 1 and 2 would fall back
		// after 100 ms.
		a.Close()
		a2 := openStore(t, dirA, ix)
		pa2 := fbPlanner(t, ix, strategy, a2, 1<<30, 100*time.Millisecond, withRule)
		for epoch := range 3 {
			got := servedEpoch(t, pa2, epoch, parts)
			for i := range parts {
				if !slices.Equal(got[i], first[epoch][i]) {
					t.Errorf("%s: after a remount epoch %d part %d is served in another order", strategy, epoch, i)
				}
			}
		}
		if n := a2.Stats().Fallbacks; n != 0 {
			t.Errorf("%s: the remount fell back %d times instead of loading the saved orders", strategy, n)
		}
	}
}

// An epoch whose previous epoch's feedback does not come is served after
// --feedback-timeout as a random reshuffle, counted, and saved: feedback
// arriving later does not change what was served.
func TestFeedbackTimeoutServesARandomReshuffleAndCountsIt(t *testing.T) {
	ix := fixedIndex()
	for _, strategy := range feedbackStrategies {
		const parts = 2
		dir := t.TempDir()
		s := openStore(t, dir, ix)
		pl := fbPlanner(t, ix, strategy, s, 1<<30, 50*time.Millisecond)
		e0 := servedEpoch(t, pl, 0, parts)
		upload(t, s, 0, e0[:1]) // part 1's feedback never comes
		e1 := servedEpoch(t, pl, 1, parts)
		checkOncePerEpoch(t, ix, strategy+" fallback", e1)
		if n := s.Stats().Fallbacks; n != 1 {
			t.Errorf("%s: %d fallbacks counted, want 1 (one epoch)", strategy, n)
		}
		if slices.Equal(e1[0], e0[0]) {
			t.Errorf("%s: the fallback epoch repeats epoch 0's order", strategy)
		}
		// Part 1 arrives late; a remount must still serve what was served.
		s.Close()
		s2 := openStore(t, dir, ix)
		upload(t, s2, 0, e0)
		pl2 := fbPlanner(t, ix, strategy, s2, 1<<30, time.Hour)
		again := servedEpoch(t, pl2, 1, parts)
		for i := range parts {
			if !slices.Equal(again[i], e1[i]) {
				t.Errorf("%s: part %d of the fallback epoch changed after its feedback arrived late", strategy, i)
			}
		}
	}
}

// grab and cdgrab load a part that fits in half the memory as one buffer
// of its blocks in file order, and serve the same records in the same order
// as when it does not fit and records are read one by one.
func TestGrabLoadsAPartThatFitsMemoryAsOneBufferOfItsBlocks(t *testing.T) {
	ix := fixedIndex()
	for _, strategy := range []string{"grab", "cdgrab"} {
		const parts = 2
		var orders [2][][]int32
		for k, mem := range []int64{1 << 30, 2000} {
			s := openStore(t, t.TempDir(), ix)
			pl := fbPlanner(t, ix, strategy, s, mem, time.Hour)
			e0 := servedEpoch(t, pl, 0, parts)
			upload(t, s, 0, e0)
			orders[k] = servedEpoch(t, pl, 1, parts)
			for i := range parts {
				p, err := pl.Plan(1, i, parts)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case k == 0 && (len(p.Buffers) != 1 || p.Buffers[0].Perm == nil || !slices.IsSorted(p.Buffers[0].Blocks)):
					t.Errorf("%s: a part that fits is not one buffer of its blocks in file order with a permutation", strategy)
				case k == 1 && p.Buffers[0].Records == nil:
					t.Errorf("%s: a part larger than the memory is not read record by record", strategy)
				}
			}
		}
		for i := range parts {
			if !slices.Equal(orders[0][i], orders[1][i]) {
				t.Errorf("%s part %d: the order depends on how the part is read", strategy, i)
			}
		}
	}
}

// corgipile-balance keeps corgipile's blocks and buffers and only reorders
// the records inside each buffer.
func TestCorgipileBalanceReordersOnlyInsideBuffers(t *testing.T) {
	ix := fixedIndex()
	s := openStore(t, t.TempDir(), ix)
	pl := fbPlanner(t, ix, "corgipile-balance", s, 1<<30, time.Hour)
	plain, err := NewPlanner(ix, Params{Strategy: "corgipile", Seed: 11, Buffer: BufferSize{Percent: 30}, MaxMemory: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	upload(t, s, 0, servedEpoch(t, pl, 0, 1))
	p, err := pl.Plan(1, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	q, err := plain.Plan(1, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Buffers) != len(q.Buffers) {
		t.Fatalf("%d buffers, corgipile has %d", len(p.Buffers), len(q.Buffers))
	}
	changed := false
	for g := range p.Buffers {
		if !slices.Equal(p.Buffers[g].Blocks, q.Buffers[g].Blocks) || p.Buffers[g].Perm == nil {
			t.Fatalf("buffer %d: blocks %v (corgipile %v), perm %v", g, p.Buffers[g].Blocks, q.Buffers[g].Blocks, p.Buffers[g].Perm)
		}
		perm := make([]uint32, q.Buffers[g].Count)
		permute(perm, q.Buffers[g].Seed)
		for k := range perm {
			changed = changed || uint32(p.Buffers[g].Perm[k]) != perm[k]
		}
	}
	if !changed {
		t.Error("feedback changed no buffer's order")
	}
}

// Reading a part to its end prefetches the next epoch; a feedback
// strategy's next epoch must not be planned then (its feedback cannot have
// come yet), or it would wait under the stream's lock and then fall back.
func TestReadingAnEpochToItsEndDoesNotPlanTheNextBeforeItsFeedback(t *testing.T) {
	f := newStreamFixture(t)
	for _, strategy := range feedbackStrategies {
		for _, mem := range []int64{streamMemory, 32 << 20} {
			s := openStore(t, t.TempDir(), f.ix)
			pl := fbPlanner(t, f.ix, strategy, s, mem, 50*time.Millisecond)
			ld := blockcache.NewLoader(f.ix, blockcache.LoaderOptions{MaxMemory: mem})
			var served [][]int32
			for epoch := range 3 {
				st, err := OpenStream(pl, ld, epoch, 0, 1)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := f.expected(t, st.Plan())
				if got := readAll(t, st, 64<<10, 0, st.Size()); !bytes.Equal(got, want) {
					t.Fatalf("%s epoch %d: the stream's bytes differ from the plan's at %d", strategy, epoch, firstDiff(got, want))
				}
				served = [][]int32{pl.RecordIDs(st.Plan())}
				st.Close()
				upload(t, s, epoch, served)
			}
			if n := s.Stats().Fallbacks; n != 0 {
				t.Errorf("%s memory %d: %d fallbacks: the next epoch was planned before its feedback", strategy, mem, n)
			}
		}
	}
}

// Sizes never wait for feedback: stat of a later epoch answers at once and
// agrees with the plan made once the feedback is in, also when the parts
// are padded to equal counts with records of differing sizes.
func TestSizeOfAFeedbackEpochNeedsNoFeedback(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	frames := make([]uint32, 300)
	for i := range frames {
		frames[i] = 50 + uint32(rng.IntN(100))
	}
	for _, c := range []struct {
		ix    *index.Index
		mem   int64
		equal bool
	}{{fixedIndex(), 1 << 30, false}, {sizedIndex(frames, 7), 1 << 30, true}, {sizedIndex(frames, 7), 4000, true}} {
		sizesAgree(t, c.ix, c.mem, c.equal)
	}
}

func sizesAgree(t *testing.T, ix *index.Index, mem int64, equal bool) {
	for _, strategy := range feedbackStrategies {
		s := openStore(t, t.TempDir(), ix)
		// A wait would hang the test.
		pl := fbPlanner(t, ix, strategy, s, mem, time.Hour, func(p *Params) { p.EqualParts = equal })
		sizes := make([]int64, 3)
		for i := range sizes {
			n, err := pl.Size(1, i, 3)
			if err != nil {
				t.Fatal(err)
			}
			sizes[i] = n
		}
		upload(t, s, 0, servedEpoch(t, pl, 0, 3))
		for i := range sizes {
			p, err := pl.Plan(1, i, 3)
			if err != nil {
				t.Fatal(err)
			}
			if p.Size != sizes[i] {
				t.Errorf("%s (memory %d, equal parts %v) part %d: Size said %d before the feedback, the plan has %d", strategy, mem, equal, i, sizes[i], p.Size)
			}
		}
		if n := s.Stats().Fallbacks; n != 0 {
			t.Errorf("%s: Size caused %d fallbacks", strategy, n)
		}
	}
}

// Unmounting ends a wait for feedback at once, and the random order it
// then serves is neither counted as a fallback nor saved: the next mount
// plans that epoch from its feedback.
func TestCloseEndsAWaitForFeedbackWithoutSavingAnOrder(t *testing.T) {
	ix := fixedIndex()
	dir := t.TempDir()
	s := openStore(t, dir, ix)
	pl := fbPlanner(t, ix, "grab", s, 1<<30, time.Hour) // a wait that is not ended hangs the test
	servedEpoch(t, pl, 0, 1)
	done := make(chan error)
	go func() {
		_, err := pl.Plan(1, 0, 1)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it wait; the test passes either way
	pl.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().Fallbacks; n != 0 {
		t.Errorf("%d fallbacks counted for a wait ended by unmount", n)
	}
	if _, ok := s.LoadOrder(pl.orderName(1, 0, 1)); ok {
		t.Error("the order served while unmounting was saved")
	}
}

// Fixed says, without waiting and without planning anything, whether an
// epoch's order is already fixed: epoch 0, an epoch whose previous
// epoch's feedback is complete, one already planned, or one whose orders
// an earlier mount saved; not a later epoch.
func TestFixedSaysWithoutWaitingWhichEpochsHaveTheirOrder(t *testing.T) {
	ix := fixedIndex()
	const parts = 2
	dir := filepath.Join(t.TempDir(), "fb")
	s := openStore(t, dir, ix)
	pl := fbPlanner(t, ix, "grab", s, 1<<30, 50*time.Millisecond)
	want := func(pl *Planner, what string, fixed map[int]bool) {
		t.Helper()
		for e, w := range fixed {
			if got := pl.Fixed(e, parts); got != w {
				t.Errorf("%s: Fixed(%d) = %v, want %v", what, e, got, w)
			}
		}
	}
	want(pl, "before anything is read", map[int]bool{0: true, 1: false, 5: false})
	upload(t, s, 0, servedEpoch(t, pl, 0, parts))
	want(pl, "after epoch 0's feedback", map[int]bool{0: true, 1: true, 2: false})
	servedEpoch(t, pl, 1, parts)
	want(pl, "after epoch 1 was planned", map[int]bool{1: true, 2: false})
	s.Close()
	s2 := openStore(t, dir, ix)
	pl2 := fbPlanner(t, ix, "grab", s2, 1<<30, 50*time.Millisecond)
	want(pl2, "after a remount (epoch 1's order saved)", map[int]bool{0: true, 1: true, 2: false})
	if n := s.Stats().Fallbacks + s2.Stats().Fallbacks; n != 0 {
		t.Errorf("Fixed planned an epoch: %d fallbacks", n)
	}
}
