// Package zaccess reads gzip, zlib and zstd files at random access, with
// the technique of zlib's zran.c example: one pass over a file records
// access points every so much output (Build) or at the last place before
// each offset its caller names (NewCutIndexer: the start of each block),
// each enough state to start decompressing there, so that any range of the
// decompressed stream can later be produced by decompressing from the
// access point before it.
//
// A DEFLATE access point is a block boundary: the bit offset of the block
// in the compressed stream and the 32 KiB of output before it, which later
// blocks may refer back into. Neither the standard library nor
// klauspost/compress says where their blocks start, so this package has
// its own inflater, which does. The start of a gzip member (pigz -i, BGZF
// and concatenated files have many) and of a zstd frame needs no history
// and is an access point for free; a zstd frame has no other.
package zaccess

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/klauspost/compress/flate"
)

// Point is an access point.
type Point struct {
	Out int64 // offset in the decompressed stream
	In  int64 // bit offset in the compressed stream (a multiple of 8 at a Member)
	// Member says In is where a gzip member, zlib stream or zstd frame
	// starts, which needs no history.
	Member bool
	// Window is the WindowSize bytes of output before Out (fewer near the
	// start of its member), DEFLATE-compressed; nil at a Member.
	Window []byte
}

// Index is the access points of one compressed file.
type Index struct {
	Kind   Kind
	Size   int64 // bytes of decompressed output
	Points []Point
}

// Sniff says which kind of compressed stream head starts, from its magic
// bytes: gzip and zstd only, whose magic numbers plain data does not
// start with; a zlib header is two bytes that text can begin with too. A
// zstd skippable frame (magic 0x184D2A50 to 0x184D2A5F, little-endian)
// counts as zstd: pzstd starts every file with one (it holds the size of
// the frame that follows), and zstd decoders skip them.
func Sniff(head []byte) (Kind, bool) {
	switch {
	case len(head) >= 3 && head[0] == 0x1f && head[1] == 0x8b && head[2] == 8:
		return Gzip, true
	case len(head) >= 4 && head[0] == 0x28 && head[1] == 0xb5 && head[2] == 0x2f && head[3] == 0xfd:
		return Zstd, true
	case len(head) >= 4 && head[0]&0xf0 == 0x50 && head[1] == 0x2a && head[2] == 0x4d && head[3] == 0x18:
		return Zstd, true
	}
	return 0, false
}

// IsZlibHeader says whether head starts with a valid zlib header (RFC
// 1950: DEFLATE with a window of at most 32 KiB, and the header check).
func IsZlibHeader(head []byte) bool {
	return len(head) >= 2 && head[0]&0x0f == 8 && head[0]>>4 <= 7 && (uint16(head[0])<<8|uint16(head[1]))%31 == 0
}

// Build reads the compressed stream src of size bytes from its start to
// its end, checking it (CRC-32 and length of every gzip member, Adler-32
// of a zlib stream, zstd's own checks), and records an access point at
// the first place it can at least span bytes of output after the last one
// (the first is at 0). progress, if set, is called now and then with the
// compressed bytes read so far.
func Build(src io.ReaderAt, size int64, kind Kind, span int64, progress func(int64)) (*Index, error) {
	if kind == Zstd {
		return buildZstd(src, size, span, progress)
	}
	return NewIndexer(src, size, kind, span, progress).Finish()
}

// find returns the last point at or before off.
func (ix *Index) find(off int64) Point {
	i, found := slices.BinarySearchFunc(ix.Points, off, func(p Point, off int64) int {
		switch {
		case p.Out < off:
			return -1
		case p.Out > off:
			return 1
		}
		return 0
	})
	if !found {
		i--
	}
	// Several points may share an offset (empty members): the first.
	for i > 0 && ix.Points[i-1].Out == ix.Points[i].Out {
		i--
	}
	return ix.Points[max(i, 0)]
}

// PointsFor returns the access points that reading at each of offs (in
// increasing order) starts from, and the first point: the ones an index
// needs whose reads start only at offs.
func (ix *Index) PointsFor(offs []int64) []Point {
	if len(ix.Points) == 0 {
		return nil
	}
	out := []Point{ix.Points[0]}
	for _, off := range offs {
		if p := ix.find(off); p.In > out[len(out)-1].In {
			out = append(out, p)
		}
	}
	return out
}

// PointBefore returns the offset in the decompressed stream of the access
// point that reading at off starts from.
func (ix *Index) PointBefore(off int64) int64 { return ix.find(off).Out }

// InputStart returns the byte of the compressed stream that reading from
// the access point at output offset out starts at.
func (ix *Index) InputStart(out int64) int64 { return ix.find(out).In / 8 }

