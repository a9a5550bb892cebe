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
// Longest, when set, is shared by the probes of one index: the longest
// record they found so far. A TFRecord probe confirms the frame it finds
// by its data CRC and the next header, so among records longer than
// First it read a window, then twice it, then again from the frame: four
// GETs a probe among 100 KiB records at 1 MiB blocks (23% of the bytes).
// Once a probe has seen such a record, the next ones read, in one GET, a
// window that holds any frame starting in it whole with the next header
// (two records and their headers, within Max): each probe's time is one
// request's (issue 25).
type ProbeWindow struct {
	First, Max int64
	Longest    *atomic.Int64
}

// first is the size of a probe's first read: First, or the window that
// holds two of the longest frames seen and a header.
func (w ProbeWindow) first() int64 {
	if w.Longest == nil {
		return w.First
	}
	return max(w.First, min(w.Max, 2*(w.Longest.Load()+FrameExtra)+HeaderLen))
}

// saw records n, a record length a probe confirmed.
func (w ProbeWindow) saw(n int64) {
	if w.Longest == nil {
		return
	}
	for {
		l := w.Longest.Load()
		if n <= l || w.Longest.CompareAndSwap(l, n) {
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
