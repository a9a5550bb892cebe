package shuffler

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/corgifs/corgifs/grab"
)

// Feedback strategies order epoch e+1 from the vectors the trainer wrote
// back for epoch e (one per served record: a per-example gradient or a
// sketch of it), by herding (package grab):
//
//   - grab: part i of K keeps a set of blocks as local does (epoch 0's
//     assignment, --partition), and its records are permuted one by one.
//     Epoch 0 is a random reshuffle of the part's records; epoch e+1 is
//     GraB over the part's vectors of epoch e, centred (with K > 1 every
//     part balances alone: the paper's ID-GraB).
//   - cdgrab: the same sets; epoch e+1 is CD-GraB (Cooper et al., NeurIPS
//     2023, Algorithm 4): one running sum over all K parts' pair
//     differences, pairs in order of pair index, then part.
//   - corgipile-balance: corgipile's blocks and buffers; the records of a
//     buffer are ordered by PairBalance over their latest vectors, starting
//     from corgipile's random permutation, records without a vector keeping
//     their random place.
//
// An order is a pure function of persisted state. The orders of all K
// parts of epoch e+1 are computed at once, when the first plan of that
// epoch is asked for: from the orders saved for it (Feedback.LoadOrder),
// else from epoch e's feedback, once every part of epoch e has arrived. If
// it does not arrive within Params.FeedbackTimeout, epoch e+1 is a random
// reshuffle (logged and counted). Whatever was computed is saved
// (Feedback.SaveOrder), so a remount serves the same bytes. Only Acquire
// waits: sizes do not depend on the order (a part's records are the same
// whatever their order), so Size computes them without feedback, and a
// stream prefetches the next epoch only once its feedback is complete.
//
// grab and cdgrab read like full, single records in any order, but when a
// part fits in one buffer of the memory budget (--max-memory / 2) it is
// one buffer of all its blocks, loaded whole in block order once per
// epoch, its records then served in the balanced order from memory.

// Feedback is the order server's store as feedback strategies read it
// (package feedback's Store). Its methods are safe for concurrent use.
type Feedback interface {
	// Epoch returns the served record ids of part of parts in epoch and
	// their vectors (len(ids)·dim values) in served order, if all arrived.
	Epoch(epoch, part, parts int) (ids []int32, vecs []float32, dim int, ok bool)
	// Dim is the dimension of the vectors, 0 before any arrived.
	Dim() int
	// LatestInto copies the latest vector of record id into dst (Dim
	// values) and returns the epoch it came from, or -1 if none.
	LatestInto(dst []float32, id int32) int
	// Complete reports whether every part of epoch arrived.
	Complete(epoch, parts int) bool
	// WaitEpoch waits at most timeout for every part of epoch to arrive.
	WaitEpoch(ctx context.Context, epoch, parts int, timeout time.Duration) bool
	SaveOrder(name string, ids []int32) error
	LoadOrder(name string) ([]int32, bool)
	// CountFallback counts an epoch served as a random reshuffle because
	// its feedback did not arrive in time.
	CountFallback()
}

// DefaultFeedbackTimeout is how long the plan of an epoch waits for the
// previous epoch's feedback.
const DefaultFeedbackTimeout = 60 * time.Second

// Purposes of the feedback strategies' draws (rand.go keeps 1–10).
const (
	purposeReshuffle = 20 // a part's random record order (epoch 0, fallback)
	purposeBalance   = 21 // the draws of the randomized balance rule
)

// IsFeedback reports whether strategy orders epochs from the trainer's
// feedback.
func IsFeedback(strategy string) bool {
	return strategy == "grab" || strategy == "cdgrab" || strategy == "corgipile-balance"
}

// recordSets reports whether strategy gives parts local's sets of blocks
// and orders their records one by one.
func recordSets(strategy string) bool { return strategy == "grab" || strategy == "cdgrab" }

// fbOrders are the orders feedback gave the K parts of one epoch. For grab
// and cdgrab orders[i] is part i's records in served order; for
// corgipile-balance the permutations of its buffers, one after the other
// (positions in the buffer, as Buffer.Perm). nil: the random order.
type fbOrders struct {
	orders [][]int32
}

func (f *fbOrders) bytes() int64 {
	var n int64
	for _, o := range f.orders {
		n += int64(4 * len(o))
	}
	return n
}

