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
//
// Local and partial local shuffling (local, pls; Nguyen et al., IPDPS 2022)
// give part i of K a set of blocks that it keeps from epoch to epoch, so
// that a node reading only its part fetches only what is new to it:
//
//  1. Epoch 0: the blocks in the order of --partition (random: the
//     permutation Derive(seed, 7); contiguous: the source order) are cut
//     into K runs balanced by bytes by balance.go's rule, so every part
//     holds T/K bytes within one largest block. Part i's list is its run.
//  2. Before each epoch e ≥ 1 (pls only; local keeps epoch 0's sets), each
//     part i with n blocks picks c_i = ⌈Q·n − 10⁻⁹⌉ of them (the 10⁻⁹ keeps
//     0.3·10 at 3 despite floating point): the first c_i positions of a
//     partial Fisher–Yates of its list drawn from Derive(seed, 8, e, K, i).
//  3. Round r (r = 0, 1, ...) moves the r-th picks of the parts with
//     c_i > r, taken in order of c_i descending, then i ascending: they are
//     put in a random order (Fisher–Yates from Derive(seed, 10, e, K, r))
//     and each sends its pick to the next part of that cycle, the last to
//     the first; the received block takes the sent one's position. A round
//     with a single part leaves its pick where it is.
//  4. So in every round a part receives exactly one block if it sends one,
//     never its own (a cycle of two or more parts has no fixed point):
//     every part receives exactly as many blocks as it sends, its block
//     count stays epoch 0's forever, and it keeps at least n − c_i ≥
//     (1−Q)·n − 1 of its blocks. Q = 0 is local; Q = 1 sends every block.
//  5. Part i serves its set of epoch e in a CorgiPile order: its list
//     permuted by Derive(seed, 9, e, i, K), buffers sized and records
//     shuffled as corgipile's.
//
// A step costs time linear in the blocks (and K log K). Epoch e's
// assignment is stepped from the nearest kept one at or above the last
// multiple of 16 below it; the assignments of multiples of 16 passed and of
// the last epochs computed are kept, at most 8, so any epoch is derived
// without keeping every earlier one.
//
// Feedback strategies (grab, cdgrab, corgipile-balance: grab.go) order
// epoch e+1 from the vectors the trainer wrote back for epoch e, by
// herding (package grab); their orders are pure functions of the saved
// orders and the feedback, and are saved so that a remount serves the same
// bytes.
package shuffler

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/grab"
	"github.com/corgifs/corgifs/index"
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
	// EqualParts pads the shorter parts of an epoch with repeats of some
	// of their own records, so that all K parts hold the same number of
	// records (for lock-step distributed training).
	EqualParts bool
	// Partition is how local and pls assign blocks to parts in epoch 0:
	// PartitionRandom ("" too) or PartitionContiguous.
	Partition string
	// Exchange is pls's Q, the fraction of its blocks a part sends to
	// the other parts before each epoch, in [0, 1].
	Exchange float64

	// Feedback is the store the feedback strategies (grab, cdgrab,
	// corgipile-balance; grab.go) read; nil serves every epoch of theirs
	// as a random reshuffle.
	Feedback Feedback
	// FeedbackTimeout is how long the plan of epoch e+1 waits for epoch
	// e's feedback (0: DefaultFeedbackTimeout).
	FeedbackTimeout time.Duration
	// BalanceRule is the sign rule of the feedback strategies.
	BalanceRule grab.Rule
	// Logger gets the feedback strategies' fallbacks (nil: slog.Default).
	Logger *slog.Logger
}

// Buffer is a group of blocks, or of single records, served together.
type Buffer struct {
	Blocks  []int32 // whole blocks; or
	Records []int32 // single records, in served order (Index.Record ids)
	Start   int64   // offset of the buffer's first byte in the part
	Epoch   int     // of the plan: the loader counts the buffer's bytes under it
	Size    int64
	Count   int    // records in the buffer; -1 until loaded, for blocks of unknown counts (probe.go)
	Seed    uint64 // of the record permutation
	Shuffle bool   // false: records keep their order
	// Perm, when set, is the permutation of the records (positions in the
	// loaded buffer, in served order), instead of Shuffle's: feedback
	// strategies' orders (grab.go).
	Perm []int32
	// Subset says Perm lists only some of the loaded records: the buffer
	// serves len(Perm) records (a resume's, resume.go).
	Subset bool
}

// Unit is what the loader reads for the buffer.
func (b *Buffer) Unit() blockcache.Unit {
	return blockcache.Unit{Blocks: b.Blocks, Records: b.Records, Epoch: b.Epoch}
}