// InputEnd returns how far into a compressed file of size bytes, whose
// index is ix, reading must go to decompress its output up to offset end:
// to the first access point at or after end (a block or frame boundary),
// plus the few bytes an inflater reads ahead; size if there is none.
func (ix *Index) InputEnd(end, size int64) int64 {
	i, _ := slices.BinarySearchFunc(ix.Points, end, func(p Point, end int64) int {
		return cmp.Compare(p.Out, end)
	})
	switch {
	case i == len(ix.Points):
		return size
	case ix.Kind == Zstd:
		// A frame start: klauspost's decoder then meets a clean end.
		return ix.Points[i].In / 8
	}
	return min(size, ix.Points[i].In/8+16)
}

// Decoder decompresses ranges of files from their access points. It keeps
// its buffers from one range to the next; it is not safe for concurrent
// use.
type Decoder struct {
	inf  *inflater
	zst  *zstdDecoder
	win  bytes.Buffer
	wr   io.ReadCloser
	skip []byte
	// After a ReadAt of a gzip or zlib file, its index and the output
	// offset the inflater stands at: a later ReadAt of the same file
	// further on, before the next access point, decodes on from there.
	cur *Index
	pos int64
	src io.ReaderAt // the file a zstd decoder reads, which it cannot be moved off
}

// Open returns a reader of the decompressed stream of the file src of
// size bytes, whose index is ix, from offset off to its end. The reader
// is valid until the next Open.
func (dc *Decoder) Open(ix *Index, src io.ReaderAt, size int64, off int64) (io.Reader, error) {
	dc.cur = nil
	return dc.open(ix, src, size, off)
}

func (dc *Decoder) open(ix *Index, src io.ReaderAt, size int64, off int64) (io.Reader, error) {
	if off < 0 || off > ix.Size {
		return nil, fmt.Errorf("offset %d outside the %d decompressed bytes", off, ix.Size)
	}
	p := ix.find(off)
	var r io.Reader
	if ix.Kind == Zstd {
		if dc.zst == nil {
			dc.zst = &zstdDecoder{}
		}
		zr, err := dc.zst.open(src, size, p.In/8)
		if err != nil {
			return nil, err
		}
		r = zr
	} else {
		dc.win.Reset()
		if p.Window != nil {
			if dc.wr == nil {
				dc.wr = flate.NewReader(bytes.NewReader(p.Window))
			} else if err := dc.wr.(flate.Resetter).Reset(bytes.NewReader(p.Window), nil); err != nil {
				return nil, err
			}
			if _, err := dc.win.ReadFrom(dc.wr); err != nil {
				return nil, fmt.Errorf("the window of the access point at %d is damaged: %w", p.Out, err)
			}
		}
		base := p.In / 8
		in := io.NewSectionReader(src, base, size-base)
		if dc.inf == nil || dc.inf.kind != ix.Kind {
			// A decoder serves files of every kind in turn.
			dc.inf = newInflater(in, ix.Kind)
		}
		if err := dc.inf.reset(in, base, uint(p.In%8), p.Out, dc.win.Bytes(), p.Member); err != nil {
			return nil, err
		}
		r = dc.inf
	}
	if err := dc.discard(r, off-p.Out); err != nil {
		return nil, err
	}
	return r, nil
}

// discard reads n bytes from r.
func (dc *Decoder) discard(r io.Reader, n int64) error {
	for n > 0 {
		if dc.skip == nil {
			dc.skip = make([]byte, 64<<10)
		}
		k, err := r.Read(dc.skip[:min(n, int64(len(dc.skip)))])
		n -= int64(k)
		if err != nil && n > 0 {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// ReadAt fills p with the decompressed bytes at off, calling filled (if
// set) with the bytes filled so far as they arrive.
func (dc *Decoder) ReadAt(ix *Index, src io.ReaderAt, size int64, p []byte, off int64, filled func(int) error) error {
	var r io.Reader
	cont := dc.cur == ix && dc.pos <= off && ix.PointBefore(off) <= dc.pos
	if ix.Kind == Zstd {
		cont = cont && dc.src == src
	} else {
		cont = cont && !dc.inf.eof
	}
	dc.cur = nil // until this read succeeds
	if cont {
		// Decode on: the records of one buffer, read in file order,
		// cost one pass over each stretch between access points.
		if ix.Kind == Zstd {
			r = dc.zst.dec
		} else {
			if err := dc.inf.rebind(src, size); err != nil {
				return err
			}
			r = dc.inf
		}
		if err := dc.discard(r, off-dc.pos); err != nil {
			return err
		}
	} else {
		var err error
		if r, err = dc.open(ix, src, size, off); err != nil {
			return err
		}
	}
	got := 0
	for got < len(p) {
		n, err := r.Read(p[got:min(len(p), got+outChunk)])
		got += n
		if err != nil && got < len(p) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if filled != nil && got < len(p) {
			if err := filled(got); err != nil {
				return err
			}
		}
	}
	if filled != nil {
		if err := filled(got); err != nil {
			return err
		}
	}
	dc.cur, dc.pos, dc.src = ix, off+int64(len(p)), src
	return nil
}
