// Package sizing is the one rule for the default block size and shuffle
// buffer of a mount. Every command that opens a dataset (mount, the mount
// helper, order, validate, tune, bench) and the Python package get their
// defaults from Choose, before the source is indexed, so that the index is
// built once, at the size that will be served.
//
// Why these numbers. CorgiPile mixes the records of the blocks in one
// buffer. On data sorted by label a block holds one or two classes, so a
// buffer's class mix is that of a random sample of its blocks: for C equal
// classes and B blocks its expected total-variation distance to the global
// mix is about 0.5·√(2(C−1)/(πB)) (ExpectedTV), 1.2/√B for 10 classes.
// --max-memory is shared by the parts a node reads at once (K DataLoader
// workers on one node read K parts), so a buffer of the whole part is
// chosen when all K parts fit, and a partial buffer is a 1/K share.
// Measured on Fashion-MNIST sorted by label (softmax SGD, 10 epochs, 4
// seeds; issue 23): 19 blocks a buffer (TV 0.265) ended 3.8 points below a
// full shuffle, 143 blocks (TV 0.093) 0.3 points below, a buffer of the
// whole part (an exact shuffle of it) 0.1 above. So the rule aims at
// TargetBlocks blocks a buffer (TV 0.075) and warns below MinBlocks (TV
// 0.106), and gives the buffer the whole part whenever two such buffers fit
// the memory the loader is sure to get.
package sizing

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/dustin/go-humanize"
)

const (
	// TargetBlocks is the number of blocks the rule puts in a buffer (or,
	// with a buffer of the whole part, in a part) when the floor allows.
	TargetBlocks = 256
	// MinBlocks is the fewest blocks a buffer may hold before the mount
	// warns: 143 cost 0.3 points of accuracy on label-sorted data.
	MinBlocks = 128
	// LocalFloor is the smallest default block of a local source. It
	// binds only on parts under 256 floors (128 KiB), which the page cache
	// holds: their many small reads cost little, and a part of few blocks
	// is a poor sample of the dataset. A block still holds whole records
	// (one, if a record is larger) and is read through the page cache:
	// only blocks of index.MinDirectBlock or more are read with O_DIRECT.
	// It was a page (4 KiB) until issue 23's runs on sklearn's tiny sets
	// sorted by label (VALIDATION.md, "At the defaults"): at K = 8
	// breast_cancer's parts were 3 blocks, balanced by bytes to within a
	// block, so 38 to 68 records long, and the records the longer parts
	// gave after the shortest had ended were up to 80% one class (epochs
	// 16 points below a full shuffle); digits' 18 blocks a part ended
	// below full on 10 of 15 seeds. At 512 bytes (22 and 148 blocks a
	// part) that tail is about 10 records, and over 15 seeds digits ends
	// within 0.5 points of full on all of them.
	LocalFloor = 512
	// ObjectStoreFloor is the smallest default block of an object store:
	// each block is one request, whose latency (tens of milliseconds) only
	// megabytes amortise.
	ObjectStoreFloor = 1 << 20
	// Ceiling is the largest default block: the size every mount used
	// before this rule; larger blocks only make a buffer's mix coarser.
	Ceiling = 8 << 20
	// IndexShare is the share of --max-memory the index's blocks may take
	// (index.BlockHeapBytes each): where the buffer's TargetBlocks would
	// cut a large dataset into more blocks than that, blocks are made
	// larger. 1 GiB of 1 KiB records in 64 parts at --max-memory 64MiB
	// got 512 B blocks, one a record (1,048,576 blocks), and the daemon
	// peaked at 149 MiB against the stated 128; at the 4 KiB this share
	// gives, 103 MiB.
	IndexShare = 4
	// RecordBuffer is the default buffer of the strategies that read
	// records one at a time: window's window and mrs's reservoir are the
	// baselines of tf.data and Bismarck, which hold a small share.
	RecordBuffer = 5
)