// gatherLimit is the largest buffer: two (the one served and the one
// prefetched) fit in MaxMemory, with 1/128 of it left for the whole pages
// that slabs of blocks read directly round every block out to
// (index.MinDirectBlock). It is also the largest part that grab and
// cdgrab load as one buffer.
func (pl *Planner) gatherLimit() int64 {
	lim := pl.p.MaxMemory / 2
	return lim - lim/128
}

// blocksOf returns the blocks of part of a partitioned sequence.
func blocksOf(seq *sequence, part int) []int32 {
	return seq.perm[seq.off[part]:seq.off[part+1]]
}

// partRecords returns the records of blocks, in ascending order.
func (pl *Planner) partRecords(blocks []int32) []int32 {
	sorted := slices.Sorted(slices.Values(blocks))
	var n int
	for _, b := range sorted {
		n += int(pl.ix.Blocks[b].Records)
	}
	out := make([]int32, 0, n)
	for _, b := range sorted {
		first := int32(pl.ix.BlockRecords(b))
		for r := range pl.ix.Blocks[b].Records {
			out = append(out, first+r)
		}
	}
	return out
}

// reshuffle is a part's random record order: epoch 0's, and every
// epoch's whose feedback did not come.
func (pl *Planner) reshuffle(seq *sequence, epoch, part, parts int) []int32 {
	recs := pl.partRecords(blocksOf(seq, part))
	var g generator
	g.seed(Derive(pl.p.Seed, purposeReshuffle, uint64(epoch), uint64(part), uint64(parts)))
	for i := len(recs) - 1; i > 0; i-- {
		j := g.below(uint64(i + 1))
		recs[i], recs[j] = recs[j], recs[i]
	}
	return recs
}

// grabOrder is the strategy of grab and cdgrab.
func grabOrder(pl *Planner, seq *sequence, epoch, part, parts int) order {
	var recs []int32
	if fb := seq.fb.Load(); fb != nil {
		recs = fb.orders[part]
	}
	if recs == nil {
		recs = pl.reshuffle(seq, epoch, part, parts)
	}
	// Block order is file order: the loader reads the part front to back.
	// The blocks also go with the records path, for padding (pad.go):
	// it must not depend on the order, which Size does not know.
	blocks := slices.Sorted(slices.Values(blocksOf(seq, part)))
	var bytes int64
	for _, b := range blocks {
		bytes += pl.blockBytes(b)
	}
	if bytes > pl.gatherLimit() {
		return order{Records: recs, Blocks: blocks}
	}
	return order{Blocks: blocks, Gather: recs}
}

// corgipileBalance is corgipile with the buffers' permutations from
// feedback.
func corgipileBalance(pl *Planner, seq *sequence, epoch, part, parts int) order {
	o := corgipile(pl, seq, epoch, part, parts)
	if fb := seq.fb.Load(); fb != nil {
		o.Perms = fb.orders[part]
	}
	return o
}

// gatherPerm returns the positions, among the records of blocks (in the
// order the loader puts them in a buffer: blocks in order, records in
// order), of the records of recs.
func (pl *Planner) gatherPerm(blocks, recs []int32) []int32 {
	firsts := make([]int32, len(blocks)) // first record of each block
	bases := make([]int32, len(blocks))  // its position in the buffer
	var at int32
	for j, b := range blocks {
		firsts[j] = int32(pl.ix.BlockRecords(b))
		bases[j] = at
		at += pl.ix.Blocks[b].Records
	}
	perm := make([]int32, len(recs))
	for k, r := range recs {
		j, found := slices.BinarySearch(firsts, r)
		if !found {
			j--
		}
		perm[k] = bases[j] + r - firsts[j]
	}
	return perm
}

// orderName names the saved order of part of parts in epoch.
func (pl *Planner) orderName(epoch, part, parts int) string {
	return fmt.Sprintf("%s-%s-e%d-p%d-of-%d", pl.p.Strategy, pl.p.BalanceRule, epoch, part, parts)
}

func (pl *Planner) logger() *slog.Logger {
	if pl.p.Logger != nil {
		return pl.p.Logger
	}
	return slog.Default()
}

// Ready reports whether the plans of epoch (of parts) can be made without
// waiting for feedback. Acquire and Plan of a feedback strategy's epoch
// wait, up to Params.FeedbackTimeout, for the previous epoch's feedback,
// and then fix the epoch's order for good (a fallback is saved): code that
// looks ahead (prefetch, eviction by next use) must ask Ready first and
// skip an epoch that is not, or it would wait, and lock the epoch to a
// random reshuffle before the trainer could send its feedback.
func (pl *Planner) Ready(epoch, parts int) bool {
	f := pl.p.Feedback
	return !IsFeedback(pl.p.Strategy) || f == nil || epoch == 0 || f.Complete(epoch-1, parts)
}

