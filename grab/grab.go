// Package grab computes example orders from the previous epoch's
// per-example gradients by herding (sign balancing): GraB (Lu et al., 2022)
// for one worker, online PairBalance, and CD-GraB (Cooper et al., NeurIPS
// 2023) for several workers that share one running sum. It is pure: orders
// are functions of the served order, the vectors and a seed; no I/O, no
// goroutines.
//
// Every function balances a sequence of vectors with signs s ∈ {+1, −1}
// chosen online so that the running sum r = Σ s·c stays small, then reorders
// the served records: those given +1 first, in the order they were served,
// then those given −1 in reverse order. A record's vectors arrive flattened:
// vecs[j*dim:(j+1)*dim] belongs to served[j]. Sums are kept in float64; the
// extra memory is O(dim) besides the returned order.
package grab

import (
	"math"
	"math/rand/v2"
)

// Rule chooses a sign from the running sum r and the next vector c.
type Rule int

const (
	// Deterministic gives +1 when ⟨r, c⟩ ≤ 0, that is when ‖r+c‖ ≤ ‖r−c‖
	// (the reference code's tie rule: the first vector gets +1).
	Deterministic Rule = iota
	// Randomized is the paper's RandomizedBalance (after Alweiss, Liu and
	// Sawhney): the vectors are scaled by one common factor so that the
	// largest has norm 1, and +1 is drawn with probability
	// p = (1 − ⟨r, c⟩)/2, clamped to [0, 1], from a PCG seeded by the seed
	// argument, so that the result is reproducible.
	Randomized
)

func (r Rule) String() string {
	switch r {
	case Deterministic:
		return "deterministic"
	case Randomized:
		return "randomized"
	}
	return "unknown"
}

// ParseRule parses "deterministic" or "randomized".
func ParseRule(s string) (Rule, bool) {
	switch s {
	case "deterministic":
		return Deterministic, true
	case "randomized":
		return Randomized, true
	}
	return 0, false
}

// balancer holds the running sum and draws the signs.
type balancer struct {
	rule  Rule
	r     []float64
	scale float64 // applied to every balanced vector (Randomized)
	pcg   rand.PCG
}

func newBalancer(dim int, rule Rule, seed uint64) *balancer {
	b := &balancer{rule: rule, r: make([]float64, dim), scale: 1}
	// The second PCG word is a fixed odd mix of the seed, so that seeds 0
	// and 1 give unrelated streams.
	b.pcg.Seed(seed, seed^0x9e3779b97f4a7c15)
	return b
}

// sign chooses the sign of the vector whose dot product with the running
// sum (both already scaled) is dot.
func (b *balancer) sign(dot float64) float64 {
	if b.rule != Randomized {
		if dot <= 0 {
			return 1
		}
		return -1
	}
	p := (1 - dot) / 2
	// 53 random bits as a float in [0, 1): the PCG-DXSM output is fixed by
	// its specification, so the draw never depends on the Go release.
	u := float64(b.pcg.Uint64()>>11) * 0x1p-53
	if u < p {
		return 1
	}
	return -1
}

// addCentred balances v − mean (scaled) and returns its sign.
func (b *balancer) addCentred(v []float32, mean []float64) float64 {
	r := b.r[:len(v)]
	mean = mean[:len(v)]
	var dot float64
	for k, x := range v {
		dot += r[k] * (float64(x) - mean[k])
	}
	s := b.sign(dot * b.scale)
	f := s * b.scale
	for k, x := range v {
		r[k] += f * (float64(x) - mean[k])
	}
	return s
}

// addDiff balances u − v (scaled) and returns its sign.
func (b *balancer) addDiff(u, v []float32) float64 {
	r := b.r[:len(u)]
	v = v[:len(u)]
	var dot float64
	for k, x := range u {
		dot += r[k] * (float64(x) - float64(v[k]))
	}
	s := b.sign(dot * b.scale)
	f := s * b.scale
	for k, x := range u {
		r[k] += f * (float64(x) - float64(v[k]))
	}
	return s
}

// unitScale returns 1/max‖c‖ (1 when every c is zero).
func unitScale(maxNorm2 float64) float64 {
	if maxNorm2 <= 0 {
		return 1
	}
	return 1 / math.Sqrt(maxNorm2)
}

// checkLen panics when vecs does not hold one vector per served record: a
// caller's bug, which an order must never silently paper over.
func checkLen(n, nvec, dim int) {
	if dim <= 0 || nvec != n*dim {
		panic("grab: vecs must hold len(served)*dim values, dim > 0")
	}
}

// Vectors writes the vector of the record at place j of part's served
// order into dst (dim values). It lets the orders read vectors from where
// they are kept (a store of the latest vector of every record) instead of
// a copy in served order.
type Vectors func(part, j int, dst []float32)

// sliceVectors reads vecs[part][j*dim:(j+1)*dim].
func sliceVectors(vecs [][]float32, dim int) Vectors {
	return func(part, j int, dst []float32) { copy(dst, vecs[part][j*dim:(j+1)*dim]) }
}

