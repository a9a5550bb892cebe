package zaccess

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/flate"
)

// Indexer builds the index of a gzip or zlib stream while serving its
// decompressed bytes, so that a caller who reads the stream mostly
// forward (a record scanner) needs a single decompression: one inflater
// decodes from the start to the end, recording access points, with every
// check; a read behind what it keeps decodes again from the points
// recorded so far, with a second decoder. It is not safe for concurrent
// use.
type Indexer struct {
	src      io.ReaderAt
	size     int64
	span     int64
	d        *inflater
	ix       Index // Points so far; Size once done
	progress func(int64)
	last     int64 // compressed bytes reported to progress

	buf  []byte // output [off, pos)
	off  int64
	pos  int64
	done bool
	err  error

	zw   *flate.Writer
	wbuf bytes.Buffer
	werr error

	back *ReaderAt // for reads before off

	// With cuts set, access points are chosen by the caller's Cut calls
	// rather than every span bytes: held are the places decoding could
	// restart that a later Cut may still choose.
	cuts  bool
	floor int64 // the next Cut is at or after it, a multiple of span
	held  []candidate
	free  [][]byte // windows of dropped candidates, for reuse
}

// candidate is a place decoding can restart at, with its window
// uncompressed (nil at a member start).
type candidate struct {
	bit, out int64
	member   bool
	win      []byte
}

// maxHeld bounds the candidates held past the floor (a record longer
// than many DEFLATE blocks): beyond it every other one is dropped, which
// only makes a Cut start a little earlier.
const maxHeld = 64

// NewIndexer returns an Indexer of the compressed stream src of size
// bytes of kind Gzip or Zlib, with access points span bytes of output
// apart.
func NewIndexer(src io.ReaderAt, size int64, kind Kind, span int64, progress func(int64)) *Indexer {
	x := &Indexer{src: src, size: size, span: span, progress: progress, ix: Index{Kind: kind}}
	x.d = newInflater(bufio.NewReaderSize(io.NewSectionReader(src, 0, size), 1<<20), kind)
	x.d.onBlock = x.point
	return x
}

// NewCutIndexer is NewIndexer for a caller that says where its blocks
// start (Cut): the access point of each block is then the last DEFLATE
// block boundary or member start at or before it, so that loading the
// block decodes at most about one DEFLATE block before its first byte.
// span is the block size: a block starts at the first record at or after
// each multiple of it, which bounds the candidates to hold.
func NewCutIndexer(src io.ReaderAt, size int64, kind Kind, span int64, progress func(int64)) *Indexer {
	x := NewIndexer(src, size, kind, span, progress)
	x.cuts = true
	x.d.onBlock = x.candidate
	return x
}

// candidate holds the block boundary or member start at bit and out as a
// place a later Cut may choose.
func (x *Indexer) candidate(bit, out int64, first bool) {
	if len(x.ix.Points) == 0 && first {
		// The stream's start is always the first point.
		x.ix.Points = append(x.ix.Points, Point{Out: out, In: x.d.memberIn * 8, Member: true})
		return
	}
	c := candidate{bit: bit, out: out, member: first}
	if first {
		c.bit = x.d.memberIn * 8
	} else {
		var w []byte
		if n := len(x.free); n > 0 {
			w, x.free = x.free[n-1][:0], x.free[:n-1]
		}
		c.win = append(w, x.d.window()...)
	}
	if out <= x.floor {
		// It stands at or before the floor: no earlier one can be
		// the last at or before the next cut.
		x.drop(len(x.held))
	}
	x.held = append(x.held, c)
	if len(x.held) > maxHeld {
		// Keep the first (the last before the floor) and the last,
		// and every other one between.
		k := 1
		for i := 1; i < len(x.held); i++ {
			if i%2 == 0 || i == len(x.held)-1 {
				x.held[k] = x.held[i]
				k++
			} else if x.held[i].win != nil {
				x.free = append(x.free, x.held[i].win)
			}
		}
		clear(x.held[k:])
		x.held = x.held[:k]
	}
}

// drop forgets the first n held candidates.
func (x *Indexer) drop(n int) {
	for _, c := range x.held[:n] {
		if c.win != nil {
			x.free = append(x.free, c.win)
		}
	}
	x.held = x.held[:copy(x.held, x.held[n:])]
}

// Cut records the access point of a block that starts at output offset
// off: the last place at or before it where decoding can restart. Blocks
// are cut in order, at offsets the decoding has reached.
func (x *Indexer) Cut(off int64) {
	if !x.cuts {
		return
	}
	i := 0
	for i < len(x.held) && x.held[i].out <= off {
		i++
	}
	if i > 0 {
		c := x.held[i-1]
		if n := len(x.ix.Points); n == 0 || c.bit > x.ix.Points[n-1].In {
			p := Point{Out: c.out, In: c.bit, Member: c.member}
			if !c.member {
				p.Window = x.compress(c.win)
			}
			x.ix.Points = append(x.ix.Points, p)
		}
		// The ones before it are passed; it is a point now.
		x.drop(i)
	}
	x.floor = (off/x.span + 1) * x.span
	// Of the ones left before the new floor, only the last may be chosen.
	j := 0
	for j < len(x.held) && x.held[j].out <= x.floor {
		j++
	}
	if j > 1 {
		x.drop(j - 1)
	}
}

