package blockcache

// What the loader loads: units of blocks or records, the extents they are
// read in, and the Bufs that hold them.

import (
	"cmp"
	"slices"
	"time"

	"github.com/corgifs/corgifs/index"
)

// Unit names what one Buf holds, in order: whole blocks, or single records
// (numbered as Index.Record numbers them), each read with its own pread.
// Exactly one of the two is set.
type Unit struct {
	Blocks  []int32
	Records []int32
	// Epoch is the epoch the unit is read for: the bytes it brings are
	// counted under it (Stats.Epochs). It is no part of the unit's
	// identity: epochs share loaded units.
	Epoch int
	// Order, if set, lists the unit's blocks or records (by their index
	// in it) in the order they are read: the order a reader first needs
	// them in (see Begin). No part of the identity either; ignored
	// unless it lists each of them once.
	Order []int32
}

func (u Unit) ids() []int32 {
	if u.Records != nil {
		return u.Records
	}
	return u.Blocks
}

func (u Unit) equal(v Unit) bool {
	return (u.Records != nil) == (v.Records != nil) && slices.Equal(u.ids(), v.ids())
}

func (u Unit) clone() Unit {
	return Unit{Blocks: slices.Clone(u.Blocks), Records: slices.Clone(u.Records), Epoch: u.Epoch, Order: slices.Clone(u.Order)}
}

// extent is one pread: a byte range of a file holding whole records, and
// where its first byte lands in the slab.
type extent struct {
	file    int32
	block   int32 // its block, -1 for a single record
	records int32 // 0: not known yet (a probed index, see probe.go)
	off, n  int64 // the stored bytes read
	at      int64
	// tail is served after the stored bytes (Index.Tail): the slab
	// holds n+len(tail) bytes from at.
	tail []byte
	// crc is the CRC32C the stored bytes must have, when sum is set (a
	// format without checksums of its own).
	crc uint32
	sum bool
}

// extents appends the extents of u to exts, placed in the slab as Buf
// describes, and returns them with the slab size they need.
func (l *Loader) extents(u Unit, exts []extent) ([]extent, int64) {
	var at int64
	sum := l.ix.RecordCRCs != nil
	if u.Records != nil {
		for _, r := range u.Records {
			f, off, n := l.ix.Record(r)
			e := extent{file: f, block: -1, records: 1, off: off, n: n, at: at}
			if t := l.ix.Files[f].Head.Tail; len(t) > 0 && off+n == l.ix.Files[f].Head.End+int64(len(t)) {
				// The file's last record: Frames holds its served length.
				e.n, e.tail = n-int64(len(t)), t
			}
			if sum {
				e.crc, e.sum = l.ix.RecordCRCs[r], true
			}
			exts = append(exts, e)
			at += n
		}
		return exts, at
	}
	for _, id := range u.Blocks {
		blk := l.ix.Blocks[id]
		lead, span := l.placeBlock(blk)
		exts = append(exts, extent{file: blk.File, block: id, records: blk.Records, off: blk.Offset, n: blk.Len, at: at + lead,
			tail: l.ix.Tail(blk), crc: blk.CRC, sum: sum})
		at += span
	}
	return exts, at
}

// placeBlock returns where blk starts in its share of a slab, and the size
// of that share.
func (l *Loader) placeBlock(blk index.Block) (lead, span int64) {
	return placeBlock(blk, int64(len(l.ix.Tail(blk))), l.placesPages())
}

// placeBlock returns where blk, followed by tail bytes, starts in its
// share of a slab, and the size of that share. A block that may be read
// directly gets whole pages of its own: it starts at its offset within a
// page, and its share ends at a page boundary.
func placeBlock(blk index.Block, tail int64, direct bool) (lead, span int64) {
	if !direct {
		return 0, blk.Len + tail
	}
	lead = blk.Offset - index.AlignDown(blk.Offset)
	return lead, index.AlignUp(lead + blk.Len + tail)
}

// readsDirect reports whether a loader with options o reads the blocks of
// ix with O_DIRECT when they are not cached.
func readsDirect(ix *index.Index, o LoaderOptions) bool {
	return index.IsLocal(ix.Source()) && !o.Buffered && ix.BlockSize >= index.MinDirectBlock
}

// MinMemory returns the smallest LoaderOptions.MaxMemory with which a
// loader with options o can load every buffer of one block, or with
// records set every buffer of one record: the largest slab such a buffer
// takes, with the pages of a direct read for a block. Get refuses a buffer
// larger than the budget by the same measure.
func MinMemory(ix *index.Index, o LoaderOptions, records bool) int64 {
	var m int64
	if records {
		for _, n := range ix.Frames {
			m = max(m, int64(n))
		}
		return m
	}
	direct := readsDirect(ix, o) || pagesFor(ix, o.DiskCache)
	for _, blk := range ix.Blocks {
		_, span := placeBlock(blk, int64(len(ix.Tail(blk))), direct)
		m = max(m, span)
	}
	return m
}

// Buf holds the extents of one unit read into one slab, and where each
// record starts in it. Single records are packed back to back; blocks are
// placed so that each can be read with O_DIRECT: a block starts at the same
// offset within a page as in its file, and a block's pages are its own, so
// the bytes between blocks belong to no record. A Buf is shared: every Get
// must be paired with a Release.
type Buf struct {
	Data   []byte
	Starts []int64 // offset in Data of every record, in unit order

	// lens are the frame lengths, kept rather than read from the frame
	// headers: a shuffled walk over the headers misses the cache at
	// every record. The index keeps every frame under 4 GiB.
	lens  []uint32
	exts  []extent
	unit  Unit
	hash  uint64
	refs  int
	ready chan struct{}
	err   error
	// laid is closed once Starts has its length and, if partial, the
	// extents' first records are known (arrival.go); at the latest when
	// the load ends. partial is set before.
	laid    chan struct{}
	partial bool
	arr     arrivals
	// prefetched is set while a Buf loaded ahead of time waits for its first
	// user, so that the first Get counts as a prefetch hit.
	prefetched bool
	// links put the Buf into Loader's idle list while refs == 0; an
	// intrusive list, so that a Release allocates nothing.
	links[Buf]
	dropped bool // evicted: Data may belong to another Buf now
	// servers counts the users serving b to a reader (Serve, Pass), and
	// used is when b was last taken or given back (Loader.clock): see
	// serveGrace.
	servers int
	used    time.Duration
}

// RecordLen returns the frame length of record i.
func (b *Buf) RecordLen(i int) int64 { return int64(b.lens[i]) }

// Locate returns the source file and offset of the byte at offset at of
// Data, which must lie in a record.
func (b *Buf) Locate(at int64) (file int32, off int64) {
	i, found := slices.BinarySearchFunc(b.exts, at, func(e extent, at int64) int { return cmp.Compare(e.at, at) })
	if !found {
		i--
	}
	e := b.exts[i]
	return e.file, e.off + at - e.at
}
