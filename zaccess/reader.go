package zaccess

import (
	"fmt"
	"io"
)

// keepBehind is how much output a ReaderAt keeps before the offset read
// last, so that a caller going back a little (to checksum the record it
// has just scanned) does not decompress again.
const keepBehind = 16 << 20

// ReaderAt reads the decompressed stream of a file at any offset, for a
// caller that reads mostly forward (a record scanner): it decompresses on
// from where it stopped, and starts again from an access point only to go
// back beyond what it kept, or far ahead. It is not safe for concurrent
// use.
type ReaderAt struct {
	ix   *Index
	src  io.ReaderAt
	size int64
	dc   Decoder
	r    io.Reader // positioned at pos; nil before the first read
	pos  int64
	buf  []byte // output [bufOff, pos)
	off  int64  // of buf[0]
	// Decompressed counts the bytes decompressed, for progress.
	Decompressed int64
}

// NewReaderAt returns a ReaderAt of the compressed file src of size bytes,
// whose access points are ix.
func NewReaderAt(ix *Index, src io.ReaderAt, size int64) *ReaderAt {
	return &ReaderAt{ix: ix, src: src, size: size}
}

// Size returns the length of the decompressed stream.
func (ra *ReaderAt) Size() int64 { return ra.ix.Size }

// Close frees the decoder.
func (ra *ReaderAt) Close() { ra.dc.Close() }

func (ra *ReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("negative offset %d", off)
	}
	if off >= ra.ix.Size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), ra.ix.Size)
	if ra.r == nil || off < ra.off || (off > ra.pos+(4<<20) && ra.ix.PointBefore(off) > ra.pos) {
		r, err := ra.dc.Open(ra.ix, ra.src, ra.size, off)
		if err != nil {
			ra.r = nil
			return 0, err
		}
		ra.Decompressed += off - ra.ix.PointBefore(off)
		ra.r, ra.pos, ra.off, ra.buf = r, off, off, ra.buf[:0]
	}
	if off > ra.pos {
		// Skip to off without keeping what lies between.
		for ra.pos < off {
			ra.buf, ra.off = ra.buf[:0], ra.pos
			if err := ra.more(off - ra.pos); err != nil {
				return 0, err
			}
		}
	}
	for ra.pos < end {
		if cut := min(off, ra.pos-keepBehind) - ra.off; cut > 0 && len(ra.buf) > 2*keepBehind {
			ra.buf = ra.buf[:copy(ra.buf, ra.buf[cut:])]
			ra.off += cut
		}
		if err := ra.more(end - ra.pos); err != nil {
			return 0, err
		}
	}
	n := copy(p, ra.buf[off-ra.off:end-ra.off])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// more appends at least one and about want bytes of output to buf.
func (ra *ReaderAt) more(want int64) error {
	want = max(min(want, 1<<20), 64<<10)
	if cap(ra.buf)-len(ra.buf) < int(want) {
		nb := make([]byte, len(ra.buf), len(ra.buf)+max(int(want), len(ra.buf)))
		copy(nb, ra.buf)
		ra.buf = nb
	}
	n, err := ra.r.Read(ra.buf[len(ra.buf) : len(ra.buf)+int(want)])
	ra.buf = ra.buf[:len(ra.buf)+n]
	ra.pos += int64(n)
	ra.Decompressed += int64(n)
	if n == 0 && err != nil {
		ra.r = nil
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// CheckEnd reads on from the end of the decompressed stream, which the
// index says is at Size, and says whether the compressed data ends there
// too, with every check passed (for an index made by ZstdFrames, whose
// frame sizes come from the headers).
func (ra *ReaderAt) CheckEnd() error {
	if ra.r == nil || ra.pos != ra.ix.Size {
		r, err := ra.dc.Open(ra.ix, ra.src, ra.size, ra.ix.Size)
		if err != nil {
			return err
		}
		ra.r, ra.pos, ra.off, ra.buf = r, ra.ix.Size, ra.ix.Size, ra.buf[:0]
	}
	var b [1]byte
	for {
		n, err := ra.r.Read(b[:])
		if n > 0 {
			return fmt.Errorf("more output than the frame headers say (%d bytes)", ra.ix.Size)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
