package shuffler

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Plans are shared. The K parts of an epoch are shares of one sequence of
// units: the epoch's block permutation (corgipile, block), its record
// permutation (full; once has one for all epochs), the source order
// (none, window), or the epoch's assignment of blocks to K parts (local,
// pls: one sequence per epoch and K). A sequence is computed once and kept while a plan made
// from it is open, then among the last idleSequences unused ones. The plan
// of a part is made from its sequence in time and memory proportional to
// the part, and shared by every open of that part until the last closes.
//
// So the memory of plans is 4 bytes a unit (block or record) for each
// epoch with an open part (and 8 bytes per 64 units for the byte balance of
// its parts, balance.go), plus as much for each of the idleSequences
// kept, plus the open parts' own plans (a Buffer per buffer, 4 bytes per
// record of window and of padding), plus maxSizes remembered part sizes.
// Local and pls also keep up to maxAssignments assignments of blocks to
// parts (pls.go), 4 bytes a block each; a sequence of theirs shares an
// assignment's memory, and SequenceBytes counts it once for each holder.
// A feedback strategy's sequence also holds its epoch's orders (grab.go),
// 4 bytes a record.
// It is outside --max-memory, which counts loaded blocks; Stats reports it.

// idleSequences is how many sequences no open plan uses are kept: the
// epoch being read and the next one, which stat and prefetch ask for
// before any part of it is opened.
const idleSequences = 2

// maxSizes bounds the part sizes remembered for stat: about 2 MiB.
const maxSizes = 1 << 15

// maxMost bounds the part counts K whose largest part a sequence remembers
// for EqualParts.
const maxMost = 64

// sequence is the order of the units (blocks or records) that the parts of
// an epoch share.
type sequence struct {
	key     seqKey
	records bool    // units are records, else blocks
	perm    []int32 // nil: the source order
	// off, for local and pls, bounds the parts: part i is
	// perm[off[i]:off[i+1]] (their assignment, pls.go).
	off  []int
	n    int // units
	once sync.Once
	refs int // under planCache.mu: open plans and builds using it

	// Byte balance of the parts (balance.go), computed at the first K > 1.
	sums   sync.Once
	total  int64   // bytes of all units
	prefix []int64 // bytes of the units before position k·prefixStride

	mu   sync.Mutex
	most map[int]int64 // records in the largest part, by K (EqualParts)

	// The orders feedback gave the parts of a feedback strategy's epoch
	// (grab.go): computed once, by the first Acquire.
	fbOnce sync.Once
	fb     atomic.Pointer[fbOrders]
	// fbErr, set in fbOnce, refuses the epoch: its orders are not those
	// the other nodes serve (coordinate.go).
	fbErr error
}

// at returns the unit at position i of the sequence.
func (s *sequence) at(i int) int32 {
	if s.perm == nil {
		return int32(i)
	}
	return s.perm[i]
}

// share returns the units of part of parts, in order (balanced by bytes:
// balance.go). It is the sequence's own memory: never written.
func (pl *Planner) share(s *sequence, part, parts int) []int32 {
	lo, hi := pl.bounds(s, part, parts)
	if s.perm == nil {
		return span(lo, hi)
	}
	return s.perm[lo:hi:hi]
}

type partKey struct{ epoch, part, parts int }

// seqKey names a sequence: an epoch's (-1: the same for all epochs), and
// for local and pls the number of parts it is assigned to (else 0).
type seqKey struct{ epoch, parts int }

// shared is the plan of one part and the opens that hold it.
type shared struct {
	once sync.Once
	plan *Plan
	seq  *sequence
	err  error // the epoch is refused (sequence.fbErr)
	refs int   // under planCache.mu
}

// planCache is the Planner's table of shared plans.
type planCache struct {
	mu    sync.Mutex
	seqs  map[seqKey]*sequence
	idle  []*sequence // refs == 0, least recently used first
	parts map[partKey]*shared
	sizes map[partKey]int64
	// assigns are the kept pls assignments (pls.go), oldest first.
	assigns []*assignment

	sequenced, built atomic.Int64
	seqBytes         atomic.Int64
}

func (c *planCache) init() {
	c.seqs = make(map[seqKey]*sequence)
	c.parts = make(map[partKey]*shared)
	c.sizes = make(map[partKey]int64)
}

// PlanStats count the work of planning and the memory it holds.
type PlanStats struct {
	SequencesComputed int64 `json:"sequences_computed"` // epoch permutations
	PlansBuilt        int64 `json:"plans_built"`        // part plans
	SequenceBytes     int64 `json:"sequence_bytes"`     // held by the cached sequences
	OpenPlans         int   `json:"open_plans"`         // parts with a plan held open
}

// Stats returns the planner's counters.
func (pl *Planner) Stats() PlanStats {
	c := &pl.cache
	c.mu.Lock()
	open := len(c.parts)
	c.mu.Unlock()
	return PlanStats{SequencesComputed: c.sequenced.Load(), PlansBuilt: c.built.Load(), SequenceBytes: c.seqBytes.Load(), OpenPlans: open}
}

