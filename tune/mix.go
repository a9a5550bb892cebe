package tune

import (
	"math"
	"math/rand/v2"
	"slices"
)

// MixDraws is the number of random buffers Mix averages over at a buffer
// size. The standard error of the mean TV is then a few percent of it,
// well under the gap between buffer sizes a whole percent apart. Buffers
// of more than mixBlockBudget/MixDraws blocks get fewer draws, at least
// mixMinDraws, so that an estimate adds up at most about mixBlockBudget
// block histograms: a large buffer's TV varies less from draw to draw.
const (
	MixDraws       = 400
	mixMinDraws    = 32
	mixBlockBudget = 1 << 22
)

// Mix estimates the label mix of a buffer: the expected total variation
// distance between the label distribution of the records of n blocks,
// drawn at random without replacement from the N blocks as a buffer is,
// and the label distribution of all records. See the package comment.
type Mix struct {
	hist   [][]classCount // label histogram of every analysed block
	global []float64      // share of every class among all records
	all    int            // N: blocks of the dataset, at least len(hist)
	seed   uint64
}

type classCount struct {
	class int32
	n     int64
}

// Mix returns the label-mix estimator of the analysed blocks, for a
// dataset of all blocks (all > the blocks added when they are a sample of
// the dataset's). seed fixes the random buffers, so that the estimates
// are the same on every run.
func (a *Analysis) Mix(all int, seed uint64) *Mix {
	m := &Mix{all: max(all, len(a.ends)), seed: seed}
	in := make([]int64, len(a.classes))
	counts := make([]int64, len(a.classes))
	var present []int32
	var from int64
	for _, end := range a.ends {
		present = present[:0]
		for _, c := range a.labels[from:end] {
			if in[c] == 0 {
				present = append(present, c)
			}
			in[c]++
		}
		slices.Sort(present)
		h := make([]classCount, len(present))
		for i, c := range present {
			h[i] = classCount{c, in[c]}
			counts[c] += in[c]
			in[c] = 0
		}
		m.hist = append(m.hist, h)
		from = end
	}
	m.global = make([]float64, len(counts))
	for c, n := range counts {
		m.global[c] = float64(n) / float64(len(a.labels))
	}
	return m
}

// Blocks returns N, the blocks of the dataset.
func (m *Mix) Blocks() int { return m.all }

// ExpectedTV returns the expected TV distance between the label
// distribution of a buffer of n blocks and the global one, the mean over
// MixDraws seeded random buffers (fewer for very large buffers). When
// every block of the dataset was analysed, a buffer is n distinct blocks
// (a partial Fisher–Yates shuffle), and a buffer of all N blocks is the
// dataset: 0. When the
// analysed blocks are a sample of the dataset's, a buffer is n of them
// drawn with replacement, which overstates the TV a little (by up to the
// finite-population factor (N−n)/(N−1) of the variance it ignores): the
// estimate errs towards a larger buffer, never a smaller one.
//
// The draws of size n are prefixes of the draws of any larger size (draw
// r is seeded by (seed, r)), so that estimates at different sizes differ
// by the buffers' sizes, not by their luck.
func (m *Mix) ExpectedTV(n int) float64 {
	k := len(m.hist)
	if k == 0 || n <= 0 {
		return 0
	}
	sample := k < m.all
	if !sample && n >= k {
		return 0
	}
	idx := make([]int32, k)
	for i := range idx {
		idx[i] = int32(i)
	}
	swaps := make([]int32, 0, n)
	in := make([]int64, len(m.global))
	var present []int32
	pcg := rand.NewPCG(0, 0)
	rng := rand.New(pcg)
	draws := min(MixDraws, max(mixMinDraws, mixBlockBudget/n))
	var sum float64
	for r := range draws {
		pcg.Seed(m.seed, 0x6d6978<<32|uint64(r))
		var total int64
		present = present[:0]
		swaps = swaps[:0]
		for i := range n {
			var b int32
			if sample {
				b = int32(rng.IntN(k))
			} else {
				j := i + rng.IntN(k-i)
				idx[i], idx[j] = idx[j], idx[i]
				swaps = append(swaps, int32(j))
				b = idx[i]
			}
			for _, cc := range m.hist[b] {
				if in[cc.class] == 0 {
					present = append(present, cc.class)
				}
				in[cc.class] += cc.n
				total += cc.n
			}
		}
		// The classes the buffer lacks each add their global share, so
		// the sum runs over the classes present only (as in labelTV).
		tv := 1.0
		for _, c := range present {
			p := m.global[c]
			tv += math.Abs(float64(in[c])/float64(total)-p) - p
			in[c] = 0
		}
		sum += tv / 2
		// Undo the swaps, so that the next draw starts from the same
		// order and draw r is the same whatever n.
		for i := len(swaps) - 1; i >= 0; i-- {
			j := swaps[i]
			idx[i], idx[j] = idx[j], idx[i]
		}
	}
	return sum / float64(draws)
}

// NeededBlocks returns the smallest buffer, in blocks, of at least
// min(floor, N) whose expected TV is at most maxTV, by a binary search
// over n (the expected TV falls as the buffer grows). It returns N when
// no smaller buffer does.
func (m *Mix) NeededBlocks(maxTV float64, floor int) int {
	lo := min(max(floor, 1), m.all)
	if m.ExpectedTV(lo) <= maxTV {
		return lo
	}
	hi := m.all // a buffer of every block: the dataset's own mix
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if m.ExpectedTV(mid) <= maxTV {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}