// Fixed reports, without waiting, whether the order of epoch (of parts)
// is already fixed: it can be planned now (Ready), was planned by this
// mount, or was saved by an earlier one. Feedback for an epoch whose order
// is not fixed cannot be for records the trainer read: the feedback
// channel refuses it rather than plan the epoch, which would wait for the
// previous epoch's feedback and then lock the epoch to a random order.
func (pl *Planner) Fixed(epoch, parts int) bool {
	if epoch < 0 || parts < 1 {
		return false
	}
	if pl.Ready(epoch, parts) {
		return true
	}
	c := &pl.cache
	c.mu.Lock()
	s := c.seqs[seqKey{epoch: epoch, parts: parts}]
	planned := s != nil && s.fb.Load() != nil
	c.mu.Unlock()
	if planned {
		return true
	}
	for i := range parts {
		if _, ok := pl.p.Feedback.LoadOrder(pl.orderName(epoch, i, parts)); !ok {
			return false
		}
	}
	return true
}

// feedbackOrders computes, once per sequence, the orders of the K parts
// of its epoch: see the comment at the top of this file. It may wait for
// feedback, holding no lock that other epochs, other parts' reads or Size
// need.
func (pl *Planner) feedbackOrders(seq *sequence, epoch, parts int) {
	seq.fbOnce.Do(func() {
		fb := &fbOrders{orders: make([][]int32, parts)}
		defer func() {
			seq.fb.Store(fb)
			pl.cache.seqBytes.Add(fb.bytes())
		}()
		f := pl.p.Feedback
		if epoch == 0 || f == nil {
			return
		}
		log := pl.logger().With("strategy", pl.p.Strategy, "epoch", epoch, "parts", parts)
		if d, ok := f.(Decider); ok {
			pl.decideOrders(seq, fb, epoch, parts, d, log)
			return
		}
		if pl.loadOrders(seq, fb, epoch, parts) {
			return
		}
		if !f.Complete(epoch-1, parts) {
			log.Info("waiting for the previous epoch's feedback", "previous_epoch", epoch-1, "timeout", pl.p.FeedbackTimeout)
		}
		if !f.WaitEpoch(pl.ctx, epoch-1, parts, pl.p.FeedbackTimeout) {
			if pl.ctx.Err() != nil {
				// Unmounting: the random order is neither counted nor
				// saved, so the next mount plans the epoch from feedback.
				log.Info("unmounting while waiting for the previous epoch's feedback")
				return
			}
			log.Warn("the previous epoch's feedback did not arrive in time: serving a random reshuffle",
				"waited", pl.p.FeedbackTimeout, "previous_epoch", epoch-1)
			f.CountFallback()
			if pl.p.Strategy == "corgipile-balance" {
				pl.balanceBuffers(seq, fb, epoch, parts, false)
			} else {
				for i := range parts {
					fb.orders[i] = pl.reshuffle(seq, epoch, i, parts)
				}
			}
			pl.saveOrders(fb, epoch, parts, log)
			return
		}
		switch pl.p.Strategy {
		case "grab", "cdgrab":
			pl.balanceParts(seq, fb, epoch, parts, log)
		case "corgipile-balance":
			pl.balanceBuffers(seq, fb, epoch, parts, true)
		}
		pl.saveOrders(fb, epoch, parts, log)
	})
}

// loadOrders fills fb with the saved orders of epoch, if every part has
// one that fits the part (a permutation of its records, or of its
// buffers' positions).
func (pl *Planner) loadOrders(seq *sequence, fb *fbOrders, epoch, parts int) bool {
	for i := range parts {
		o, ok := pl.p.Feedback.LoadOrder(pl.orderName(epoch, i, parts))
		if !ok || !pl.fits(seq, o, epoch, i, parts) {
			clear(fb.orders)
			return false
		}
		fb.orders[i] = o
	}
	return true
}

