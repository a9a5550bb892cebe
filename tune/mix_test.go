package tune

import (
	"math"
	"testing"
)

// analysis cuts s into blocks of b records (the last one shorter), labels
// only.
func (s synth) analysis(t *testing.T, b int) *Analysis {
	t.Helper()
	a := NewAnalysis()
	for from := 0; from < len(s.labels); from += b {
		a.StartBlock()
		for i := from; i < min(from+b, len(s.labels)); i++ {
			if err := a.Record(s.labels[i], nil); err != nil {
				t.Fatal(err)
			}
		}
		a.EndBlock()
	}
	return a
}

// hypergeomTV is the exact expected TV distance of a buffer of n blocks
// drawn without replacement from n blocks of one label each, perClass
// blocks of each of k classes: the count X of one class in the buffer is
// hypergeometric, and TV = ½ Σ_c |X_c/n − 1/k|, so E TV = (k/2) E|X/n − 1/k|.
func hypergeomTV(k, perClass, n int) float64 {
	all := k * perClass
	lchoose := func(a, b int) float64 {
		x, _ := math.Lgamma(float64(a + 1))
		y, _ := math.Lgamma(float64(b + 1))
		z, _ := math.Lgamma(float64(a - b + 1))
		return x - y - z
	}
	var e float64
	for x := max(0, n-(all-perClass)); x <= min(n, perClass); x++ {
		p := math.Exp(lchoose(perClass, x) + lchoose(all-perClass, n-x) - lchoose(all, n))
		e += p * math.Abs(float64(x)/float64(n)-1/float64(k))
	}
	return float64(k) / 2 * e
}

// Blocks of one label each, k balanced classes: the buffer's label counts
// are hypergeometric, so the estimate must match the exact expectation,
// fall as the buffer grows, and be 0 for a buffer of every block.
func TestBufferTVOfOneLabelBlocksMatchesTheHypergeometricExpectation(t *testing.T) {
	for _, k := range []int{2, 10} {
		const perClass, b = 60, 38
		s := clusters(k*perClass*b, k, 0, 0, 1)
		m := s.analysis(t, b).Mix(k*perClass, 1)
		if m.Blocks() != k*perClass {
			t.Fatalf("k=%d: %d blocks, want %d", k, m.Blocks(), k*perClass)
		}
		prev := math.Inf(1)
		all := k * perClass
		for _, n := range []int{1, 4, 16, 32, all / 3, all / 2, all * 3 / 4, all - 1} {
			got, want := m.ExpectedTV(n), hypergeomTV(k, perClass, n)
			if math.Abs(got-want) > 0.05*want+0.002 {
				t.Errorf("k=%d, n=%d: expected TV %.4f, exact %.4f", k, n, got, want)
			}
			if got >= prev {
				t.Errorf("k=%d, n=%d: expected TV %.4f, not below the smaller buffer's %.4f", k, n, got, prev)
			}
			prev = got
		}
		if tv := m.ExpectedTV(k * perClass); tv != 0 {
			t.Errorf("k=%d: TV of a buffer of every block %g, want 0", k, tv)
		}
		// The smallest n meeting the threshold, by the exact values.
		want := 16
		for hypergeomTV(k, perClass, want) > 0.1 {
			want++
		}
		if n := m.NeededBlocks(0.1, 16); n < want-2 || n > want+2 {
			t.Errorf("k=%d: NeededBlocks(0.1) = %d, exact %d", k, n, want)
		}
		if a, b := m.ExpectedTV(37), m.ExpectedTV(37); a != b {
			t.Errorf("k=%d: two estimates of one buffer size differ: %g, %g", k, a, b)
		}
	}
}

// A shuffled order has blocks that are already mixed: 16 blocks of 38
// records hold a label distribution close to the global one, so the rule
// asks for no more than its floor, while the same records sorted by label
// ask for many more blocks.
func TestShuffledOrderHasASmallBufferTVAtSixteenBlocks(t *testing.T) {
	const k, blocks, b = 10, 1500, 38
	sorted := clusters(blocks*b, k, 0, 0, 3)
	shuf := sorted.shuffled(4)
	ms, mc := shuf.analysis(t, b).Mix(blocks, 1), sorted.analysis(t, b).Mix(blocks, 1)
	if tv := ms.ExpectedTV(16); tv > 0.06 {
		t.Errorf("shuffled: TV of 16 blocks %.3f, want under 0.06 (a random sample of 608 records)", tv)
	}
	if n := ms.NeededBlocks(0.1, 16); n != 16 {
		t.Errorf("shuffled: NeededBlocks(0.1, 16) = %d, want the floor 16", n)
	}
	if n := mc.NeededBlocks(0.1, 16); n < 100 {
		t.Errorf("sorted: NeededBlocks(0.1, 16) = %d, want over 100 (one-label blocks)", n)
	}
}

// When the blocks analysed are a sample of the dataset's, a buffer is drawn
// with replacement from them: its TV is no smaller than without
// replacement, and not 0 for a buffer as large as the sample.
func TestBufferTVOfASampleErrsTowardsALargerBuffer(t *testing.T) {
	const k, perClass, b = 10, 50, 20
	a := clusters(k*perClass*b, k, 0, 0, 5).analysis(t, b)
	whole, sample := a.Mix(k*perClass, 1), a.Mix(4*k*perClass, 1)
	for _, n := range []int{16, 100, 400} {
		if w, s := whole.ExpectedTV(n), sample.ExpectedTV(n); s < w {
			t.Errorf("n=%d: TV %.4f drawn from a sample, below %.4f drawn from the whole", n, s, w)
		}
	}
	if tv := sample.ExpectedTV(k * perClass); tv == 0 {
		t.Errorf("a sample's buffer of as many blocks as analysed has TV 0")
	}
}
