package shuffler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/corgifs/corgifs/index"
)

// exchangeCase is one setting of local or pls.
type exchangeCase struct {
	strategy, partition string
	q                   float64
}

func (c exchangeCase) String() string {
	return fmt.Sprintf("%s/%s/Q=%g", c.strategy, c.partition, c.q)
}

func exchangeCases() []exchangeCase {
	cs := []exchangeCase{{"local", PartitionRandom, 0}, {"local", PartitionContiguous, 0}}
	for _, q := range []float64{0, 0.1, 0.3, 0.7, 1} {
		for _, part := range []string{PartitionRandom, PartitionContiguous} {
			cs = append(cs, exchangeCase{"pls", part, q})
		}
	}
	return cs
}

func exchangePlanner(t testing.TB, ix *index.Index, c exchangeCase) *Planner {
	t.Helper()
	pl, err := NewPlanner(ix, Params{Strategy: c.strategy, Seed: 5, Buffer: BufferSize{Percent: 20}, MaxMemory: 1 << 30,
		Partition: c.partition, Exchange: c.q})
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// partBlocks returns the blocks of every part of epoch, in served order.
func partBlocks(t testing.TB, pl *Planner, epoch, parts int) [][]int32 {
	t.Helper()
	out := make([][]int32, parts)
	for i := range parts {
		p, err := pl.Plan(epoch, i, parts)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range p.Buffers {
			if !b.Shuffle || b.Records != nil {
				t.Fatalf("epoch %d part %d/%d: buffer not a shuffled group of blocks", epoch, i, parts)
			}
			out[i] = append(out[i], b.Blocks...)
		}
	}
	return out
}

func sorted(ids []int32) []int32 {
	s := slices.Clone(ids)
	slices.Sort(s)
	return s
}

// kept counts the blocks of now that were in before.
func kept(before, now []int32) int {
	in := make(map[int32]bool, len(before))
	for _, id := range before {
		in[id] = true
	}
	n := 0
	for _, id := range now {
		if in[id] {
			n++
		}
	}
	return n
}

// TestLocalAndPLSServeEveryBlockOncePerEpoch: the K parts of every epoch
// together hold every block exactly once, for several K, Q and both
// partitions, over epochs past the first checkpoint.
func TestLocalAndPLSServeEveryBlockOncePerEpoch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for name, ix := range balanceShapes(rng) {
		for _, c := range exchangeCases() {
			for _, k := range []int{1, 2, 3, 8, 25} {
				pl := exchangePlanner(t, ix, c)
				for _, e := range []int{0, 1, 2, 3, 17} {
					var all []int32
					for _, b := range partBlocks(t, pl, e, k) {
						all = append(all, b...)
					}
					slices.Sort(all)
					n := len(ix.Blocks)
					if len(all) != n || len(slices.Compact(all)) != n || all[0] != 0 || all[n-1] != int32(n-1) {
						t.Fatalf("%s %v K=%d epoch %d: %d blocks served, want each of %d once", name, c, k, e, len(all), n)
					}
				}
			}
		}
	}
}

// TestLocalAndPLSPartsStayBalanced states the bound: in epoch 0 every part
// holds T/K bytes within one largest block (balance.go's rule), and every
// part holds epoch 0's number of blocks in every later epoch (an exchange
// gives a part exactly as many blocks as it sends).
func TestLocalAndPLSPartsStayBalanced(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for name, ix := range balanceShapes(rng) {
		var maxBlock int64
		for id := range ix.Blocks {
			maxBlock = max(maxBlock, ix.BlockBytes(int32(id)))
		}
		for _, c := range exchangeCases() {
			for _, k := range []int{2, 3, 8, 25} {
				pl := exchangePlanner(t, ix, c)
				zero := partBlocks(t, pl, 0, k)
				for i, b := range zero {
					var bytes int64
					for _, id := range b {
						bytes += ix.BlockBytes(id)
					}
					if d := int64(k)*bytes - ix.Bytes; d > int64(k)*maxBlock || -d > int64(k)*maxBlock {
						t.Fatalf("%s %v K=%d part %d: %d bytes in epoch 0, want %d/%d ± %d", name, c, k, i, bytes, ix.Bytes, k, maxBlock)
					}
				}
				for e := 1; e < 5; e++ {
					for i, b := range partBlocks(t, pl, e, k) {
						if len(b) != len(zero[i]) {
							t.Fatalf("%s %v K=%d epoch %d part %d: %d blocks, epoch 0 had %d", name, c, k, e, i, len(b), len(zero[i]))
						}
					}
				}
			}
		}
	}
}

