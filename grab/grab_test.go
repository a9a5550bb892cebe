package grab

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func ids(base int32, n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = base + int32(i)
	}
	return s
}

// Pairs of 2-d vectors, worked by hand (deterministic rule, +1 when
// ⟨r, d⟩ ≤ 0):
//
//	pair 0: 10=(1,0) 11=(0,0)  d=(1,0)   ⟨r,d⟩=0  → +1, r=(1,0)
//	pair 1: 12=(2,0) 13=(0,1)  d=(2,−1)  ⟨r,d⟩=2  → −1, r=(−1,1)
//	pair 2: 14=(1,1) 15=(0,0)  d=(1,1)   ⟨r,d⟩=0  → +1, r=(0,2)
//	16=(9,9) has no partner.
//
// Signs: 10+ 11− 12− 13+ 14+ 15−. The +1 records in served order (10 13 14),
// the −1 records reversed (15 12 11), and 16 keeps the last place.
func TestPairBalanceHandCase(t *testing.T) {
	vecs := []float32{1, 0, 0, 0, 2, 0, 0, 1, 1, 1, 0, 0, 9, 9}
	got := PairBalance(ids(10, 7), vecs, 2, Deterministic, 0)
	want := []int32{10, 13, 14, 15, 12, 11, 16}
	if !slices.Equal(got, want) {
		t.Fatalf("PairBalance = %v, want %v", got, want)
	}
	// Without the unpaired record the same signs give the same order.
	got = PairBalance(ids(10, 6), vecs[:12], 2, Deterministic, 0)
	if want := []int32{10, 13, 14, 15, 12, 11}; !slices.Equal(got, want) {
		t.Fatalf("PairBalance of 6 = %v, want %v", got, want)
	}
}

// 1-d values 3, −1, 1, −3, 0 (mean 0):
//
//	c=3  ⟨r,c⟩=0  → +1, r=3
//	c=−1 ⟨r,c⟩=−3 → +1, r=2
//	c=1  ⟨r,c⟩=2  → −1, r=1
//	c=−3 ⟨r,c⟩=−3 → +1, r=−2
//	c=0  ⟨r,c⟩=0  → +1, r=−2
//
// so the order is 0 1 3 4, then 2.
func TestGraBHandCase(t *testing.T) {
	got := GraB(ids(0, 5), []float32{3, -1, 1, -3, 0}, 1, Deterministic, 0)
	if want := []int32{0, 1, 3, 4, 2}; !slices.Equal(got, want) {
		t.Fatalf("GraB = %v, want %v", got, want)
	}
}

func TestGraBCentringIgnoresAConstantOffset(t *testing.T) {
	const n, dim = 301, 7
	rng := rand.New(rand.NewPCG(1, 2))
	vecs := make([]float32, n*dim)
	for i := range vecs {
		vecs[i] = float32(rng.NormFloat64())
	}
	shifted := slices.Clone(vecs)
	offset := []float32{5, -3, 0.5, 2, 8, -1, 4}
	for i := range shifted {
		shifted[i] += offset[i%dim]
	}
	for _, rule := range []Rule{Deterministic, Randomized} {
		a := GraB(ids(0, n), vecs, dim, rule, 9)
		b := GraB(ids(0, n), shifted, dim, rule, 9)
		if !slices.Equal(a, b) {
			t.Errorf("%v: an offset of every vector changed the order", rule)
		}
	}
	// The hand case shifted by 1 (values 4 0 2 −2 1, mean 1) is centred
	// back onto itself.
	got := GraB(ids(0, 5), []float32{4, 0, 2, -2, 1}, 1, Deterministic, 0)
	if want := []int32{0, 1, 3, 4, 2}; !slices.Equal(got, want) {
		t.Fatalf("GraB of shifted values = %v, want %v", got, want)
	}
}