// Plan is the order of one part of one epoch. A served part is the
// Prologue, the records of the Buffers, then the Epilogue: the bytes a file
// of the format holds before and after its records (a CSV header row, a
// .npy header with the part's row count, a tar end-of-archive marker).
type Plan struct {
	Epoch, Part, Parts int
	Buffers            []Buffer
	Prologue, Epilogue []byte
	Size               int64 // all of it, prologue and epilogue included
	Records            int64 // -1 when blocks of unknown counts make it unknown (probe.go)
	Target             int64 // buffer size aimed at
	Capped             bool  // Target was lowered to fit MaxMemory
	Padding            int   // records repeated at the end (Params.EqualParts)
}

// order is what a strategy decides for a part: its blocks in order, with
// or without shuffling records inside buffers; or its records in order.
// Its slices may be shares of the epoch's sequence, which other parts'
// plans use too: they are never written.
type order struct {
	Blocks  []int32
	Shuffle bool
	Records []int32 // served instead of Blocks when set
	// Gather, with Blocks, makes one buffer of all the blocks whose
	// records are served in this order (record ids): grab, cdgrab.
	Gather []int32
	// Perms are the permutations of the buffers cut from Blocks, one after
	// the other (corgipile-balance).
	Perms []int32
}

// A strategy gives part of parts its order, from the epoch's sequence.
type strategy func(pl *Planner, seq *sequence, epoch, part, parts int) order

// strategyInfo is one entry of the table of strategies.
type strategyInfo struct {
	plan strategy
	// records says the strategy reads records one at a time: its parts
	// are balanced slices of the records rather than of the blocks.
	records bool
	// describe says in one line what it does, for --help.
	describe string
}

// strategies is the one table of strategies: a new strategy is added here
// and nowhere else.
var strategies = map[string]strategyInfo{
	"corgipile":         {corgipile, false, "random blocks, records shuffled inside each buffer (CorgiPile)"},
	"corgipile-balance": {corgipileBalance, false, "corgipile's blocks and buffers; each buffer's records in PairBalance order of their latest feedback vectors"},
	"grab":              {grabOrder, false, "part i keeps its blocks as local; its records in GraB order of the previous epoch's feedback. A part of at most half of {max-memory} has its blocks read once per epoch (through {disk-cache}) and its records gathered; a larger part is read record by record like full: one read per record (one GET on S3), and {disk-cache} neither serves nor keeps those reads"},
	"cdgrab":            {grabOrder, false, "as grab, all parts balanced together by CD-GraB (one PairBalance over all parts' feedback); reads as grab: a part larger than half of {max-memory} is read record by record, bypassing {disk-cache}"},
	"block":             {blockOnly, false, "random blocks, records in source order inside each block"},
	"none":              {none, false, "source order"},
	"window":            {window, true, "sliding-window shuffle as tf.data's shuffle(buffer): reads records one by one, slow on cold storage"},
	"full":              {full, true, "a new uniform permutation of all records every epoch: reads records one by one, slow on cold storage"},
	"once":              {full, true, "one uniform permutation reused every epoch: reads records one by one, slow on cold storage"},
	"local":             {local, false, "part i keeps the same blocks every epoch ({partition}), in a fresh CorgiPile order (D-RR)"},
	"pls":               {local, false, "partial local shuffling: as local, and each part sends a fraction {exchange} of its blocks to the others before each epoch"},
	"mrs":               {mrs, true, "multiplexed reservoir sampling (Bismarck): a scan in source order serves the records that fall out of a reservoir of {buffer}, mixed with the previous epoch's reservoir, so a record comes 0, 1 or 2 times in an epoch (once in it or the next); reads records one by one"},
}

// Description says in one line what strategy does, for --help; "" for an
// unknown one.
func Description(strategy string) string { return strategies[strategy].describe }

