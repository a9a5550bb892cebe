package zaccess

import (
	"fmt"
	"hash/adler32"
	"hash/crc32"
	"io"
)

// WindowSize is the history DEFLATE may refer back into.
const WindowSize = 32 << 10

const (
	outChunk = 256 << 10 // decoded between two slides of the history
	inChunk  = 128 << 10
	inPad    = 16 // zero bytes after the real end, so the fast refill never checks bounds
	maxMatch = 258
)

// Kind is the container of a DEFLATE stream.
type Kind uint8

const (
	Gzip Kind = iota + 1 // RFC 1952, any number of members
	Zlib                 // RFC 1950, one stream
	Zstd                 // RFC 8878 frames (not DEFLATE; see zstd.go)
)

func (k Kind) String() string {
	switch k {
	case Gzip:
		return "gzip"
	case Zlib:
		return "zlib"
	case Zstd:
		return "zstd"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// FormatError is damage in a compressed stream, at a byte offset of it.
type FormatError struct {
	Offset int64
	Reason string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("corrupt compressed data at byte %d: %s", e.Offset, e.Reason)
}

type state uint8

const (
	stHeader  state = iota // a gzip member or zlib stream header is next
	stBlock                // a DEFLATE block header is next
	stHuffman              // inside a Huffman-coded block
	stStored               // inside a stored block
	stTrailer              // the member's or stream's trailer is next
	stDone
)

// inflater decodes a gzip or zlib stream, from its start or from an
// access point, and says where every DEFLATE block starts, for Build.
type inflater struct {
	r    io.Reader
	kind Kind

	in     []byte // in[pos:] not yet in bits; the last inPad bytes past the end are zeros
	pos    int
	inBase int64 // stream offset of in[0]
	end    int   // len of the real bytes in in, once eof
	eof    bool
	rerr   error
	bits   uint64
	nb     uint

	hist []byte // the last WindowSize bytes of output, then the new ones
	w    int    // hist[:w] is written
	lo   int    // hist[lo:w] is valid history
	rd   int    // hist[rd:w] is not yet read
	out  int64  // output offset of hist[w]

	st       state
	final    bool
	stored   int
	lit, dst *table
	dynLit   table
	dynDist  table
	fixLit   table
	fixDist  table

	// Checks of the member being decoded; only from its start.
	checked  bool
	crc      uint32
	adler    hashAdler
	memberIn int64 // where the member's header starts
	sumFrom  int   // hist[sumFrom:w] not yet in crc
	mOut     int64 // output of the member so far, at sumFrom

	err error

	// onBlock, if set, is called before every DEFLATE block header with
	// its bit offset and the output offset; first is set for the first
	// block of a member.
	onBlock func(bit, out int64, first bool)
	first   bool
}

type hashAdler interface {
	io.Writer
	Sum32() uint32
	Reset()
}

func newInflater(r io.Reader, kind Kind) *inflater {
	d := &inflater{r: r, kind: kind, in: make([]byte, 0, inChunk+inPad), hist: make([]byte, WindowSize+outChunk+maxMatch)}
	d.fixLit, d.fixDist = fixedTables()
	if kind == Zlib {
		d.adler = adler32.New()
	}
	d.w, d.lo, d.rd, d.sumFrom = WindowSize, WindowSize, WindowSize, WindowSize
	return d
}

// reset makes d decode from r, whose first byte is at stream offset base,
// starting bit bits into it, with output offset out and history window.
// At a member start (member set), bit must be 0.
func (d *inflater) reset(r io.Reader, base int64, bit uint, out int64, window []byte, member bool) error {
	d.r = r
	d.in, d.pos, d.inBase, d.end, d.eof, d.rerr = d.in[:0], 0, base, 0, false, nil
	d.bits, d.nb = 0, 0
	d.w = WindowSize
	d.lo = WindowSize - copy(d.hist[WindowSize-min(len(window), WindowSize):WindowSize], window[max(0, len(window)-WindowSize):])
	d.rd, d.sumFrom = d.w, d.w
	d.out = out
	d.err = nil
	d.final = false
	d.checked = member
	if member {
		d.st = stHeader
		return nil
	}
	d.st = stBlock
	if bit > 0 {
		if err := d.need(bit); err != nil {
			return err
		}
		d.drop(bit)
	}
	return nil
}

// rebind makes d read the rest of its input from src, a file of size
// bytes with the same contents (the same file opened again).
func (d *inflater) rebind(src io.ReaderAt, size int64) error {
	if d.eof {
		return nil
	}
	next := d.inBase + int64(len(d.in))
	if next > size {
		return fmt.Errorf("compressed file shrank to %d bytes", size)
	}
	d.r = io.NewSectionReader(src, next, size-next)
	return nil
}

// inOff returns the stream offset, in bits, of the next unread bit.
func (d *inflater) inOff() int64 { return (d.inBase+int64(d.pos))*8 - int64(d.nb) }

// fill reads more input, keeping in[pos:].
func (d *inflater) fill() {
	if d.eof {
		return
	}
	if d.pos > 0 {
		n := copy(d.in[:cap(d.in)], d.in[d.pos:])
		d.inBase += int64(d.pos)
		d.in, d.pos = d.in[:n], 0
	}
	for len(d.in) < cap(d.in)-inPad && !d.eof {
		n, err := d.r.Read(d.in[len(d.in) : cap(d.in)-inPad])
		d.in = d.in[:len(d.in)+n]
		if err != nil {
			d.eof = true
			if err != io.EOF {
				d.rerr = err
			}
		}
		if n > 0 && len(d.in)-d.pos >= 8 {
			break
		}
	}
	if d.eof {
		d.end = len(d.in)
		d.in = append(d.in, make([]byte, inPad)...)
	}
}

// need makes sure d.bits holds n <= 56 bits, or says the input ended.
func (d *inflater) need(n uint) error {
	for d.nb < n {
		if d.pos >= len(d.in)-inPadIf(d.eof) {
			if d.eof {
				return d.truncated()
			}
			d.fill()
			continue
		}
		d.bits |= uint64(d.in[d.pos]) << d.nb
		d.pos++
		d.nb += 8
	}
	return nil
}

func inPadIf(eof bool) int {
	if eof {
		return inPad
	}
	return 0
}

func (d *inflater) drop(n uint) {
	d.bits >>= n
	d.nb -= n
}

func (d *inflater) getBits(n uint) (uint32, error) {
	if err := d.need(n); err != nil {
		return 0, err
	}
	v := uint32(d.bits & (1<<n - 1))
	d.drop(n)
	if d.overrun() {
		return 0, d.truncated()
	}
	return v, nil
}

func (d *inflater) byte() (byte, error) {
	v, err := d.getBits(8)
	return byte(v), err
}

// truncated is the error of input that ends too soon.
func (d *inflater) truncated() error {
	if d.rerr != nil {
		return fmt.Errorf("read compressed data at byte %d: %w", d.inBase+int64(d.end), d.rerr)
	}
	return fmt.Errorf("compressed data ends at byte %d before the end of its stream (truncated file?): %w", d.inBase+int64(d.end), io.ErrUnexpectedEOF)
}

// overrun says whether the fast path has used padding bits: the stream
// is truncated.
func (d *inflater) overrun() bool {
	return d.eof && d.inOff() > (d.inBase+int64(d.end))*8
}

func (d *inflater) corrupt(format string, args ...any) error {
	return &FormatError{Offset: d.inOff() / 8, Reason: fmt.Sprintf(format, args...)}
}

// Read decodes into p.
func (d *inflater) Read(p []byte) (int, error) {
	b, err := d.next(len(p))
	return copy(p, b), err
}

// next returns up to max bytes of output, valid until the next call.
func (d *inflater) next(max int) ([]byte, error) {
	for d.rd == d.w {
		if d.err != nil {
			return nil, d.err
		}
		if d.st == stDone {
			d.err = io.EOF
			return nil, io.EOF
		}
		if d.w > WindowSize+outChunk-maxMatch {
			d.slide()
		}
		if err := d.step(); err != nil {
			d.err = err
		}
	}
	b := d.hist[d.rd:min(d.w, d.rd+max)]
	d.rd += len(b)
	return b, nil
}

// slide keeps the last WindowSize bytes of history at the front of hist.
func (d *inflater) slide() {
	d.sum()
	keep := min(WindowSize, d.w-d.lo)
	copy(d.hist[WindowSize-keep:], d.hist[d.w-keep:d.w])
	d.lo = WindowSize - keep
	d.rd = WindowSize - (d.w - d.rd)
	d.w, d.sumFrom = WindowSize, WindowSize
}

// sum adds the new output to the member's check.
func (d *inflater) sum() {
	if d.checked && d.sumFrom < d.w {
		b := d.hist[d.sumFrom:d.w]
		if d.kind == Gzip {
			d.crc = crc32.Update(d.crc, crc32.IEEETable, b)
		} else {
			d.adler.Write(b)
		}
		d.mOut += int64(len(b))
	}
	d.sumFrom = d.w
}

// window returns the last WindowSize bytes of output (fewer at the start).
func (d *inflater) window() []byte { return d.hist[max(d.lo, d.w-WindowSize):d.w] }

// step decodes until some output is made, the history is full, or the
// stream ends.
func (d *inflater) step() error {
	for d.rd == d.w && d.w <= WindowSize+outChunk-maxMatch {
		switch d.st {
		case stHeader:
			if err := d.header(); err != nil {
				return err
			}
		case stBlock:
			if d.final {
				d.st = stTrailer
				continue
			}
			if err := d.blockHeader(); err != nil {
				return err
			}
		case stStored:
			if err := d.copyStored(); err != nil {
				return err
			}
		case stHuffman:
			if err := d.huffman(); err != nil {
				return err
			}
		case stTrailer:
			if err := d.trailer(); err != nil {
				return err
			}
		case stDone:
			return nil
		}
	}
	return nil
}
