package shuffler

import "slices"

// pad makes p as long in records as the largest part of its epoch
// (Params.EqualParts), with records no larger than the dataset's average
// frame, so that padding never adds more than that average per record:
//
//  1. M is the record count of the largest of the K parts, d = M − n the
//     records p lacks.
//  2. The padding records are the part's own records of at most the
//     average frame length (index bytes / records, rounded down), each at
//     most once, drawn with the seed Derive(seed, 6, epoch, part, K).
//  3. If the part has fewer such records than d (it holds less than half
//     of M, or is empty because K exceeds the blocks), the rest are the
//     records of at most that length that follow the part's share in the
//     epoch's sequence (the next parts' blocks or records, in order),
//     wrapping around the epoch once.
//  4. If the whole epoch holds fewer than d of them, the list repeats.
//
// The padding follows the part's records in buffers of at most the buffer
// target of the padded part, read like any other buffer, its records
// shuffled inside each buffer when the strategy shuffles buffers.
func (pl *Planner) pad(p *Plan, seq *sequence, o order) {
	want := int(pl.most(seq, p.Parts) - p.Records)
	if want <= 0 || pl.ix.Records == 0 {
		return
	}
	avg := pl.ix.Bytes / pl.ix.Records
	small := func(r int32) bool { return int64(pl.ix.Frames[r]) <= avg }
	var chosen []int32
	// The records of unit u (a block or a record) that may pad, until
	// chosen holds limit.
	add := func(u int32, records bool, limit int) {
		if records {
			if small(u) && len(chosen) < limit {
				chosen = append(chosen, u)
			}
			return
		}
		first := int32(pl.ix.BlockRecords(u))
		for r := first; r < first+pl.ix.Blocks[u].Records && len(chosen) < limit; r++ {
			if small(r) {
				chosen = append(chosen, r)
			}
		}
	}
	own, records := o.Blocks, false
	if o.Records != nil && o.Blocks == nil { // grab's blocks hold its records (grab.go)
		own, records = o.Records, true
	}
	for _, u := range own {
		add(u, records, len(pl.ix.Frames))
	}
	// A partial Fisher–Yates draw of distinct own records.
	var g generator
	g.seed(Derive(pl.p.Seed, purposePad, uint64(p.Epoch), uint64(p.Part), uint64(p.Parts)))
	k := min(want, len(chosen))
	for i := range k {
		j := i + int(g.below(uint64(len(chosen)-i)))
		chosen[i], chosen[j] = chosen[j], chosen[i]
	}
	chosen = slices.Grow(chosen[:k:k], want-k)
	_, hi := pl.bounds(seq, p.Part, p.Parts)
	for i := 0; i < seq.n && len(chosen) < want; i++ {
		add(seq.at((hi+i)%seq.n), seq.records, want)
	}
	if len(chosen) == 0 {
		return // no record is as small as the average: cannot be
	}
	for i := 0; len(chosen) < want; i++ {
		chosen = append(chosen, chosen[i])
	}

	// Buffers of at most the target of the padded part (an empty part's
	// own target would be one byte), shuffled as the part's are: borrowed
	// records come in source order within their blocks.
	var padBytes int64
	for _, r := range chosen {
		padBytes += int64(pl.ix.Frames[r])
	}
	p.Target, p.Capped = pl.target(p.Size + padBytes) // no smaller than before
	start := 0
	var size int64
	flush := func(end int) {
		b := Buffer{Records: chosen[start:end:end], Size: size, Count: end - start, Start: p.Size, Shuffle: o.Shuffle}
		b.Seed = Derive(pl.p.Seed, purposeRecords, uint64(p.Epoch), uint64(p.Part), uint64(p.Parts), uint64(len(p.Buffers)))
		p.Buffers = append(p.Buffers, b)
		p.Size += size
		p.Records += int64(b.Count)
		start, size = end, 0
	}
	for i, r := range chosen {
		n := int64(pl.ix.Frames[r])
		if i > start && size+n > p.Target {
			flush(i)
		}
		size += n
	}
	flush(len(chosen))
	p.Padding = want
}
