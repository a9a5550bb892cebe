package shuffler

import (
	"math/bits"
	"math/rand/v2"
)

// Seeds are derived with SplitMix64 (Steele, Lea and Flood, 2014) so that
// every (seed, purpose, epoch, part, parts, buffer) gets an independent
// stream even when the inputs differ in a single bit.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Purposes keep the seed streams of different decisions apart.
const (
	purposeBlocks  = 1 // the block permutation of an epoch
	purposeRecords = 2 // the record permutation inside a buffer
	purposeFull    = 3 // the record permutation of an epoch (full)
	purposeOnce    = 4 // the one record permutation (once)
	purposeWindow  = 5 // the draws of the sliding window
	purposePad     = 6 // the records repeated by EqualParts

	purposeAssign     = 7  // the random partition of epoch 0 (local, pls)
	purposePick       = 8  // the blocks a part sends (pls)
	purposeLocalOrder = 9  // the block order of a part in an epoch (local, pls)
	purposeRing       = 10 // the cycle of a round of exchanges (pls)
	purposeReservoir  = 11 // the draws of a part's reservoir in an epoch (mrs)
)

// Derive mixes a seed with a list of integers: h = sm(seed), then
// h = sm(h ^ t) for each t in turn, where sm is SplitMix64.
func Derive(seed uint64, tags ...uint64) uint64 {
	h := splitmix64(seed)
	for _, t := range tags {
		h = splitmix64(h ^ t)
	}
	return h
}

// generator is a PCG (math/rand/v2's PCG-DXSM, whose output is fixed by its
// specification) seeded from one 64-bit seed.
type generator struct{ pcg rand.PCG }

func (g *generator) seed(s uint64) { g.pcg.Seed(s, splitmix64(s)) }

// below returns a uniform integer in [0, n), n > 0, by Lemire's multiply and
// reject method, written here so that the result never depends on how a Go
// release implements rand.Uint64N.
func (g *generator) below(n uint64) uint64 {
	hi, lo := bits.Mul64(g.pcg.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(g.pcg.Uint64(), n)
		}
	}
	return hi
}

// permute fills p with a uniform permutation of 0..len(p)-1 by Fisher–Yates.
func permute[T ~int32 | ~uint32](p []T, seed uint64) {
	for i := range p {
		p[i] = T(i)
	}
	var g generator
	g.seed(seed)
	for i := len(p) - 1; i > 0; i-- {
		j := g.below(uint64(i + 1))
		p[i], p[j] = p[j], p[i]
	}
}