// compress returns win DEFLATE-compressed, as a Point keeps it.
func (x *Indexer) compress(win []byte) []byte {
	x.wbuf.Reset()
	if x.zw == nil {
		x.zw, x.werr = flate.NewWriter(&x.wbuf, 5)
	} else {
		x.zw.Reset(&x.wbuf)
	}
	if x.werr == nil {
		_, x.werr = x.zw.Write(win)
	}
	if x.werr == nil {
		x.werr = x.zw.Close()
	}
	return bytes.Clone(x.wbuf.Bytes())
}

// point records an access point at a block boundary, when it lies far
// enough from the last one.
func (x *Indexer) point(bit, out int64, first bool) {
	if n := len(x.ix.Points); n > 0 && out-x.ix.Points[n-1].Out < x.span {
		return
	}
	if first {
		x.ix.Points = append(x.ix.Points, Point{Out: out, In: x.d.memberIn * 8, Member: true})
		return
	}
	x.ix.Points = append(x.ix.Points, Point{Out: out, In: bit, Window: x.compress(x.d.window())})
}

// next decodes the next piece of output, keeping it in buf when keep is
// set.
func (x *Indexer) next(keep bool) error {
	if x.err != nil {
		return x.err
	}
	if x.done {
		return io.EOF
	}
	b, err := x.d.next(outChunk)
	if x.werr != nil {
		err = fmt.Errorf("compress an access point's window: %w", x.werr)
	}
	if keep {
		x.buf = append(x.buf, b...)
	} else {
		x.buf, x.off = x.buf[:0], x.pos+int64(len(b))
	}
	x.pos += int64(len(b))
	if in := x.d.inBase + int64(x.d.pos); x.progress != nil && in-x.last >= 1<<20 {
		x.last = in
		x.progress(in)
	}
	switch {
	case err == io.EOF:
		x.done = true
		x.ix.Size = x.pos
		if len(x.ix.Points) == 0 {
			x.err = errors.New("empty compressed stream")
			return x.err
		}
		return io.EOF
	case err != nil:
		x.err = err
		return err
	}
	return nil
}

// Finish decodes the rest of the stream and returns its index.
func (x *Indexer) Finish() (*Index, error) {
	for {
		if err := x.next(false); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
	}
	if x.back != nil {
		x.back.Close()
	}
	ix := x.ix
	return &ix, nil
}

// ReadAt reads the decompressed stream at off.
func (x *Indexer) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("negative offset %d", off)
	}
	end := off + int64(len(p))
	if off < x.off {
		// Behind what is kept: decode again from a recorded point, up
		// to where the main inflater is.
		if x.back == nil {
			x.back = NewReaderAt(&Index{}, x.src, x.size)
		}
		x.back.ix = &Index{Kind: x.ix.Kind, Size: x.pos, Points: x.ix.Points}
		n, err := x.back.ReadAt(p[:min(end, x.off)-off], off)
		if err != nil && err != io.EOF {
			return n, err
		}
		if int64(n) < min(end, x.off)-off {
			return n, io.ErrUnexpectedEOF
		}
		if end <= x.off {
			return n, nil
		}
		m, err := x.ReadAt(p[n:], x.off)
		return n + m, err
	}
	for x.pos < end {
		if cut := min(off, x.pos-keepBehind) - x.off; cut > 0 && len(x.buf) > 2*keepBehind {
			x.buf = x.buf[:copy(x.buf, x.buf[cut:])]
			x.off += cut
		}
		if off > x.pos+outChunk && len(x.buf) > 0 {
			// Far ahead: nothing kept is wanted.
			x.buf, x.off = x.buf[:0], x.pos
		}
		keep := off <= x.pos+outChunk
		if err := x.next(keep); err == io.EOF {
			break
		} else if err != nil {
			return 0, err
		}
	}
	if off >= x.pos {
		return 0, io.EOF
	}
	n := copy(p, x.buf[off-x.off:min(end, x.pos)-x.off])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// GzipSize returns the length of the decompressed stream of a gzip file
// of one member under 4 GiB, from the length its trailer records (ISIZE,
// modulo 2^32); for any other file it is a guess to check.
func GzipSize(src io.ReaderAt, size int64) (int64, bool) {
	if size < 18 {
		return 0, false
	}
	var b [4]byte
	if _, err := src.ReadAt(b[:], size-4); err != nil {
		return 0, false
	}
	return int64(b[0]) | int64(b[1])<<8 | int64(b[2])<<16 | int64(b[3])<<24, true
}