// Input is what the rule knows before indexing.
type Input struct {
	// DatasetBytes is the size of the source files to be indexed, from
	// the listing. For compressed files it is their stored size: a lower
	// bound of the decompressed bytes the blocks are cut from, so the
	// rule can only get more blocks than it counted, never fewer.
	DatasetBytes int64
	Parts        int  // K
	ObjectStore  bool // each block is a request to an object store
	// MaxMemory is --max-memory: the loader's slabs get at least half of
	// it whatever the records (cmd/corgifs memorySplit).
	MaxMemory int64
	// BlockSize and Buffer are the user's --block-size and --buffer; zero
	// when not given.
	BlockSize int64
	Buffer    shuffler.BufferSize
	// RecordStrategy is set for strategies that read records one at a
	// time (shuffler.ReadsRecords).
	RecordStrategy bool
}

// Choice is what the rule chose.
type Choice struct {
	DatasetBytes int64 // the Input's
	BlockSize    int64
	Buffer       shuffler.BufferSize
	// BufferBytes is the buffer a part gets; BlocksPerBuffer how many
	// blocks of BlockSize it holds (estimated from DatasetBytes).
	BufferBytes     int64
	BlocksPerBuffer int64
	// WholePart is set when a buffer holds its whole part: the part is
	// then served as an exact uniform shuffle of its records.
	WholePart bool
	// ExpectedTV is the expected label total-variation distance of a
	// buffer to the dataset's mix, were the dataset sorted by label into
	// 10 equal classes (0 for a buffer of the whole dataset).
	ExpectedTV float64
	// IndexBound is set when the block was made larger than the buffer
	// asks for, to keep the index within 1/IndexShare of --max-memory.
	IndexBound bool
	// Reason says what was chosen and why, for config.json and the log.
	Reason string
	// Warning is set when memory cannot hold enough blocks: the expected
	// mix and the flag that fixes it.
	Warning string
}

// BufferLimit is the largest buffer of one part for a slab budget: two
// (the one served and the one prefetched) fit, with 1/128 left for the
// whole pages of direct reads (shuffler's gatherLimit).
func BufferLimit(slabs int64) int64 {
	lim := slabs / 2
	return lim - lim/128
}

// Floor is the smallest default block size of a source kind.
func Floor(objectStore bool) int64 {
	if objectStore {
		return ObjectStoreFloor
	}
	return LocalFloor
}

// Choose applies the rule. It does no I/O.
func Choose(in Input) Choice {
	c := choose(in)
	// Strategies that read records one at a time mix records, not blocks.
	if !in.RecordStrategy && !c.WholePart && c.BlocksPerBuffer < MinBlocks {
		c.Warning = warning(in, c)
	}
	return c
}