// TestPLSPartsKeepAtLeastOneMinusQOfTheirBlocks: from one epoch to the
// next, part i keeps at least (1−Q)·|blocks_i| − 1 of its blocks; Q = 0
// (and local) keeps all of them, in a new order every epoch.
func TestPLSPartsKeepAtLeastOneMinusQOfTheirBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for name, ix := range balanceShapes(rng) {
		for _, c := range exchangeCases() {
			for _, k := range []int{2, 3, 8} {
				pl := exchangePlanner(t, ix, c)
				prev := partBlocks(t, pl, 0, k)
				for e := 1; e < 6; e++ {
					now := partBlocks(t, pl, e, k)
					for i := range k {
						n := len(prev[i])
						got := kept(prev[i], now[i])
						if float64(got) < (1-c.q)*float64(n)-1 {
							t.Fatalf("%s %v K=%d epoch %d part %d kept %d of %d blocks, want ≥ (1−Q)·n − 1", name, c, k, e, i, got, n)
						}
						if c.q == 0 && got != n {
							t.Fatalf("%s %v K=%d epoch %d part %d kept %d of %d blocks, want all", name, c, k, e, i, got, n)
						}
						if c.q == 0 && n > 3 && slices.Equal(prev[i], now[i]) {
							t.Fatalf("%s %v K=%d epoch %d part %d: the same block order as the epoch before", name, c, k, e, i)
						}
					}
					prev = now
				}
			}
		}
	}
}

// TestPLSPartsSendCeilQOfTheirBlocksAndReceiveNoneOfTheirOwn: with equal
// parts every part sends exactly ⌈Q·n⌉ blocks and receives as many, none
// of its own: the blocks it no longer holds are exactly that many.
func TestPLSPartsSendCeilQOfTheirBlocksAndReceiveNoneOfTheirOwn(t *testing.T) {
	ix := sizedIndex(equalFrames(240*4, 100), 4) // 240 blocks of 400 bytes
	for _, q := range []float64{0.1, 0.3, 0.5, 0.7, 1} {
		for _, k := range []int{2, 3, 8} {
			pl := exchangePlanner(t, ix, exchangeCase{"pls", PartitionRandom, q})
			prev := partBlocks(t, pl, 0, k)
			for e := 1; e < 5; e++ {
				now := partBlocks(t, pl, e, k)
				moved := 0
				for i := range k {
					n := len(prev[i])
					want := int(math.Ceil(q*float64(n) - 1e-9))
					if got := n - kept(prev[i], now[i]); got != want {
						t.Fatalf("Q=%g K=%d epoch %d part %d: %d of %d blocks left, want ⌈Q·n⌉ = %d", q, k, e, i, got, n, want)
					}
					moved += want
				}
				// Where the blocks went: no part keeps a pick.
				if moved == 0 {
					t.Fatalf("Q=%g K=%d: nothing moved", q, k)
				}
				prev = now
			}
		}
	}
}