// Acquire returns the plan of part of parts in epoch, shared with every
// other holder of the same part, until Release. It is computed when no one
// holds it, from the epoch's sequence, itself computed once.
// For a feedback strategy it may first wait for the previous epoch's
// feedback (grab.go): callers that look ahead check Ready.
func (pl *Planner) Acquire(epoch, part, parts int) (*Plan, error) {
	if epoch < 0 || parts < 1 || part < 0 || part >= parts {
		return nil, fmt.Errorf("no part %d of %d in epoch %d", part, parts, epoch)
	}
	c := &pl.cache
	k := partKey{epoch, part, parts}
	c.mu.Lock()
	sh := c.parts[k]
	if sh == nil {
		sh = &shared{}
		c.parts[k] = sh
	}
	sh.refs++
	c.mu.Unlock()
	sh.once.Do(func() {
		sh.seq = pl.sequence(epoch, parts)
		if IsFeedback(pl.p.Strategy) {
			pl.feedbackOrders(sh.seq, epoch, parts) // may wait for feedback
			if sh.err = sh.seq.fbErr; sh.err != nil {
				return
			}
		}
		sh.plan = pl.build(sh.seq, epoch, part, parts)
	})
	if sh.err != nil {
		c.mu.Lock()
		if sh.refs--; sh.refs == 0 {
			delete(c.parts, k)
			c.releaseLocked(sh.seq)
		}
		c.mu.Unlock()
		return nil, sh.err
	}
	return sh.plan, nil
}

// Release gives back a plan returned by Acquire. When its last holder
// gives it back, it goes, and the sequence it was made from is kept
// among the idle ones. p must come from Acquire.
func (pl *Planner) Release(p *Plan) {
	if p == nil {
		return
	}
	c := &pl.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	k := partKey{p.Epoch, p.Part, p.Parts}
	sh := c.parts[k]
	if sh == nil || sh.plan != p {
		return
	}
	if sh.refs--; sh.refs > 0 {
		return
	}
	delete(c.parts, k)
	c.releaseLocked(sh.seq)
}

// Size returns the size of part of parts in epoch, as Plan would give it,
// remembering it so that the names a kernel looks up again cost nothing.
func (pl *Planner) Size(epoch, part, parts int) (int64, error) {
	c := &pl.cache
	k := partKey{epoch, part, parts}
	c.mu.Lock()
	n, ok := c.sizes[k]
	c.mu.Unlock()
	if ok {
		return n, nil
	}
	var p *Plan
	if IsFeedback(pl.p.Strategy) {
		// A part's size does not depend on the order feedback gives its
		// records: no waiting for it (grab.go).
		if epoch < 0 || parts < 1 || part < 0 || part >= parts {
			return 0, fmt.Errorf("no part %d of %d in epoch %d", part, parts, epoch)
		}
		seq := pl.sequence(epoch, parts)
		p = pl.build(seq, epoch, part, parts)
		c.mu.Lock()
		c.releaseLocked(seq)
		c.mu.Unlock()
	} else {
		var err error
		if p, err = pl.Plan(epoch, part, parts); err != nil {
			return 0, err
		}
	}
	c.mu.Lock()
	if len(c.sizes) >= maxSizes {
		clear(c.sizes)
	}
	c.sizes[k] = p.Size
	c.mu.Unlock()
	return p.Size, nil
}

// sequence returns the sequence of epoch (for parts parts: local and pls
// assign blocks to a given K) with a reference on it, computing it if it
// is not cached.
func (pl *Planner) sequence(epoch, parts int) *sequence {
	c := &pl.cache
	key := seqKey{epoch: epoch}
	switch {
	case Partitioned(pl.p.Strategy), IsFeedback(pl.p.Strategy):
		key.parts = parts // feedback comes per K
	case pl.p.Strategy == "once", pl.p.Strategy == "none", pl.p.Strategy == "window":
		key.epoch = -1 // the same every epoch
	}
	c.mu.Lock()
	s := c.seqs[key]
	if s == nil {
		s = &sequence{key: key}
		c.seqs[key] = s
	} else if s.refs == 0 {
		c.idle = slices.DeleteFunc(c.idle, func(t *sequence) bool { return t == s })
	}
	s.refs++
	c.mu.Unlock()
	s.once.Do(func() {
		s.records = strategies[pl.p.Strategy].records
		s.n = len(pl.ix.Blocks)
		if s.records {
			s.n = len(pl.ix.Frames)
		}
		if Partitioned(pl.p.Strategy) {
			a := pl.assignment(epoch, parts)
			s.perm, s.off = a.blocks, a.off
			c.sequenced.Add(1)
			c.seqBytes.Add(a.bytes())
			return
		}
		var seed uint64
		switch pl.p.Strategy {
		case "corgipile", "block", "corgipile-balance":
			seed = Derive(pl.p.Seed, purposeBlocks, uint64(epoch))
		case "full":
			seed = Derive(pl.p.Seed, purposeFull, uint64(epoch))
		case "once":
			seed = Derive(pl.p.Seed, purposeOnce)
		default:
			return // the source order
		}
		s.perm = make([]int32, s.n)
		permute(s.perm, seed)
		c.sequenced.Add(1)
		c.seqBytes.Add(int64(4 * s.n))
	})
	return s
}

// releaseLocked drops a reference on s; an unused sequence joins the idle
// ones, and the least recently used idle one beyond idleSequences goes.
func (c *planCache) releaseLocked(s *sequence) {
	if s.refs--; s.refs > 0 {
		return
	}
	c.idle = append(c.idle, s)
	if len(c.idle) > idleSequences {
		old := c.idle[0]
		c.idle = slices.Delete(c.idle, 0, 1)
		delete(c.seqs, old.key)
		c.seqBytes.Add(-int64(4*len(old.perm) + 8*len(old.prefix) + 8*len(old.off)))
		if fb := old.fb.Load(); fb != nil {
			c.seqBytes.Add(-fb.bytes())
		}
	}
}