// IsStrategy reports whether name is a strategy.
func IsStrategy(name string) bool {
	_, ok := strategies[name]
	return ok
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

// Planner computes plans for one index and one set of parameters, and
// shares them: see cache.go.
type Planner struct {
	ix       *index.Index
	p        Params
	uses     uses // of the parts readers opened, for NextUse
	strategy strategy
	cache    planCache
	// ctx ends with Close: plans waiting for feedback stop waiting.
	ctx    context.Context
	cancel context.CancelFunc
}

// Close ends the waits for feedback (grab.go): their epochs are served as
// random reshuffles. Plans already made stay valid.
func (pl *Planner) Close() { pl.cancel() }

// NewPlanner checks the parameters against the index.
func NewPlanner(ix *index.Index, p Params) (*Planner, error) {
	s, ok := strategies[p.Strategy]
	if !ok {
		return nil, fmt.Errorf("unknown strategy %q (choose one of %s)", p.Strategy, strings.Join(Strategies(), ", "))
	}
	if err := checkExchange(p); err != nil {
		return nil, err
	}
	if err := checkProbed(ix, p, s); err != nil {
		return nil, err
	}
	if p.Buffer.Bytes <= 0 && p.Buffer.Percent <= 0 {
		return nil, fmt.Errorf("buffer size must be positive")
	}
	if m := ix.MaxBlock(); p.MaxMemory < m {
		// The smallest workable value in bytes: a rounded size such as
		// "65 KiB" could be just below the block.
		return nil, fmt.Errorf("{max-memory} %s is smaller than the largest block (%s): use at least {max-memory} %d",
			humanize.IBytes(uint64(p.MaxMemory)), humanize.IBytes(uint64(m)), m)
	}
	if IsFeedback(p.Strategy) && p.FeedbackTimeout <= 0 {
		p.FeedbackTimeout = DefaultFeedbackTimeout
	}
	pl := &Planner{ix: ix, p: p, strategy: s.plan}
	pl.ctx, pl.cancel = context.WithCancel(context.Background())
	pl.cache.init()
	return pl, nil
}

// Index returns the planner's index.
func (pl *Planner) Index() *index.Index { return pl.ix }

// Params returns the planner's parameters.
func (pl *Planner) Params() Params { return pl.p }

// Plan returns the order of part of parts in epoch. The plan may be shared
// with the open parts (see Acquire): it must not be modified.
func (pl *Planner) Plan(epoch, part, parts int) (*Plan, error) {
	p, err := pl.Acquire(epoch, part, parts)
	if err != nil {
		return nil, err
	}
	pl.Release(p)
	return p, nil
}

// build computes the plan of part of parts in epoch from the epoch's
// sequence, in time and memory proportional to the part.
func (pl *Planner) build(seq *sequence, epoch, part, parts int) *Plan {
	pl.cache.built.Add(1)
	o := pl.strategy(pl, seq, epoch, part, parts)
	ids, bytes, records := o.Blocks, pl.blockBytes, pl.blockRecords
	if o.Records != nil {
		ids, bytes, records = o.Records, pl.recordBytes, one
	}
	var size int64
	for _, id := range ids {
		size += bytes(id)
	}
	p := &Plan{Epoch: epoch, Part: part, Parts: parts, Size: size}
	p.Target, p.Capped = pl.target(size)
	if o.Gather != nil {
		// One buffer: any record may be served first.
		p.Target, p.Capped = max(size, 1), false
	}
	// Buffers are balanced: as many as the target asks for, each closed
	// where the bytes cross its share, so no buffer is a small leftover
	// (a leftover of one block would serve that block unmixed).
	nbuf := max(1, (size+p.Target-1)/p.Target)
	var cur Buffer
	var done int64
	start := 0
	add := func(end int) {
		g := len(p.Buffers)
		u := ids[start:end:end]
		if o.Records != nil {
			cur.Records = u
		} else {
			cur.Blocks = u
		}
		if g > 0 {
			cur.Start = p.Buffers[g-1].Start + p.Buffers[g-1].Size
		}
		cur.Shuffle = o.Shuffle
		cur.Seed = Derive(pl.p.Seed, purposeRecords, uint64(epoch), uint64(part), uint64(parts), uint64(g))
		p.Buffers = append(p.Buffers, cur)
		p.Records += int64(cur.Count)
		cur = Buffer{}
		start = end
	}
	for i, id := range ids {
		n := bytes(id)
		g := int64(len(p.Buffers))
		if i > start && (cur.Size+n > p.Target || (done+n/2)*nbuf > (g+1)*size) {
			add(i)
		}
		cur.Size += n
		cur.Count += records(id)
		done += n
	}
	if start < len(ids) {
		add(len(ids))
	}
	if o.Gather != nil && len(p.Buffers) == 1 {
		p.Buffers[0].Perm = pl.gatherPerm(p.Buffers[0].Blocks, o.Gather)
	}
	if o.Perms != nil {
		at := 0
		for g := range p.Buffers {
			b := &p.Buffers[g]
			if at+b.Count > len(o.Perms) {
				break // cannot be: feedbackOrders checked the counts
			}
			b.Perm = o.Perms[at : at+b.Count : at+b.Count]
			at += b.Count
		}
	}
	unknownCounts(p, o, pl.ix)
	if pl.p.EqualParts && parts > 1 {
		pl.pad(p, seq, o)
	}
	// The .npy prologue holds the record count, padding included.
	f := pl.ix.Fmt()
	p.Prologue = f.AppendPrologue(nil, pl.ix.Head, p.Records)
	p.Epilogue = f.AppendEpilogue(nil, pl.ix.Head)
	for i := range p.Buffers {
		p.Buffers[i].Start += int64(len(p.Prologue))
		p.Buffers[i].Epoch = epoch
	}
	p.Size += int64(len(p.Prologue) + len(p.Epilogue))
	return p
}

// recordsEnd returns the offset in the part where the epilogue starts.
func (p *Plan) recordsEnd() int64 { return p.Size - int64(len(p.Epilogue)) }

// ReadsRecords reports whether strategy reads records one at a time (and
// plans every record), rather than whole blocks.
func ReadsRecords(strategy string) bool { return strategies[strategy].records }

func (pl *Planner) blockBytes(id int32) int64  { return pl.ix.BlockBytes(id) }
func (pl *Planner) blockRecords(id int32) int  { return int(pl.ix.Blocks[id].Records) }
func (pl *Planner) recordBytes(id int32) int64 { return int64(pl.ix.Frames[id]) }
func one(int32) int                            { return 1 }

// target is the buffer size for a part of partBytes: the --buffer setting,
// lowered so that two buffers (the one served and the one prefetched) fit in
// MaxMemory.
func (pl *Planner) target(partBytes int64) (int64, bool) {
	t := pl.p.Buffer.Bytes
	if t <= 0 {
		t = int64(float64(partBytes) * pl.p.Buffer.Percent / 100)
	}
	if lim := pl.gatherLimit(); t > lim {
		return lim, true
	}
	return max(t, 1), false
}

// BufferTarget returns the buffer size a part of partBytes gets and whether
// --max-memory lowered it.
func (pl *Planner) BufferTarget(partBytes int64) (int64, bool) { return pl.target(partBytes) }

// slice returns a contiguous share of n items whose counts differ by at
// most one between parts: the split of units of no bytes (balance.go
// splits by bytes).
func slice(n, part, parts int) (lo, hi int) {
	return n * part / parts, n * (part + 1) / parts
}

// corgipile permutes all blocks per epoch and gives each part a contiguous
// run of that permutation, balanced by bytes (balance.go); records are
// shuffled inside each buffer.
func corgipile(pl *Planner, seq *sequence, epoch, part, parts int) order {
	return order{Blocks: pl.share(seq, part, parts), Shuffle: true}
}

// blockOnly is corgipile without the shuffle inside buffers (the paper's
// Block-Only Shuffle).
func blockOnly(pl *Planner, seq *sequence, epoch, part, parts int) order {
	o := corgipile(pl, seq, epoch, part, parts)
	o.Shuffle = false
	return o
}

// none serves the source order, split into contiguous parts balanced by
// bytes.
func none(pl *Planner, seq *sequence, epoch, part, parts int) order {
	return order{Blocks: pl.share(seq, part, parts)}
}

func span(lo, hi int) []int32 {
	ids := make([]int32, hi-lo)
	for i := range ids {
		ids[i] = int32(lo + i)
	}
	return ids
}

// full serves a share of the epoch's permutation of all records: a new one
// every epoch (the paper's Epoch Shuffle) or, for once, the same one.
func full(pl *Planner, seq *sequence, epoch, part, parts int) order {
	return order{Records: pl.share(seq, part, parts)}
}

// window is the sliding-window shuffle of tf.data's Dataset.shuffle: part i
// takes a contiguous run of the source records, balanced by bytes; a window
// of W records is filled in source order, and each step emits a uniformly
// chosen slot and refills it with the next record. W holds about --buffer
// bytes of records.
func window(pl *Planner, seq *sequence, epoch, part, parts int) order {
	src := pl.share(seq, part, parts)
	var bytes int64
	for _, r := range src {
		bytes += int64(pl.ix.Frames[r])
	}
	w := 1
	if len(src) > 0 {
		t, _ := pl.target(bytes)
		w = max(1, int(t/(bytes/int64(len(src))+1)))
	}
	var g generator
	g.seed(Derive(pl.p.Seed, purposeWindow, uint64(epoch), uint64(part), uint64(parts)))
	out := make([]int32, 0, len(src))
	win := make([]int32, 0, min(w, len(src)))
	next := 0
	for ; next < len(src) && len(win) < w; next++ {
		win = append(win, src[next])
	}
	for len(win) > 0 {
		j := g.below(uint64(len(win)))
		out = append(out, win[j])
		if next < len(src) {
			win[j] = src[next]
			next++
		} else {
			win[j] = win[len(win)-1]
			win = win[:len(win)-1]
		}
	}
	return order{Records: out}
}