// TestPLSEpochComputedDirectlyEqualsSteppedEpoch: the plans are a pure
// function of (seed, K, Q, e): the same on two planners, the same whether
// epoch e is asked first (stepped from the checkpoints) or after every
// earlier epoch, and the same again after the kept assignments are gone.
func TestPLSEpochComputedDirectlyEqualsSteppedEpoch(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	ix := balanceShapes(rng)["16 files with tails"]
	for _, c := range exchangeCases() {
		const k = 5
		stepped := exchangePlanner(t, ix, c)
		var seen [][][]int32
		for e := range 40 {
			seen = append(seen, partBlocks(t, stepped, e, k))
		}
		if n := len(stepped.cache.assigns); n > maxAssignments {
			t.Fatalf("%v: %d assignments kept, want at most %d", c, n, maxAssignments)
		}
		for _, e := range []int{39, 0, 1, 15, 16, 17, 33, 3} {
			direct := exchangePlanner(t, ix, c)
			if got := partBlocks(t, direct, e, k); !slices.EqualFunc(got, seen[e], slices.Equal) {
				t.Fatalf("%v epoch %d: computed directly differs from stepped", c, e)
			}
			// The stepped planner, its epoch 3 long evicted.
			if got := partBlocks(t, stepped, e, k); !slices.EqualFunc(got, seen[e], slices.Equal) {
				t.Fatalf("%v epoch %d: asked again differs", c, e)
			}
			stepped.cache.mu.Lock()
			stepped.cache.assigns = nil
			clear(stepped.cache.seqs)
			stepped.cache.idle = nil
			stepped.cache.mu.Unlock()
			if got := partBlocks(t, stepped, e, k); !slices.EqualFunc(got, seen[e], slices.Equal) {
				t.Fatalf("%v epoch %d: after clearing the cache differs", c, e)
			}
		}
	}
}

// TestPLSWithQZeroIsLocal: pls with Q = 0 serves local's plans.
func TestPLSWithQZeroIsLocal(t *testing.T) {
	for _, part := range []string{PartitionRandom, PartitionContiguous} {
		a := exchangePlanner(t, fixedIndex(), exchangeCase{"local", part, 0})
		b := exchangePlanner(t, fixedIndex(), exchangeCase{"pls", part, 0})
		for e := range 3 {
			if x, y := partBlocks(t, a, e, 3), partBlocks(t, b, e, 3); !slices.EqualFunc(x, y, slices.Equal) {
				t.Fatalf("%s epoch %d: local %v, pls Q=0 %v", part, e, x, y)
			}
		}
	}
}

// TestContiguousPartitionGivesEachPartARunOfTheSource: with --partition
// contiguous part i of epoch 0 holds consecutive blocks, in order of i.
func TestContiguousPartitionGivesEachPartARunOfTheSource(t *testing.T) {
	for _, c := range []exchangeCase{{"local", PartitionContiguous, 0}, {"pls", PartitionContiguous, 0.3}} {
		strategy := c.strategy
		pl := exchangePlanner(t, fixedIndex(), c)
		next := int32(0)
		for i, b := range partBlocks(t, pl, 0, 4) {
			for j, id := range sorted(b) {
				if id != next {
					t.Fatalf("%s part %d block %d is %d, want %d", strategy, i, j, id, next)
				}
				next++
			}
		}
	}
}

