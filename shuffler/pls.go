package shuffler

import (
	"fmt"
	"math"
	"slices"
)

// Partitions of local and pls: how epoch 0 assigns blocks to parts.
const (
	PartitionRandom     = "random"     // a seeded permutation of the blocks, cut by bytes
	PartitionContiguous = "contiguous" // the source order, cut by bytes
)

// checkpointEvery is the stride of the pls assignments kept as
// checkpoints: epoch e is stepped from the kept assignment nearest below
// it, at most checkpointEvery steps away once that checkpoint is known.
const checkpointEvery = 16

// maxAssignments bounds the pls assignments kept (checkpoints and the last
// epochs computed), 4 bytes a block each.
const maxAssignments = 8

// assignment is which blocks the K parts hold in one epoch (local, pls):
// part i holds blocks[off[i]:off[i+1]]. Its slices are never written once
// it is made: later epochs and sequences share them.
type assignment struct {
	epoch, parts int
	blocks       []int32
	off          []int
}

// Partitioned reports whether the parts of strategy keep their blocks
// across epochs (local, pls, and grab and cdgrab: grab.go), so that
// Params.Partition applies.
func Partitioned(strategy string) bool {
	return strategy == "local" || strategy == "pls" || recordSets(strategy)
}

// exchange is the fraction of its blocks a part sends away before each
// epoch: 0 for local.
func (pl *Planner) exchange() float64 {
	if pl.p.Strategy == "pls" {
		return pl.p.Exchange
	}
	return 0
}

// local serves the part's blocks of the epoch's assignment (local: the
// same every epoch; pls: after the exchanges) in a fresh CorgiPile order:
// a permutation of its blocks drawn from Derive(seed, 9, e, i, K), records
// shuffled inside each buffer.
func local(pl *Planner, seq *sequence, epoch, part, parts int) order {
	ids := slices.Clone(seq.perm[seq.off[part]:seq.off[part+1]])
	var g generator
	g.seed(Derive(pl.p.Seed, purposeLocalOrder, uint64(epoch), uint64(part), uint64(parts)))
	for i := len(ids) - 1; i > 0; i-- {
		j := g.below(uint64(i + 1))
		ids[i], ids[j] = ids[j], ids[i]
	}
	return order{Blocks: ids, Shuffle: true}
}

// checkExchange checks the parameters of local and pls.
func checkExchange(p Params) error {
	switch p.Partition {
	case "", PartitionRandom, PartitionContiguous:
	default:
		return fmt.Errorf("partition %q: want %s or %s", p.Partition, PartitionRandom, PartitionContiguous)
	}
	if !(p.Exchange >= 0 && p.Exchange <= 1) { // NaN fails too
		return fmt.Errorf("exchange %v: want a fraction Q with 0 ≤ Q ≤ 1", p.Exchange)
	}
	// Refused rather than ignored: an order that differs from the one
	// asked for would pass unnoticed.
	if p.Exchange != 0 && p.Strategy != "pls" {
		return fmt.Errorf("exchange %v: only strategy pls exchanges blocks (local is pls with exchange 0), not %s", p.Exchange, p.Strategy)
	}
	if p.Partition != "" && !Partitioned(p.Strategy) {
		return fmt.Errorf("partition %s: only strategies local and pls keep a partition, not %s", p.Partition, p.Strategy)
	}
	return nil
}

// assignment returns the assignment of epoch to parts parts: epoch 0's,
// or stepped from the nearest kept assignment at or below epoch and at or
// above the checkpoint below it (computed first if it is not kept). The
// checkpoints passed and the result are kept.
func (pl *Planner) assignment(epoch, parts int) *assignment {
	if pl.exchange() == 0 {
		epoch = 0 // local: the same every epoch
	}
	if a := pl.keptAssignment(parts, epoch, epoch); a != nil {
		return a
	}
	if epoch == 0 {
		a := pl.initial(parts)
		pl.keepAssignment(a)
		return a
	}
	base := epoch - epoch%checkpointEvery
	if base == epoch {
		base -= checkpointEvery
	}
	a := pl.keptAssignment(parts, base, epoch)
	if a == nil {
		a = pl.assignment(base, parts)
	}
	for a.epoch < epoch {
		a = pl.step(a)
		if a.epoch%checkpointEvery == 0 || a.epoch == epoch {
			pl.keepAssignment(a)
		}
	}
	return a
}

