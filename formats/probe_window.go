package formats

// How much a probe reads (issue 25). A probe at every block edge that
// reads a fixed 256 KiB window fetched a quarter of the dataset at the
// object store's 1 MiB blocks, and 30 times the dataset at 8 KiB blocks.
// The window now follows the block: the first read is a small share of
// the block, enough for a few records of most datasets, and each further
// read of the same probe is twice the last (a long record needs a few
// reads, not one a window), never more than the block nor 256 KiB.

import (
	"io"
	"sync/atomic"
)

// ProbeWindow bounds the reads of one probe: the first reads First
// bytes, each next one twice the one before, up to Max.
//
// Typical, when set, is shared by the probes of one index: a moving
// average of the lengths of the records they found. A TFRecord probe
// confirms the frame it finds by its data CRC and the next header, so
// among records longer than First it read a window, then twice it, then
// again from the frame: four GETs a probe among 100 KiB records at 1 MiB
// blocks (23% of the bytes). Once probes have seen such records, the next
// ones read, in one GET, a window that holds any frame of about the
// typical length starting in it whole with the next header (two records,
// their headers and a 32nd, within Max): each probe's time is one
// request's (issue 25). An average, not the longest: a rare long record
// among short ones makes the next few probes read more, not every later
// one.
type ProbeWindow struct {
	First, Max int64
	Typical    *atomic.Int64
}

// first is the size of a probe's first read: First, or the window that
// holds two frames of the typical length, a header and a 32nd more (for
// lengths that vary a little about it).
func (w ProbeWindow) first() int64 {
	if w.Typical == nil {
		return w.First
	}
	t := w.Typical.Load()
	return max(w.First, min(w.Max, 2*(t+FrameExtra)+HeaderLen+t/32))
}

// saw adds n, the data length of a record a probe confirmed, to the
// moving average (an eighth of the way to it; the first sets it).
func (w ProbeWindow) saw(n int64) {
	if w.Typical == nil {
		return
	}
	for {
		t := w.Typical.Load()
		next := n
		if t > 0 {
			next = t + (n-t)/8
		}
		if next == t || w.Typical.CompareAndSwap(t, next) {
			return
		}
	}
}

// WindowProber is a Prober whose reads follow a ProbeWindow.
type WindowProber interface {
	ProbeWithin(r io.ReaderAt, h Head, off int64, w ProbeWindow) (int64, error)
}

// Bounds of WindowFor: the first read is a 64th of the block (1.6% of
// the bytes a probe stands for), at least a page, at most 64 KiB; no read
// passes the block nor 256 KiB.
const (
	probeFirstShare = 64
	probeFirstMin   = 4 << 10
	probeFirstMax   = probeWindow
	probeMax        = 4 * probeWindow
)

// WindowFor returns the probe window of an index of blocks of blockSize
// bytes.
func WindowFor(blockSize int64) ProbeWindow {
	limit := min(probeMax, max(blockSize, HeaderLen))
	first := min(limit, max(probeFirstMin, min(probeFirstMax, blockSize/probeFirstShare)))
	return ProbeWindow{First: first, Max: limit}
}

// ProbeWithin is Probe with reads bounded by w.
func (TFRecord) ProbeWithin(r io.ReaderAt, h Head, off int64, w ProbeWindow) (int64, error) {
	if off <= h.Start {
		return h.Start, nil
	}
	if off >= h.End {
		return h.End, nil
	}
	s := newScanner(r, off, h.End, int(w.first()))
	s.grow = w.Max
	c, err := s.nextConfirmed(off)
	if err == nil && c < h.End {
		w.saw(s.confirmed)
	}
	return c, err
}

func (Lines) ProbeWithin(r io.ReaderAt, h Head, off int64, w ProbeWindow) (int64, error) {
	return probeLineWithin(r, h, off, w)
}

func (JSONL) ProbeWithin(r io.ReaderAt, h Head, off int64, w ProbeWindow) (int64, error) {
	return probeLineWithin(r, h, off, w)
}

func (LibSVM) ProbeWithin(r io.ReaderAt, h Head, off int64, w ProbeWindow) (int64, error) {
	return probeLineWithin(r, h, off, w)
}
