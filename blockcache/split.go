package blockcache

// Splitting: the records found in an extent's bytes as they arrive, each
// checked, and the record counts of a probed index learned.

import (
	"fmt"
	"sync/atomic"
	"syscall"

	"github.com/corgifs/corgifs/formats"
)

// learning holds the record count of every block of a probed index,
// once loaded (0 before), with the blocks and records learned so far; nil
// counts for an index that knows them all.
type learning struct {
	counts          []atomic.Int32
	blocks, records atomic.Int64
	// files holds, by file, how many of its blocks have a count: once
	// all have, the counts are kept for the next mount (keepCounts).
	files []atomic.Int32
}

// splitter finds the records of extent e, loaded into b, and fills their
// entries lo to hi of b.Starts and b.lens, checking every CRC on the way.
// It is fed as the extent's bytes arrive.
type splitter struct {
	l      *Loader
	b      *Buf
	e      extent
	lo, hi int
	// own is set when the extent's record count is not known: starts
	// and lens are then its own, not b's.
	own    bool
	starts []int64
	lens   []uint32
	done   int64  // the bytes of the extent split so far
	summed int64  // the stored bytes added to crc so far
	crc    uint32 // of the stored bytes, for formats without checksums
}

// filled checks the records that lie whole in the first n bytes of the
// extent; at the last call, n is the extent's length.
func (sp *splitter) filled(n int64) error {
	l, b, e := sp.l, sp.b, sp.e
	if sp.starts == nil && !sp.own {
		// Capped at hi: more records than the index says cannot spill
		// into the next extent's entries.
		sp.starts = b.Starts[sp.lo:sp.lo:sp.hi]
	}
	f := l.ix.Fmt()
	if e.sum {
		sp.crc = formats.UpdateChecksum(sp.crc, b.Data[e.at+sp.summed:e.at+n])
		sp.summed = n
		if n == e.n && sp.crc != e.crc {
			err := fmt.Errorf("%s at offset %d: the %d bytes there no longer have the checksum the index took (CRC32C %08x, now %08x): the source changed since indexing, or rots; remount to reindex: %w",
				l.ix.Path(e.file), e.off, e.n, e.crc, sp.crc, syscall.EIO)
			l.damaged(err)
			return err
		}
	}
	span := e.n + int64(len(e.tail))
	filled := n
	if n == e.n {
		copy(b.Data[e.at+e.n:e.at+span], e.tail)
		filled = span
	}
	var err error
	sp.starts, sp.done, err = f.SplitFilled(l.ix.Files[e.file].Head, b.Data[e.at:e.at+span], filled, sp.done, e.off, sp.starts)
	if err != nil {
		if l.proof != nil && e.block >= 0 && e.records == 0 {
			// A block that does not tile: if one of its cuts is false,
			// say so (and have the file scanned whole next time).
			if perr := l.proof.prove(e.block, true); perr != nil {
				return perr
			}
		}
		if l.ix.Probed {
			err = fmt.Errorf("%s: %w; %s: %w", l.ix.Path(e.file), err, probeHint, syscall.EIO)
		} else {
			err = fmt.Errorf("%s: %w; the source changed since indexing, or its index sidecar is wrong: remount to reindex: %w", l.ix.Path(e.file), err, syscall.EIO)
		}
		l.damaged(err)
		return err
	}
	if n < e.n {
		return nil
	}
	if sp.own {
		return sp.learn(span)
	}
	if len(sp.starts) != sp.hi-sp.lo {
		err := fmt.Errorf("%s at offset %d: %d records, index says %d; remount to reindex: %w", l.ix.Path(e.file), e.off, len(sp.starts), sp.hi-sp.lo, syscall.EIO)
		l.damaged(err)
		return err
	}
	end := e.at + span
	for j := sp.hi - 1; j >= sp.lo; j-- {
		b.Starts[j] += e.at
		b.lens[j] = uint32(end - b.Starts[j])
		end = b.Starts[j]
	}
	return nil
}

// probeHint says what to do when a block of a probed index does not split
// into whole records: the probe may have taken bytes inside a record for a
// record start (a payload that embeds whole records).
const probeHint = "the records of this block of a probed index do not tile it (the probe may have cut inside a record, or the source changed): run `corgifs index {index} full` on the source and mount with {index} full"

// learn checks the records of an extent whose count the index does not
// know against the count learned when it was loaded before, if any, and
// learns it; then it fills the extent's own tables.
func (sp *splitter) learn(span int64) error {
	l, e := sp.l, sp.e
	n := len(sp.starts)
	if err := tooManyLearned(l.ix, e, sp.starts); err != nil {
		return err
	}
	if e.records > 0 && n != int(e.records) {
		err := fmt.Errorf("%s at offset %d: %d records, index says %d; %s: %w", l.ix.Path(e.file), e.off, n, e.records, probeHint, syscall.EIO)
		l.damaged(err)
		return err
	}
	if e.block >= 0 && l.learn.counts != nil {
		if old := l.learn.counts[e.block].Load(); old != 0 && int(old) != n {
			err := fmt.Errorf("%s at offset %d: %d records, %d when it was loaded before; the source changed: %w", l.ix.Path(e.file), e.off, n, old, syscall.EIO)
			l.damaged(err)
			return err
		} else if old == 0 && l.learn.counts[e.block].CompareAndSwap(0, int32(n)) {
			l.learn.blocks.Add(1)
			l.learn.records.Add(int64(n))
			if _, blocks := l.ix.FileBlocks(e.file); l.learn.files[e.file].Add(1) == blocks {
				l.keepCounts(e.file)
			}
		}
	}
	sp.lens = make([]uint32, n)
	end := e.at + span
	for j := n - 1; j >= 0; j-- {
		sp.starts[j] += e.at
		sp.lens[j] = uint32(end - sp.starts[j])
		end = sp.starts[j]
	}
	return nil
}

// keepCounts keeps the learned record counts of file fi in the ProofLog,
// for the next mount's index (index.FillCounts), once every block of the
// file has its count and, for a format whose probe must be proven, the
// record chain has proven its cuts. Called as either becomes true: the
// second call finds both.
func (l *Loader) keepCounts(fi int32) {
	if l.proofs == nil || l.learn.counts == nil {
		return
	}
	first, n := l.ix.FileBlocks(fi)
	if n == 0 || l.learn.files[fi].Load() < n {
		return
	}
	if l.proof != nil && !l.proof.files[fi].proved.Load() {
		return
	}
	counts := make([]int32, n)
	for j := range counts {
		counts[j] = l.learn.counts[first+int32(j)].Load()
	}
	l.proofs.AddCounts(l.ix, fi, counts)
}
