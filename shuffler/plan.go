// Package shuffler decides the order in which records are served and serves
// it. Planning is pure: from the index, the strategy, its parameters and the
// seed it says which blocks part i of K holds in epoch e, how they are grouped
// into buffers, and which permutation the records of each buffer get. A
// Stream (stream.go) then serves one planned part through a blockcache.Loader.
//
// Randomness is reproducible by construction. Every decision draws from a
// PCG (math/rand/v2's PCG-DXSM) seeded with Derive(seed, purpose, ...), where
// Derive folds its integers in with SplitMix64: the block permutation of
// epoch e uses Derive(seed, 1, e), the records of buffer g of part i of K use
// Derive(seed, 2, e, i, K, g). Permutations are an in-repo Fisher–Yates that
// draws bounded integers by Lemire's method, so an order never depends on
// the Go release. Golden tests pin orders of a fixed index.
package shuffler

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/dustin/go-humanize"
)

// BufferSize is the --buffer setting: an absolute size or a share of a part.
type BufferSize struct {
	Bytes   int64
	Percent float64 // used when Bytes is 0
}

// ParseBufferSize parses "5%", "0.5%" or a size such as "64MiB".
func ParseBufferSize(s string) (BufferSize, error) {
	if p, ok := strings.CutSuffix(strings.TrimSpace(s), "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v <= 0 || v > 100 {
			return BufferSize{}, fmt.Errorf("buffer %q: a percentage must be in (0, 100]", s)
		}
		return BufferSize{Percent: v}, nil
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n == 0 {
		return BufferSize{}, fmt.Errorf("buffer %q: want a size such as 64MiB or a percentage such as 5%%", s)
	}
	return BufferSize{Bytes: int64(n)}, nil
}

func (b BufferSize) String() string {
	if b.Bytes > 0 {
		return humanize.IBytes(uint64(b.Bytes))
	}
	return strconv.FormatFloat(b.Percent, 'g', -1, 64) + "%"
}

// Params are what an order depends on besides the index.
type Params struct {
	Strategy  string
	Seed      uint64
	Buffer    BufferSize
	MaxMemory int64 // one part's double buffer must fit
}

// Buffer is a group of blocks whose records are served together.
type Buffer struct {
	Blocks  []int32
	Start   int64 // offset of the buffer's first byte in the part
	Size    int64
	Records int
	Seed    uint64 // of the record permutation
	Shuffle bool   // false: records keep their source order
}

// Plan is the order of one part of one epoch.
type Plan struct {
	Epoch, Part, Parts int
	Buffers            []Buffer
	Size               int64
	Records            int64
	Target             int64 // buffer size aimed at
	Capped             bool  // Target was lowered to fit MaxMemory
}

// strategy chooses the blocks of a part, in order, and whether records are
// shuffled inside buffers.
type strategy func(pl *Planner, epoch, part, parts int) (blocks []int32, shuffle bool)

var strategies = map[string]strategy{
	"corgipile": corgipile,
	"none":      none,
}