// fits reports whether o is an order of part i: a permutation of its
// records (grab, cdgrab) or of each of its buffers' positions.
func (pl *Planner) fits(seq *sequence, o []int32, epoch, part, parts int) bool {
	if recordSets(pl.p.Strategy) {
		return isPermutationOf(o, pl.partRecords(blocksOf(seq, part)))
	}
	p := pl.build(seq, epoch, part, parts) // seq.fb is not set yet: no perms
	at := 0
	for _, b := range p.Buffers[:pl.ownBuffers(p)] {
		if at+b.Count > len(o) || !isPermutationOf(o[at:at+b.Count], nil) {
			return false
		}
		at += b.Count
	}
	return at == len(o)
}

// ownBuffers is the number of buffers of p that hold the part's own
// records, before any padding.
func (pl *Planner) ownBuffers(p *Plan) int {
	n := len(p.Buffers)
	for left := p.Padding; left > 0 && n > 0; n-- {
		left -= p.Buffers[n-1].Count
	}
	return n
}

// isPermutationOf reports whether o is a permutation of set (sorted), or
// of 0..len(o)-1 when set is nil.
func isPermutationOf(o, set []int32) bool {
	if set != nil && len(o) != len(set) {
		return false
	}
	seen := make([]bool, len(o))
	for _, x := range o {
		k := int(x)
		if set != nil {
			j, found := slices.BinarySearch(set, x)
			if !found {
				return false
			}
			k = j
		}
		if k < 0 || k >= len(o) || seen[k] {
			return false
		}
		seen[k] = true
	}
	return true
}

func (pl *Planner) saveOrders(fb *fbOrders, epoch, parts int, log *slog.Logger) {
	for i, o := range fb.orders {
		if o == nil {
			continue
		}
		if err := pl.p.Feedback.SaveOrder(pl.orderName(epoch, i, parts), o); err != nil {
			// Served anyway: only a remount's bytes could then differ.
			log.Error("could not save an order: a remount may serve this epoch differently", "part", i, "err", err)
		}
	}
}

// servedLister is an optional capability of a Feedback, found by type
// assertion: the served record ids of an accepted upload, without its
// vectors. With it grab and cdgrab read every vector from LatestInto (when
// it is the previous epoch's) and hold no copy of the epoch's vectors;
// without it they read Epoch's copy (records × dim × 4 bytes, outside
// --max-memory, while the orders are computed): one part at a time for
// grab, all parts at once for cdgrab.
type servedLister interface {
	Served(epoch, part, parts int) ([]int32, bool)
}

// partFeedback is one part's feedback of the previous epoch.
type partFeedback struct {
	ids  []int32   // the part's own records in served order (no padding)
	vecs []float32 // len(ids)·dim values in served order; nil: LatestInto
}

// feedbackOf returns the feedback of part of parts in epoch, whose records
// are set (sorted), and its dimension; false if it does not cover the
// part's records exactly (it was read with other parameters).
func (pl *Planner) feedbackOf(epoch, part, parts int, set []int32) (partFeedback, int, bool) {
	f := pl.p.Feedback
	n := len(set)
	// Padding (EqualParts) follows the part's own records.
	if sl, ok := f.(servedLister); ok {
		ids, ok := sl.Served(epoch, part, parts)
		if dim := f.Dim(); ok && dim > 0 && len(ids) >= n && isPermutationOf(ids[:n], set) {
			v := make([]float32, dim)
			latest := true
			for _, id := range ids[:n] {
				if f.LatestInto(v, id) != epoch {
					latest = false // a newer upload (of another K) came
					break
				}
			}
			if latest {
				return partFeedback{ids: ids[:n]}, dim, true
			}
		}
	}
	ids, v, d, ok := f.Epoch(epoch, part, parts)
	if !ok || len(ids) < n || !isPermutationOf(ids[:n], set) {
		return partFeedback{}, 0, false
	}
	return partFeedback{ids: ids[:n], vecs: v[:n*d]}, d, true
}