// keptAssignment returns the kept assignment of parts with the largest
// epoch in [lo, hi], or nil.
func (pl *Planner) keptAssignment(parts, lo, hi int) *assignment {
	c := &pl.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *assignment
	for _, a := range c.assigns {
		if a.parts == parts && a.epoch >= lo && a.epoch <= hi && (best == nil || a.epoch > best.epoch) {
			best = a
		}
	}
	return best
}

// keepAssignment keeps a, dropping the oldest kept beyond maxAssignments.
func (pl *Planner) keepAssignment(a *assignment) {
	c := &pl.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.assigns {
		if k.parts == a.parts && k.epoch == a.epoch {
			return // computed twice at once: the same either way
		}
	}
	c.assigns = append(c.assigns, a)
	c.seqBytes.Add(a.bytes())
	if len(c.assigns) > maxAssignments {
		c.seqBytes.Add(-c.assigns[0].bytes())
		c.assigns = slices.Delete(c.assigns, 0, 1)
	}
}

func (a *assignment) bytes() int64 { return int64(4*len(a.blocks) + 8*len(a.off)) }

// initial is epoch 0's assignment: the blocks in the order of the
// partition (a permutation drawn from Derive(seed, 7), or the source
// order), cut into parts balanced by bytes by balance.go's rule.
func (pl *Planner) initial(parts int) *assignment {
	n := len(pl.ix.Blocks)
	a := &assignment{parts: parts, off: make([]int, parts+1)}
	if pl.p.Partition == PartitionContiguous {
		a.blocks = span(0, n)
	} else {
		a.blocks = make([]int32, n)
		permute(a.blocks, Derive(pl.p.Seed, purposeAssign))
	}
	var total int64
	for _, id := range a.blocks {
		total += pl.blockBytes(id)
	}
	if total == 0 {
		for i := range parts + 1 {
			a.off[i], _ = slice(n, i, parts)
		}
		a.off[parts] = n
		return a
	}
	// Part i starts at the first block whose midpoint is at or past
	// i·T/K, as balance.go's cut.
	part := 0
	var sum int64
	for j, id := range a.blocks {
		w := pl.blockBytes(id)
		for part < parts-1 && 2*sum+w >= threshold(total, part+1, parts) {
			part++
			a.off[part] = j
		}
		sum += w
	}
	for part < parts {
		part++
		a.off[part] = n
	}
	return a
}

// step returns the assignment of the epoch after a's, by the rule in the
// package comment, in time linear in the blocks (and K log K).
func (pl *Planner) step(a *assignment) *assignment {
	e := uint64(a.epoch + 1)
	k := a.parts
	next := &assignment{epoch: a.epoch + 1, parts: k, off: a.off, blocks: slices.Clone(a.blocks)}
	q := pl.exchange()
	// 1. Each part picks the blocks it sends: the first c of a partial
	// Fisher–Yates of its list.
	sends := make([]int, k)
	var g generator
	for i := range k {
		list := next.blocks[a.off[i]:a.off[i+1]]
		n := len(list)
		c := min(n, max(0, int(math.Ceil(q*float64(n)-1e-9))))
		sends[i] = c
		g.seed(Derive(pl.p.Seed, purposePick, e, uint64(k), uint64(i)))
		for r := range c {
			j := r + int(g.below(uint64(n-r)))
			list[r], list[j] = list[j], list[r]
		}
	}
	// 2. Round r moves the r-th pick of every part sending more than r
	// blocks along a random cycle of those parts.
	order := make([]int, k)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return sends[y] - sends[x] })
	ring := make([]int, 0, k)
	for r := 0; len(order) > 0 && sends[order[0]] > r; r++ {
		ring = ring[:0]
		for _, p := range order {
			if sends[p] <= r {
				break
			}
			ring = append(ring, p)
		}
		if len(ring) < 2 {
			continue // a lone part keeps its pick
		}
		g.seed(Derive(pl.p.Seed, purposeRing, e, uint64(k), uint64(r)))
		for i := len(ring) - 1; i > 0; i-- {
			j := g.below(uint64(i + 1))
			ring[i], ring[j] = ring[j], ring[i]
		}
		// ring[x] sends to ring[x+1], the last to the first.
		at := func(x int) *int32 { return &next.blocks[a.off[ring[x]]+r] }
		last := *at(len(ring) - 1)
		for x := len(ring) - 1; x > 0; x-- {
			*at(x) = *at(x - 1)
		}
		*at(0) = last
	}
	return next
}