// Two parts of 1-d values, pairs' differences A: 1, −1; B: −2, 5. In the
// paper's order (pair index, then part) A0 B0 A1 B1:
//
//	A0 d=1  ⟨r,d⟩=0  → +1, r=1
//	B0 d=−2 ⟨r,d⟩=−2 → +1, r=−1
//	A1 d=−1 ⟨r,d⟩=1  → −1, r=0
//	B1 d=5  ⟨r,d⟩=0  → +1, r=5
//
// A = 0 3 2 1, B = 10 12 13 11. Taken part by part instead (A0 A1 B0 B1),
// A1 would get +1 and A = 0 2 3 1.
func TestCDGraBPairsInOrderOfPairIndexThenPart(t *testing.T) {
	served := [][]int32{ids(0, 4), ids(10, 4)}
	vecs := [][]float32{{1, 0, 0, 1}, {0, 2, 5, 0}}
	got := CDGraB(served, vecs, 1, Deterministic, 0)
	want := [][]int32{{0, 3, 2, 1}, {10, 12, 13, 11}}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("part %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func randomVecs(rng *rand.Rand, n, dim int) []float32 {
	v := make([]float32, n*dim)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

func isPermutation(t *testing.T, what string, in, out []int32) {
	t.Helper()
	a, b := slices.Clone(in), slices.Clone(out)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		t.Fatalf("%s: output %v is not a permutation of %v", what, out, in)
	}
}

func TestEveryOutputIsAPermutationOfItsInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, rule := range []Rule{Deterministic, Randomized} {
		for _, n := range []int{0, 1, 2, 3, 4, 5, 64, 101} {
			served := make([]int32, n)
			for i := range served {
				served[i] = int32(rng.IntN(1 << 30))
			}
			vecs := randomVecs(rng, n, 3)
			isPermutation(t, "GraB", served, GraB(served, vecs, 3, rule, 1))
			isPermutation(t, "PairBalance", served, PairBalance(served, vecs, 3, rule, 1))
		}
		// Parts of unequal lengths, odd and even, one empty.
		lens := []int{7, 0, 12, 1, 5}
		served := make([][]int32, len(lens))
		vecs := make([][]float32, len(lens))
		for i, n := range lens {
			served[i] = ids(int32(1000*i), n)
			vecs[i] = randomVecs(rng, n, 3)
		}
		got := CDGraB(served, vecs, 3, rule, 1)
		for i := range served {
			isPermutation(t, "CDGraB", served[i], got[i])
			if n := len(served[i]); n%2 == 1 && got[i][n-1] != served[i][n-1] {
				t.Errorf("%v: part %d: the odd last record moved", rule, i)
			}
		}
	}
}

func TestRandomizedIsReproducibleFromItsSeed(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n, dim = 400, 5
	vecs := randomVecs(rng, n, dim)
	for name, f := range map[string]func([]int32, []float32, int, Rule, uint64) []int32{
		"GraB": GraB, "PairBalance": PairBalance,
	} {
		a := f(ids(0, n), vecs, dim, Randomized, 42)
		b := f(ids(0, n), vecs, dim, Randomized, 42)
		if !slices.Equal(a, b) {
			t.Errorf("%s: the same seed gave two orders", name)
		}
		if c := f(ids(0, n), vecs, dim, Randomized, 43); slices.Equal(a, c) {
			t.Errorf("%s: seeds 42 and 43 gave the same order of %d records", name, n)
		}
	}
}

// prefixMax is the herding bound of vecs taken in order: the largest ∞-norm
// of a prefix sum of the centred vectors.
func prefixMax(order []int32, vecs []float32, dim int) float64 {
	n := len(order)
	mean := make([]float64, dim)
	for j := range n {
		for k := range dim {
			mean[k] += float64(vecs[j*dim+k]) / float64(n)
		}
	}
	sum := make([]float64, dim)
	var m float64
	for _, id := range order {
		for k := range dim {
			sum[k] += float64(vecs[int(id)*dim+k]) - mean[k]
			m = max(m, sum[k], -sum[k])
		}
	}
	return m
}

// Balancing is what the orders are for: a few rounds of GraB or
// PairBalance leave prefix sums far smaller than a random order's.
func TestBalancedOrdersHaveSmallPrefixSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const n, dim = 2000, 8
	vecs := randomVecs(rng, n, dim)
	random := ids(0, n)
	rng.Shuffle(n, func(i, j int) { random[i], random[j] = random[j], random[i] })
	base := prefixMax(random, vecs, dim)
	gather := func(order []int32) []float32 {
		out := make([]float32, 0, n*dim)
		for _, id := range order {
			out = append(out, vecs[int(id)*dim:int(id+1)*dim]...)
		}
		return out
	}
	for name, f := range map[string]func([]int32, []float32, int, Rule, uint64) []int32{
		"GraB": GraB, "PairBalance": PairBalance,
	} {
		for _, rule := range []Rule{Deterministic, Randomized} {
			order := random
			for round := range 3 {
				order = f(order, gather(order), dim, rule, uint64(round))
			}
			got := prefixMax(order, vecs, dim)
			t.Logf("%s %v: %.2f (random %.2f)", name, rule, got, base)
			if got > base/3 {
				t.Errorf("%s %v: herding bound %.2f after 3 rounds, random order %.2f", name, rule, got, base)
			}
		}
	}
}