// choose is Choose without the warning, which searches choose for the
// memory that would need none.
func choose(in Input) Choice {
	k := int64(max(1, in.Parts))
	part := max(1, (in.DatasetBytes+k-1)/k)
	limit := BufferLimit(max(1, in.MaxMemory/2))
	floor := Floor(in.ObjectStore)
	c := Choice{DatasetBytes: in.DatasetBytes}
	var why []string

	// The buffer, and the one a strategy reading blocks would get, which
	// the block size is chosen from whatever the strategy (so that every
	// strategy of a dataset shares its index).
	var blockBuf shuffler.BufferSize
	switch {
	case in.Buffer != (shuffler.BufferSize{}):
		blockBuf = in.Buffer
		why = append(why, "{buffer} given")
	case part <= limit/k:
		// --max-memory is shared by the parts a node reads at once: all
		// K parts, two buffers each, fit.
		blockBuf = shuffler.BufferSize{Percent: 100}
		why = append(why, fmt.Sprintf("buffer 100%%: the %d part(s) of %s each fit twice in half of {max-memory} %s, so each part is an exact shuffle of its records",
			k, humanize.IBytes(uint64(part)), humanize.IBytes(uint64(in.MaxMemory))))
	default:
		// The share of one of K parts read at once, but at least the
		// TargetBlocks blocks of the floor (a node reading fewer parts
		// at once, as each node of K, has the room), and at most what
		// one part may take.
		b := min(limit, max(limit/k, TargetBlocks*floor))
		blockBuf = shuffler.BufferSize{Bytes: b}
		why = append(why, fmt.Sprintf("buffer %s: of which two for each of %d part(s) read at once fit in half of {max-memory} %s (at least %d blocks of %s, at most what one part may take; a part is %s)",
			humanize.IBytes(uint64(b)), k, humanize.IBytes(uint64(in.MaxMemory)), TargetBlocks, humanize.IBytes(uint64(floor)), humanize.IBytes(uint64(part))))
	}
	c.Buffer = blockBuf
	if in.RecordStrategy && in.Buffer == (shuffler.BufferSize{}) {
		c.Buffer = shuffler.BufferSize{Percent: RecordBuffer}
		why[0] = fmt.Sprintf("buffer %d%%: a strategy that reads records one at a time (window's window and mrs's reservoir are a small share, as in tf.data and Bismarck; full and once use none)", RecordBuffer)
	}
	bytesOf := func(b shuffler.BufferSize) int64 {
		n := b.Bytes
		if n <= 0 {
			n = int64(float64(part) * b.Percent / 100)
		}
		return max(1, min(n, limit, part))
	}
	c.BufferBytes = bytesOf(c.Buffer)
	c.WholePart = c.BufferBytes >= part

	// The block size.
	if in.BlockSize > 0 {
		c.BlockSize = in.BlockSize
		why = append(why, "{block-size} given")
	} else {
		bs := floorPow2(max(1, bytesOf(blockBuf)/TargetBlocks))
		c.BlockSize = min(max(bs, floor), Ceiling)
		// The index's share of memory comes before the ceiling: a
		// dataset too large for it at the ceiling gets larger blocks.
		indexed := indexBlock(in)
		switch {
		case c.BlockSize < indexed:
			c.BlockSize, c.IndexBound = indexed, true
			why = append(why, fmt.Sprintf("block %s: the smallest whose index (%d bytes a block) takes at most 1/%d of {max-memory}",
				humanize.IBytes(uint64(c.BlockSize)), index.BlockHeapBytes, IndexShare))
		case bs < floor:
			why = append(why, fmt.Sprintf("block %s: the floor of %s (%d blocks a buffer would be smaller)",
				humanize.IBytes(uint64(c.BlockSize)), kind(in.ObjectStore), TargetBlocks))
		case bs > Ceiling:
			why = append(why, fmt.Sprintf("block %s: the ceiling (more than %d blocks a buffer)", humanize.IBytes(uint64(c.BlockSize)), TargetBlocks))
		default:
			why = append(why, fmt.Sprintf("block %s: the largest power of two that gives at least %d blocks a buffer", humanize.IBytes(uint64(c.BlockSize)), TargetBlocks))
		}
	}
	c.BlocksPerBuffer = max(1, c.BufferBytes/c.BlockSize)
	c.ExpectedTV = ExpectedTV(c.BlocksPerBuffer, max(1, in.DatasetBytes/c.BlockSize), 10)
	c.Reason = fmt.Sprintf("%s; %s (%d blocks a buffer, expected label TV %.3f on data sorted into 10 classes)",
		why[0], why[1], c.BlocksPerBuffer, c.ExpectedTV)
	if in.RecordStrategy {
		// Records are mixed one by one: blocks say nothing of the mix.
		c.Reason = why[0] + "; " + why[1]
	}
	return c
}

