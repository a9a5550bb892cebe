package shuffler

import (
	"math/bits"
	"sort"
)

// The K parts of an epoch are balanced by bytes, not by unit counts: blocks
// of one dataset differ in length (every file ends in a short block), so
// parts of equal block counts could differ by nearly two full blocks.
//
// The rule: a unit (block, or record for record-level strategies) at
// position j of the epoch's sequence belongs to the part in whose ideal
// byte range [i·T/K, (i+1)·T/K) its midpoint falls, T the bytes of all
// units. So part i is the contiguous run of units between the cuts c(i)
// and c(i+1), c(i) being the first unit whose midpoint is at or past
// i·T/K. The bound follows: the unit before a cut has its midpoint before
// i·T/K and the unit at the cut at or past it, so the cut is within half
// a unit of i·T/K, and every part holds T/K bytes give or take half of
// each of the units at its two ends: within one largest unit of T/K.
//
// A cut is found by binary search over prefix sums kept every prefixStride
// units, then a scan of at most prefixStride units: O(log n + 64) per part,
// with 8 bytes per 64 units computed once per sequence, and only when a
// K > 1 asks for it (K = 1 is the whole sequence).

// prefixStride is the distance between the kept prefix sums.
const prefixStride = 64

// weight returns the bytes unit id of seq is served as: what plans count.
func (pl *Planner) weight(seq *sequence, id int32) int64 {
	if seq.records {
		return pl.recordBytes(id)
	}
	return pl.blockBytes(id)
}

// unitRecords returns the records of unit id of seq.
func (pl *Planner) unitRecords(seq *sequence, id int32) int64 {
	if seq.records {
		return 1
	}
	return int64(pl.blockRecords(id))
}

// prefixes computes seq's total bytes and its prefix sums, once.
func (pl *Planner) prefixes(seq *sequence) {
	seq.sums.Do(func() {
		seq.prefix = make([]int64, seq.n/prefixStride+1)
		var sum int64
		for j := range seq.n {
			if j%prefixStride == 0 {
				seq.prefix[j/prefixStride] = sum
			}
			sum += pl.weight(seq, seq.at(j))
		}
		if seq.n%prefixStride == 0 {
			seq.prefix[seq.n/prefixStride] = sum
		}
		seq.total = sum
		pl.cache.seqBytes.Add(int64(8 * len(seq.prefix)))
	})
}

// bounds returns the positions [lo, hi) in seq of the units of part of
// parts.
func (pl *Planner) bounds(seq *sequence, part, parts int) (lo, hi int) {
	if seq.off != nil {
		return seq.off[part], seq.off[part+1]
	}
	if parts == 1 {
		return 0, seq.n
	}
	pl.prefixes(seq)
	if seq.total == 0 {
		return slice(seq.n, part, parts)
	}
	return pl.cut(seq, part, parts), pl.cut(seq, part+1, parts)
}

// threshold returns ⌈2·T·i/K⌉: a unit starting at byte P with w bytes has
// its midpoint at or past i·T/K when 2P+w reaches it. 128-bit arithmetic,
// as T·K may not fit in 64 bits.
func threshold(total int64, i, parts int) int64 {
	hi, lo := bits.Mul64(uint64(2*total), uint64(i))
	q, r := bits.Div64(hi, lo, uint64(parts)) // i ≤ K: no overflow
	if r > 0 {
		q++
	}
	return int64(q)
}

// cut returns the position of the first unit of part i of parts: the
// first unit whose midpoint is at or past i·T/K (seq.n if none is).
func (pl *Planner) cut(seq *sequence, i, parts int) int {
	if i == 0 {
		return 0
	}
	if i >= parts {
		return seq.n
	}
	th := threshold(seq.total, i, parts)
	// A unit's doubled midpoint 2P+w lies between 2P and 2(P+w): units
	// before the last kept sum under th/2 all have theirs below th, and
	// the unit at the first kept sum reaching it has its own at or past.
	k := sort.Search(len(seq.prefix), func(k int) bool { return 2*seq.prefix[k] >= th })
	k = max(0, k-1)
	j, sum := k*prefixStride, seq.prefix[k]
	for ; j < seq.n; j++ {
		w := pl.weight(seq, seq.at(j))
		if 2*sum+w >= th {
			return j
		}
		sum += w
	}
	return seq.n
}

// most returns the number of records in the largest of the parts parts of
// seq, before padding: one pass over the sequence per K, remembered.
func (pl *Planner) most(seq *sequence, parts int) int64 {
	pl.prefixes(seq)
	seq.mu.Lock()
	defer seq.mu.Unlock()
	if m, ok := seq.most[parts]; ok {
		return m
	}
	var m int64
	if seq.off != nil {
		for j := range parts {
			var n int64
			for i := seq.off[j]; i < seq.off[j+1]; i++ {
				n += pl.unitRecords(seq, seq.at(i))
			}
			m = max(m, n)
		}
	} else if seq.total == 0 {
		for j := range parts {
			lo, hi := slice(seq.n, j, parts)
			var n int64
			for i := lo; i < hi; i++ {
				n += pl.unitRecords(seq, seq.at(i))
			}
			m = max(m, n)
		}
	} else {
		// Walk the units and the cuts together: O(units + K).
		var cur, sum int64
		part := 0
		next := threshold(seq.total, 1, parts)
		for j := range seq.n {
			id := seq.at(j)
			w := pl.weight(seq, id)
			for part < parts-1 && 2*sum+w >= next {
				m = max(m, cur)
				cur = 0
				part++
				next = threshold(seq.total, part+1, parts)
			}
			cur += pl.unitRecords(seq, id)
			sum += w
		}
		m = max(m, cur)
	}
	if seq.most == nil || len(seq.most) >= maxMost {
		seq.most = make(map[int]int64)
	}
	seq.most[parts] = m
	return m
}