// TestExchangeParametersAreChecked: Q outside [0, 1] and an unknown
// partition are refused with the bad value named.
func TestExchangeParametersAreChecked(t *testing.T) {
	for _, p := range []Params{
		{Strategy: "pls", Exchange: -0.1},
		{Strategy: "pls", Exchange: 1.5},
		{Strategy: "pls", Exchange: math.NaN()},
		{Strategy: "local", Partition: "striped"},
		{Strategy: "local", Exchange: 0.3},
		{Strategy: "corgipile", Partition: PartitionContiguous},
	} {
		p.Buffer, p.MaxMemory = BufferSize{Percent: 5}, 1<<30
		if _, err := NewPlanner(fixedIndex(), p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

// BenchmarkPLSStep steps the assignment of 1M blocks to 64 parts, Q = 0.3.
func BenchmarkPLSStep(b *testing.B) {
	ix := &index.Index{Root: "/big", BlockSize: 8 << 20, Files: []index.File{{Path: "f"}}}
	for i := range 1 << 20 {
		ix.Blocks = append(ix.Blocks, index.Block{Records: 1, Offset: int64(i) << 23, Len: 8 << 20})
	}
	pl, err := NewPlanner(ix, Params{Strategy: "pls", Seed: 1, Buffer: BufferSize{Percent: 5}, MaxMemory: 1 << 30, Exchange: 0.3})
	if err != nil {
		b.Fatal(err)
	}
	a := pl.initial(64)
	b.ResetTimer()
	for range b.N {
		a = pl.step(a)
	}
}

// TestPLSEqualPartsGivesEveryPartTheLargestCount: --equal-parts pads the
// parts of local and pls to their epoch's largest part, as it does for
// the other strategies.
func TestPLSEqualPartsGivesEveryPartTheLargestCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	ix := balanceShapes(rng)["400 small files"]
	for _, c := range exchangeCases() {
		pl, err := NewPlanner(ix, Params{Strategy: c.strategy, Seed: 5, Buffer: BufferSize{Percent: 20}, MaxMemory: 1 << 30,
			Partition: c.partition, Exchange: c.q, EqualParts: true})
		if err != nil {
			t.Fatal(err)
		}
		for e := range 3 {
			var counts []int64
			for i := range 7 {
				p, err := pl.Plan(e, i, 7)
				if err != nil {
					t.Fatal(err)
				}
				counts = append(counts, p.Records)
			}
			if slices.Min(counts) != slices.Max(counts) {
				t.Fatalf("%v epoch %d: padded parts hold %v records", c, e, counts)
			}
		}
	}
}

// TestPLSGolden pins the blocks of every part of the first epochs of
// the fixed index, in served order: a change to the rule or to its seeds
// changes the orders every node computes, so it must be deliberate.
func TestPLSGolden(t *testing.T) {
	for _, c := range []exchangeCase{{"local", PartitionRandom, 0}, {"pls", PartitionRandom, 0.3}, {"pls", PartitionContiguous, 1}} {
		pl := exchangePlanner(t, fixedIndex(), c)
		var got []string
		for e := range 3 {
			got = append(got, fmt.Sprint(partBlocks(t, pl, e, 3)))
		}
		if want := plsGolden[c.String()]; !slices.Equal(got, want) {
			t.Errorf("%v: got\n%q\nwant\n%q", c, got, want)
		}
	}
}

var plsGolden = map[string][]string{
	"local/random/Q=0": {
		"[[2 18 16 7 8 17 13] [3 19 4 12 6 15] [11 0 14 5 9 10 1]]",
		"[[13 2 17 18 7 16 8] [3 4 15 6 19 12] [1 0 5 10 11 9 14]]",
		"[[16 13 2 7 17 8 18] [15 3 12 4 6 19] [1 5 9 10 11 14 0]]",
	},
	"pls/random/Q=0.3": {
		"[[2 18 16 7 8 17 13] [3 19 4 12 6 15] [11 0 14 5 9 10 1]]",
		"[[6 2 16 18 12 9 8] [3 4 14 19 5 15] [1 0 13 7 11 10 17]]",
		"[[7 4 6 19 16 12 18] [1 3 15 5 14 17] [13 2 10 8 11 9 0]]",
	},
	"pls/contiguous/Q=1": {
		"[[4 3 2 1 6 5 0] [13 9 7 10 11 12 8] [15 19 14 18 16 17]]",
		"[[14 10 12 17 15 19 8] [4 3 1 5 18 0 16] [13 2 6 9 7 11]]",
		"[[3 11 18 9 4 0 5] [6 17 19 2 13 7 10] [15 16 8 12 1 14]]",
	},
}
