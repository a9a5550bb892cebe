package shuffler

// Multiplexed reservoir sampling (mrs) is Bismarck's shuffle (Feng, Kumar,
// Recht and Ré, SIGMOD 2012), the last baseline of the CorgiPile paper.
// Bismarck runs two workers at once on one model: an I/O worker scans the
// table in its stored order and keeps a reservoir of R tuples by reservoir
// sampling, taking a gradient step on every tuple that does not stay in it
// (the new tuple when it is not drawn, or the one it displaces); a memory
// worker loops over a second buffer, the reservoir the I/O worker left at
// the end of the previous epoch. At the end of an epoch the buffers swap.
//
// corgifs serves that as one file per part and epoch:
//
//  1. Part i of K holds a contiguous run of the source records, balanced
//     by bytes, in source order (as window's): Bismarck's I/O worker
//     reads the table as it is stored, which is what makes MRS need no
//     random I/O; a shuffled block order would be another strategy.
//  2. R is the number of records of the part's average size that fit in
//     the buffer target (--buffer, lowered by --max-memory as for every
//     strategy), at most half the part's N records: a reservoir that held
//     the whole part would serve nothing in epoch 0.
//  3. The scan of epoch e is Algorithm R with draws from
//     Derive(seed, 11, e, i, K): the first R records fill the slots; record
//     n ≥ R draws j uniform in [0, n]; if j < R it takes slot j and the
//     record there is dropped, else record n itself is dropped. The dropped
//     records of epoch e, D_e, in the order they are dropped, are N − R.
//  4. The memory worker's buffer in epoch e is B_e, the slots at the end
//     of epoch e−1's scan, in slot order (B_0 is empty: the first epoch
//     has no previous reservoir). Bismarck's memory worker loops over B_e
//     as often as it can while the scan runs; a file has one order, so
//     corgifs makes one pass, paced with the scan as if both workers ran
//     at constant speed: B_e's record j is served before the scan's step
//     ⌊j·N/|B_e|⌋.
//
// So epoch 0 serves N − R records and every later epoch N, but not each
// record once: epoch e serves D_e and B_e = R_{e−1}, the records kept by
// the previous scan, and keeps R_e for the next. What holds exactly, for
// every part and every e ≥ 0: D_e and R_e split the part's records (each
// record scanned in epoch e is served once, in epoch e or in epoch e+1),
// so a record is served 0, 1 or 2 times in one epoch, and epochs 0..E
// together serve every record E+1 times less the R still in the last
// reservoir. The K parts of an epoch are disjoint.
//
// Bismarck holds both buffers in memory. corgifs keeps no reservoir: the
// records a served buffer needs lie anywhere in the part (those displaced
// from the reservoir and those of the previous one), so a buffer of whole
// blocks would read most of the part's blocks. mrs is a record strategy,
// as window and full are: each record is read with its own pread when it
// is served, rather than by MRS's sequential scan, and cold storage makes
// it slow.

// mrs serves the part's records as multiplexed reservoir sampling does.
func mrs(pl *Planner, seq *sequence, epoch, part, parts int) order {
	src := pl.share(seq, part, parts)
	var bytes int64
	for _, r := range src {
		bytes += int64(pl.ix.Frames[r])
	}
	r := 0
	if len(src) > 0 {
		t, _ := pl.target(bytes)
		r = min(int(t/(bytes/int64(len(src))+1)), len(src)/2)
	}
	seed := func(e int) uint64 {
		return Derive(pl.p.Seed, purposeReservoir, uint64(e), uint64(part), uint64(parts))
	}
	var kept []int32
	if epoch > 0 {
		kept = reservoir(src, r, seed(epoch-1), nil)
	}
	return order{Records: multiplex(src, r, seed(epoch), kept)}
}

// reservoir runs Algorithm R with R = r slots over src with draws from
// seed, calling drop, if set, for every record that does not stay, and
// returns the slots at the end.
func reservoir(src []int32, r int, seed uint64, drop func(n int, id int32)) []int32 {
	slots := make([]int32, 0, r)
	var g generator
	g.seed(seed)
	for n, id := range src {
		if n < r {
			slots = append(slots, id)
			continue
		}
		if j := g.below(uint64(n + 1)); j < uint64(r) {
			id, slots[j] = slots[j], id
		}
		if drop != nil {
			drop(n, id)
		}
	}
	return slots
}

// multiplex returns the served order of one epoch: the records dropped by
// the scan of src with r slots and draws from seed, with those of kept
// served in between, paced with the scan (kept[j] before step
// ⌊j·len(src)/len(kept)⌋).
func multiplex(src []int32, r int, seed uint64, kept []int32) []int32 {
	out := make([]int32, 0, len(src)-r+len(kept))
	n, b := int64(len(src)), int64(len(kept))
	j := int64(0)
	// The memory worker's records due by scan step s: j·N < (s+1)·b.
	due := func(s int) {
		for ; j < b && j*n < int64(s+1)*b; j++ {
			out = append(out, kept[j])
		}
	}
	// Steps that fill the reservoir drop nothing, but the memory worker
	// serves on.
	for s := range min(r, len(src)) {
		due(s)
	}
	reservoir(src, r, seed, func(s int, id int32) {
		due(s)
		out = append(out, id)
	})
	due(len(src))
	return out
}

// ExactlyOnce reports whether the K parts of an epoch of strategy together
// serve every record of the source exactly once (EqualParts padding
// aside): every strategy but mrs, which serves what its reservoir lets
// fall out and what it kept the epoch before.
func ExactlyOnce(strategy string) bool { return strategy != "mrs" }