// balanceParts computes grab's or cdgrab's orders of epoch from the
// feedback of epoch-1. A part whose feedback does not cover its records
// exactly gets a random reshuffle.
func (pl *Planner) balanceParts(seq *sequence, fb *fbOrders, epoch, parts int, log *slog.Logger) {
	f := pl.p.Feedback
	rule := pl.p.BalanceRule
	var feeds []partFeedback
	var which []int
	dim := 0
	vec := func(part, j int, dst []float32) {
		if p := &feeds[part]; p.vecs != nil {
			copy(dst, p.vecs[j*dim:(j+1)*dim])
		} else {
			f.LatestInto(dst, p.ids[j])
		}
	}
	for i := range parts {
		set := pl.partRecords(blocksOf(seq, i))
		p, d, ok := pl.feedbackOf(epoch-1, i, parts, set)
		if !ok || (dim != 0 && d != dim) {
			log.Warn("feedback does not match the part's records: serving it a random reshuffle", "part", i, "records", len(set))
			fb.orders[i] = pl.reshuffle(seq, epoch, i, parts)
			continue
		}
		dim = d
		if pl.p.Strategy == "grab" {
			feeds = append(feeds[:0], p) // one part's copy at a time
			fb.orders[i] = grab.GraBOf(p.ids, vec, dim, rule, Derive(pl.p.Seed, purposeBalance, uint64(epoch), uint64(parts), uint64(i)))
			continue
		}
		feeds, which = append(feeds, p), append(which, i)
	}
	if pl.p.Strategy == "cdgrab" && len(feeds) > 0 {
		served := make([][]int32, len(feeds))
		for k := range feeds {
			served[k] = feeds[k].ids
		}
		out := grab.CDGraBOf(served, vec, dim, rule, Derive(pl.p.Seed, purposeBalance, uint64(epoch), uint64(parts)))
		for k, i := range which {
			fb.orders[i] = out[k]
		}
	}
}

// balanceBuffers computes corgipile-balance's permutations of epoch's
// buffers: corgipile's, then with balance set PairBalance over the latest
// vectors of the records that have one, which take the places such
// records held in corgipile's permutation.
func (pl *Planner) balanceBuffers(seq *sequence, fb *fbOrders, epoch, parts int, balance bool) {
	f := pl.p.Feedback
	dim := f.Dim()
	var (
		perm   []uint32
		recs   []int32 // the buffer's records, in load order
		slots  []int   // positions of perm whose record has a vector
		served []int32
		vecs   []float32
	)
	for i := range parts {
		p := pl.build(seq, epoch, i, parts) // seq.fb is not set yet: corgipile's
		var out []int32
		for g, b := range p.Buffers[:pl.ownBuffers(p)] {
			perm = slices.Grow(perm[:0], b.Count)[:b.Count]
			if b.Shuffle {
				permute(perm, b.Seed)
			} else {
				for k := range perm {
					perm[k] = uint32(k)
				}
			}
			if balance && dim > 0 {
				recs = recs[:0]
				for _, blk := range b.Blocks {
					first := int32(pl.ix.BlockRecords(blk))
					for r := range pl.ix.Blocks[blk].Records {
						recs = append(recs, first+r)
					}
				}
				slots, served, vecs = slots[:0], served[:0], vecs[:0]
				for k, pos := range perm {
					vecs = slices.Grow(vecs, dim)[:len(vecs)+dim]
					if f.LatestInto(vecs[len(vecs)-dim:], recs[pos]) < 0 {
						vecs = vecs[:len(vecs)-dim]
						continue
					}
					slots, served = append(slots, k), append(served, int32(pos))
				}
				seed := Derive(pl.p.Seed, purposeBalance, uint64(epoch), uint64(parts), uint64(i), uint64(g))
				for k, pos := range grab.PairBalance(served, vecs, dim, pl.p.BalanceRule, seed) {
					perm[slots[k]] = uint32(pos)
				}
			}
			for _, pos := range perm {
				out = append(out, int32(pos))
			}
		}
		fb.orders[i] = out
	}
}

// RecordIDs returns the records plan serves, in served order (Index.Record
// ids, padding included): the order in which a trainer writes the part's
// feedback vectors.
func (pl *Planner) RecordIDs(plan *Plan) []int32 {
	out := make([]int32, 0, plan.Records)
	var perm []uint32
	for g := range plan.Buffers {
		b := &plan.Buffers[g]
		start := len(out)
		if b.Records != nil {
			out = append(out, b.Records...)
		} else {
			for _, id := range b.Blocks {
				first := int32(pl.ix.BlockRecords(id))
				for r := range pl.ix.Blocks[id].Records {
					out = append(out, first+r)
				}
			}
		}
		recs := out[start:]
		switch {
		case b.Perm != nil:
			tmp := slices.Clone(recs)
			for i, k := range b.Perm {
				recs[i] = tmp[k]
			}
		case b.Shuffle:
			perm = slices.Grow(perm[:0], len(recs))[:len(recs)]
			permute(perm, b.Seed)
			tmp := slices.Clone(recs)
			for i, k := range perm {
				recs[i] = tmp[k]
			}
		}
	}
	return out
}