// warning says that a buffer holds too few blocks, what mix to expect and
// which flag fixes it.
func warning(in Input, c Choice) string {
	floor := Floor(in.ObjectStore)
	limit := BufferLimit(max(1, in.MaxMemory/2))
	fix := ""
	// The memory whose buffer holds MinBlocks blocks of the size in use,
	// or of the floor if smaller blocks are allowed.
	bs := c.BlockSize
	switch {
	case in.BlockSize > floor && c.BufferBytes/floor >= MinBlocks:
		fix = fmt.Sprintf("use {block-size} %s or less (or leave it out)", humanize.IBytes(uint64(floorPow2(c.BufferBytes/MinBlocks))))
	case in.Buffer != (shuffler.BufferSize{}) && c.BufferBytes < limit:
		fix = fmt.Sprintf("use a larger {buffer} (at least %s)", humanize.IBytes(uint64(MinBlocks*bs)))
	default:
		fix = fmt.Sprintf("use {max-memory} %s or more", humanize.IBytes(uint64(roundUp(memoryForMinBlocks(in)))))
		if c.IndexBound {
			fix = fmt.Sprintf("blocks of %s keep the index of %s within 1/%d of {max-memory}; %s",
				humanize.IBytes(uint64(c.BlockSize)), humanize.IBytes(uint64(in.DatasetBytes)), IndexShare, fix)
		}
	}
	return fmt.Sprintf("a buffer holds %d blocks of %s (at least %d keep the shuffle close to a full one): on data sorted by label a buffer's class mix is off by a total-variation distance of about %.2f, which cost points of accuracy in measurements; %s",
		c.BlocksPerBuffer, humanize.IBytes(uint64(c.BlockSize)), MinBlocks, c.ExpectedTV, fix)
}

// indexBlock is the smallest power-of-two block that keeps the index of
// in's dataset within its share of --max-memory.
func indexBlock(in Input) int64 {
	blocks := max(1, in.MaxMemory/IndexShare/index.BlockHeapBytes)
	n := (in.DatasetBytes + blocks - 1) / blocks
	if n <= 1 {
		return 1
	}
	return floorPow2(n-1) << 1
}

// memoryForMinBlocks returns the smallest --max-memory at which in's
// buffer holds MinBlocks blocks, with in's other flags: more memory gives
// a larger buffer, and never a larger default block than the buffer or
// the index's share asks for.
func memoryForMinBlocks(in Input) int64 {
	enough := func(m int64) bool {
		in := in
		in.MaxMemory = m
		c := choose(in)
		return c.WholePart || c.BlocksPerBuffer >= MinBlocks
	}
	lo, hi := max(1, in.MaxMemory), max(2, 2*in.MaxMemory)
	for !enough(hi) && hi < 1<<50 {
		lo, hi = hi, 2*hi
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if enough(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// roundUp rounds n up to a size that humanize.IBytes prints exactly (a
// tenth of its unit under 10 units, else a unit), so that the printed
// figure is never less than n.
func roundUp(n int64) int64 {
	u := int64(1)
	for n/u >= 1024 {
		u <<= 10
	}
	step := u
	if n/u < 10 && u > 1 {
		step = u / 10
	}
	return (n + step - 1) / step * step
}

// MemoryFor returns the smallest --max-memory whose buffer limit is at
// least buffer bytes.
func MemoryFor(buffer int64) int64 {
	lo, hi := buffer, 8*buffer+1<<20
	for lo < hi {
		mid := lo + (hi-lo)/2
		if BufferLimit(mid/2) >= buffer {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// ExpectedTV is the expected total-variation distance between the class
// mix of b blocks drawn at random from n blocks and the mix of all n, when
// every block holds one of classes equal classes: each class share is a
// hypergeometric proportion of standard deviation √(p(1−p)/b · (n−b)/(n−1)),
// and E|X| = σ√(2/π) for a normal X, so 0.5·Σ E|p̂−p| =
// 0.5·√(2(C−1)/(πb))·√((n−b)/(n−1)).
func ExpectedTV(b, n int64, classes int) float64 {
	if b >= n || n <= 1 {
		return 0
	}
	fpc := float64(n-b) / float64(n-1)
	return 0.5 * math.Sqrt(2*float64(classes-1)/(math.Pi*float64(b))*fpc)
}

func kind(objectStore bool) string {
	if objectStore {
		return "an object store"
	}
	return "a local source"
}

// floorPow2 returns the largest power of two not above n (n > 0).
func floorPow2(n int64) int64 { return 1 << (63 - bits.LeadingZeros64(uint64(n))) }