// Strategies lists the strategy names, sorted.
func Strategies() []string {
	names := make([]string, 0, len(strategies))
	for n := range strategies {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Planner computes plans for one index and one set of parameters.
type Planner struct {
	ix       *blockcache.Index
	p        Params
	strategy strategy
}

// NewPlanner checks the parameters against the index.
func NewPlanner(ix *blockcache.Index, p Params) (*Planner, error) {
	s, ok := strategies[p.Strategy]
	if !ok {
		return nil, fmt.Errorf("unknown strategy %q (choose one of %s)", p.Strategy, strings.Join(Strategies(), ", "))
	}
	if p.Buffer.Bytes <= 0 && p.Buffer.Percent <= 0 {
		return nil, fmt.Errorf("buffer size must be positive")
	}
	if m := ix.MaxBlock(); p.MaxMemory < m {
		return nil, fmt.Errorf("--max-memory %s is smaller than the largest block (%s): use at least %s",
			humanize.IBytes(uint64(p.MaxMemory)), humanize.IBytes(uint64(m)), humanize.IBytes(uint64(m)))
	}
	return &Planner{ix: ix, p: p, strategy: s}, nil
}

// Index returns the planner's index.
func (pl *Planner) Index() *blockcache.Index { return pl.ix }

// Params returns the planner's parameters.
func (pl *Planner) Params() Params { return pl.p }

// Plan returns the order of part of parts in epoch.
func (pl *Planner) Plan(epoch, part, parts int) (*Plan, error) {
	if epoch < 0 || parts < 1 || part < 0 || part >= parts {
		return nil, fmt.Errorf("no part %d of %d in epoch %d", part, parts, epoch)
	}
	blocks, shuffle := pl.strategy(pl, epoch, part, parts)
	var size int64
	for _, b := range blocks {
		size += pl.ix.Blocks[b].Len
	}
	p := &Plan{Epoch: epoch, Part: part, Parts: parts, Size: size}
	p.Target, p.Capped = pl.target(size)
	// Buffers are balanced: as many as the target asks for, each closed
	// where the bytes cross its share, so no buffer is a small leftover
	// (a leftover of one block would serve that block unmixed).
	nbuf := max(1, (size+p.Target-1)/p.Target)
	var cur Buffer
	var done int64
	start := 0
	for i, id := range blocks {
		blk := pl.ix.Blocks[id]
		g := int64(len(p.Buffers))
		if cur.Records > 0 && (cur.Size+blk.Len > p.Target || (done+blk.Len/2)*nbuf > (g+1)*size) {
			p.add(&cur, blocks[start:i], shuffle, pl.p.Seed)
			start = i
		}
		cur.Size += blk.Len
		cur.Records += int(blk.Records)
		done += blk.Len
	}
	if cur.Records > 0 {
		p.add(&cur, blocks[start:], shuffle, pl.p.Seed)
	}
	return p, nil
}

func (p *Plan) add(cur *Buffer, blocks []int32, shuffle bool, seed uint64) {
	g := len(p.Buffers)
	cur.Blocks = blocks[:len(blocks):len(blocks)]
	if g > 0 {
		cur.Start = p.Buffers[g-1].Start + p.Buffers[g-1].Size
	}
	cur.Shuffle = shuffle
	cur.Seed = Derive(seed, purposeRecords, uint64(p.Epoch), uint64(p.Part), uint64(p.Parts), uint64(g))
	p.Buffers = append(p.Buffers, *cur)
	p.Records += int64(cur.Records)
	*cur = Buffer{}
}

// target is the buffer size for a part of partBytes: the --buffer setting,
// lowered so that two buffers (the one served and the one prefetched) fit in
// MaxMemory.
func (pl *Planner) target(partBytes int64) (int64, bool) {
	t := pl.p.Buffer.Bytes
	if t <= 0 {
		t = int64(float64(partBytes) * pl.p.Buffer.Percent / 100)
	}
	if lim := pl.p.MaxMemory / 2; t > lim {
		return lim, true
	}
	return max(t, 1), false
}

// BufferTarget returns the buffer size a part of partBytes gets and whether
// --max-memory lowered it.
func (pl *Planner) BufferTarget(partBytes int64) (int64, bool) { return pl.target(partBytes) }

// slice returns the balanced contiguous share of n items that part gets:
// counts differ by at most one between parts.
func slice(n, part, parts int) (lo, hi int) {
	return n * part / parts, n * (part + 1) / parts
}

// corgipile permutes all blocks per epoch and gives each part a contiguous
// slice of that permutation; records are shuffled inside each buffer.
func corgipile(pl *Planner, epoch, part, parts int) ([]int32, bool) {
	perm := make([]int32, len(pl.ix.Blocks))
	permute(perm, Derive(pl.p.Seed, purposeBlocks, uint64(epoch)))
	lo, hi := slice(len(perm), part, parts)
	return perm[lo:hi], true
}

// none serves the source order, split into contiguous parts.
func none(pl *Planner, epoch, part, parts int) ([]int32, bool) {
	lo, hi := slice(len(pl.ix.Blocks), part, parts)
	blocks := make([]int32, hi-lo)
	for i := range blocks {
		blocks[i] = int32(lo + i)
	}
	return blocks, false
}