// GraB balances the centred vectors (centre: the mean of the given
// vectors, which the offline step knows exactly instead of the online
// algorithm's stale mean) and returns the new order of served: the records
// given +1 in served order, then the records given −1 in reverse order.
func GraB(served []int32, vecs []float32, dim int, rule Rule, seed uint64) []int32 {
	if len(served) > 0 {
		checkLen(len(served), len(vecs), dim)
	}
	return GraBOf(served, sliceVectors([][]float32{vecs}, dim), dim, rule, seed)
}

// GraBOf is GraB reading the vectors through vec (part 0).
func GraBOf(served []int32, vec Vectors, dim int, rule Rule, seed uint64) []int32 {
	n := len(served)
	out := make([]int32, n)
	if n == 0 {
		return out
	}
	if dim <= 0 {
		panic("grab: dim must be positive")
	}
	u := make([]float32, dim)
	mean := make([]float64, dim)
	for j := range n {
		vec(0, j, u)
		for k, x := range u {
			mean[k] += float64(x)
		}
	}
	for k := range mean {
		mean[k] /= float64(n)
	}
	b := newBalancer(dim, rule, seed)
	if rule == Randomized {
		var m float64
		for j := range n {
			vec(0, j, u)
			var s float64
			for k, x := range u {
				d := float64(x) - mean[k]
				s += d * d
			}
			m = max(m, s)
		}
		b.scale = unitScale(m)
	}
	left, right := 0, n-1
	for j, id := range served {
		vec(0, j, u)
		if b.addCentred(u, mean) > 0 {
			out[left] = id
			left++
		} else {
			out[right] = id
			right--
		}
	}
	return out
}

// PairBalance balances the differences of consecutive records, pairs
// (0,1), (2,3), …: the pair's difference u − v gets a sign, the first record
// of the pair that sign and the second the opposite one. The new order is
// the reorder step's (+1 in served order, −1 reversed); with an odd count
// the last record, which has no partner, keeps the last place. No centring
// is needed: a constant offset cancels in every difference.
func PairBalance(served []int32, vecs []float32, dim int, rule Rule, seed uint64) []int32 {
	parts := CDGraB([][]int32{served}, [][]float32{vecs}, dim, rule, seed)
	return parts[0]
}

// CDGraB is the order server of CD-GraB (Cooper et al., Algorithm 4): part
// i served served[i] with vectors vecs[i]; one running sum is shared by the
// flattened sequence of all parts' pair differences, taken in order of pair
// index, then part (pair 0 of parts 0..K−1, then pair 1 of each, …). Each
// part's next order comes from its own signs by the reorder step, with its
// odd last record kept last. Parts of unequal length take part in the
// rounds while they have pairs left; a shorter part simply drops out of the
// later rounds, so equal parts get exactly the paper's algorithm.
func CDGraB(served [][]int32, vecs [][]float32, dim int, rule Rule, seed uint64) [][]int32 {
	for i, s := range served {
		if len(s) > 0 {
			checkLen(len(s), len(vecs[i]), dim)
		}
	}
	return CDGraBOf(served, sliceVectors(vecs, dim), dim, rule, seed)
}

// CDGraBOf is CDGraB reading the vectors through vec.
func CDGraBOf(served [][]int32, vec Vectors, dim int, rule Rule, seed uint64) [][]int32 {
	out := make([][]int32, len(served))
	left := make([]int, len(served))
	right := make([]int, len(served))
	pairs := 0
	for i, s := range served {
		n := len(s)
		out[i] = make([]int32, n)
		if n == 0 {
			continue
		}
		right[i] = n - 1
		if n%2 == 1 {
			out[i][n-1] = s[n-1]
			right[i] = n - 2
		}
		pairs = max(pairs, n/2)
	}
	if pairs == 0 {
		return out
	}
	if dim <= 0 {
		panic("grab: dim must be positive")
	}
	u, w := make([]float32, dim), make([]float32, dim)
	b := newBalancer(dim, rule, seed)
	if rule == Randomized {
		var m float64
		for i, s := range served {
			for t := range len(s) / 2 {
				vec(i, 2*t, u)
				vec(i, 2*t+1, w)
				var sq float64
				for k, x := range u {
					d := float64(x) - float64(w[k])
					sq += d * d
				}
				m = max(m, sq)
			}
		}
		b.scale = unitScale(m)
	}
	for t := range pairs {
		for i, s := range served {
			if 2*t+1 >= len(s) {
				continue
			}
			vec(i, 2*t, u)
			vec(i, 2*t+1, w)
			first, second := s[2*t], s[2*t+1]
			if b.addDiff(u, w) < 0 {
				first, second = second, first
			}
			out[i][left[i]] = first
			out[i][right[i]] = second
			left[i]++
			right[i]--
		}
	}
	return out
}
