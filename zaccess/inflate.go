package zaccess

import (
	"encoding/binary"
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

func (d *inflater) header() error {
	d.memberIn = d.inOff() / 8
	d.checked, d.crc, d.mOut, d.final = true, 0, 0, false
	d.sumFrom = d.w
	// A member is a stream of its own: nothing before it may be referred to.
	d.lo = d.w
	d.first = true
	if d.kind == Zlib {
		d.adler.Reset()
		cmf, err := d.byte()
		if err != nil {
			return err
		}
		flg, err := d.byte()
		if err != nil {
			return err
		}
		switch {
		case cmf&0x0f != 8 || cmf>>4 > 7:
			return d.corrupt("not a zlib stream (header %02x %02x)", cmf, flg)
		case (uint16(cmf)<<8|uint16(flg))%31 != 0:
			return d.corrupt("zlib header check fails (%02x %02x)", cmf, flg)
		case flg&0x20 != 0:
			return d.corrupt("zlib stream needs a preset dictionary, which corgifs cannot supply")
		}
		d.st = stBlock
		return nil
	}
	var h [10]byte
	for i := range h {
		b, err := d.byte()
		if err != nil {
			return err
		}
		h[i] = b
	}
	if h[0] != 0x1f || h[1] != 0x8b || h[2] != 8 {
		return &FormatError{Offset: d.memberIn, Reason: fmt.Sprintf("not a gzip member (bytes %02x %02x %02x)", h[0], h[1], h[2])}
	}
	flg := h[3]
	if flg&0xe0 != 0 {
		return d.corrupt("reserved gzip header flags set (%02x)", flg)
	}
	if flg&4 != 0 { // FEXTRA
		lo, err := d.byte()
		if err != nil {
			return err
		}
		hi, err := d.byte()
		if err != nil {
			return err
		}
		for range int(lo) | int(hi)<<8 {
			if _, err := d.byte(); err != nil {
				return err
			}
		}
	}
	for _, f := range []byte{8, 16} { // FNAME, FCOMMENT: zero-terminated
		if flg&f == 0 {
			continue
		}
		for {
			b, err := d.byte()
			if err != nil {
				return err
			}
			if b == 0 {
				break
			}
		}
	}
	if flg&2 != 0 { // FHCRC
		if _, err := d.getBits(16); err != nil {
			return err
		}
	}
	d.st = stBlock
	return nil
}

func (d *inflater) blockHeader() error {
	if d.onBlock != nil {
		d.onBlock(d.inOff(), d.out, d.first)
	}
	d.first = false
	h, err := d.getBits(3)
	if err != nil {
		return err
	}
	d.final = h&1 != 0
	switch h >> 1 {
	case 0:
		d.drop(d.nb % 8)
		v, err := d.getBits(32)
		if err != nil {
			return err
		}
		if uint16(v) != ^uint16(v>>16) {
			return d.corrupt("stored block length %d does not match its complement", uint16(v))
		}
		d.stored = int(uint16(v))
		d.st = stStored
	case 1:
		d.lit, d.dst = &d.fixLit, &d.fixDist
		d.st = stHuffman
	case 2:
		if err := d.dynamic(); err != nil {
			return err
		}
		d.lit, d.dst = &d.dynLit, &d.dynDist
		d.st = stHuffman
	default:
		return d.corrupt("invalid block type 3")
	}
	return nil
}

var clenOrder = [19]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

func (d *inflater) dynamic() error {
	h, err := d.getBits(14)
	if err != nil {
		return err
	}
	nlit, ndist, nclen := int(h&31)+257, int(h>>5&31)+1, int(h>>10)+4
	if nlit > 286 || ndist > 30 {
		return d.corrupt("too many length or distance codes (%d, %d)", nlit, ndist)
	}
	var cl [19]uint8
	for i := range nclen {
		v, err := d.getBits(3)
		if err != nil {
			return err
		}
		cl[clenOrder[i]] = uint8(v)
	}
	var ct table
	var ctab [1 << clenRoot]uint32
	ct.e = ctab[:0]
	if err := ct.build(cl[:], clenRoot, clenSym); err != nil {
		return d.corrupt("invalid code length code")
	}
	var lens [286 + 30]uint8
	for i := 0; i < nlit+ndist; {
		if err := d.need(7); err != nil {
			// Fewer bits may do near the end of the input.
			if d.nb == 0 {
				return err
			}
		}
		e := ct.e[d.bits&ct.mask]
		n := uint(e & 0xff)
		if e>>8&0xff == opBad || n == 0 {
			return d.corrupt("invalid code length code")
		}
		if n > d.nb {
			return d.truncated()
		}
		d.drop(n)
		sym := e >> 16
		if sym < 16 {
			lens[i] = uint8(sym)
			i++
			continue
		}
		var rep int
		var val uint8
		switch sym {
		case 16:
			if i == 0 {
				return d.corrupt("repeat of no code length")
			}
			v, err := d.getBits(2)
			if err != nil {
				return err
			}
			rep, val = 3+int(v), lens[i-1]
		case 17:
			v, err := d.getBits(3)
			if err != nil {
				return err
			}
			rep = 3 + int(v)
		default:
			v, err := d.getBits(7)
			if err != nil {
				return err
			}
			rep = 11 + int(v)
		}
		if i+rep > nlit+ndist {
			return d.corrupt("code lengths repeat past their end")
		}
		for range rep {
			lens[i] = val
			i++
		}
	}
	if d.overrun() {
		return d.truncated()
	}
	if lens[256] == 0 {
		return d.corrupt("no end-of-block code")
	}
	if err := d.dynLit.build(lens[:nlit], litRoot, litSym); err != nil {
		return d.corrupt("invalid literal/length code lengths")
	}
	if err := d.dynDist.build(lens[nlit:nlit+ndist], distRoot, distSym); err != nil {
		return d.corrupt("invalid distance code lengths")
	}
	return nil
}

func (d *inflater) copyStored() error {
	start := d.w
	for d.stored > 0 && d.w < len(d.hist)-maxMatch {
		if d.nb >= 8 {
			d.hist[d.w] = byte(d.bits)
			d.w++
			d.drop(8)
			d.stored--
			continue
		}
		if d.pos >= len(d.in)-inPadIf(d.eof) {
			if d.eof {
				return d.truncated()
			}
			d.fill()
			continue
		}
		// The fast refill leaves the first bits of the next byte above
		// nb; they are not that byte's once pos moves past it.
		d.bits = 0
		n := copy(d.hist[d.w:len(d.hist)-maxMatch], d.in[d.pos:min(len(d.in)-inPadIf(d.eof), d.pos+d.stored)])
		d.w += n
		d.pos += n
		d.stored -= n
	}
	d.out += int64(d.w - start)
	if d.overrun() {
		return d.truncated()
	}
	if d.stored == 0 {
		d.st = stBlock
	}
	return nil
}

// huffman decodes symbols of a Huffman-coded block until its end, or the
// history is full. The loop keeps the decoder's state in locals.
func (d *inflater) huffman() error {
	bits, nb, in, pos := d.bits, d.nb, d.in, d.pos
	hist, w, lo := d.hist, d.w, d.lo
	lt, lmask, dt, dmask := d.lit.e, d.lit.mask, d.dst.e, d.dst.mask
	lroot, droot := d.lit.root, d.dst.root
	start := w
	limit := WindowSize + outChunk - maxMatch
	var err error
	for {
		if w > limit {
			break
		}
		if pos+8 > len(in) {
			d.bits, d.nb, d.pos = bits, nb, pos
			if d.eof {
				err = d.truncated()
				break
			}
			d.fill()
			bits, nb, in, pos = d.bits, d.nb, d.in, d.pos
			continue
		}
		if nb < 56 {
			bits |= binary.LittleEndian.Uint64(in[pos:]) << nb
			pos += int(63-nb) >> 3
			nb |= 56
		}
		e := lt[bits&lmask]
		if e>>8&0xff == opLink {
			bits >>= lroot
			nb -= lroot
			e = lt[e>>16+uint32(bits&(1<<(e&0xff)-1))]
		}
		n := uint(e & 0xff)
		bits >>= n
		nb -= n
		op := e >> 8 & 0xff
		if op == opLiteral {
			hist[w] = byte(e >> 16)
			w++
			// Two more literals fit the bits left (at least 41), when
			// their codes are no longer than the root bits: most are.
			e = lt[bits&lmask]
			if e>>8&0xff != opLiteral {
				continue
			}
			n = uint(e & 0xff)
			bits >>= n
			nb -= n
			hist[w] = byte(e >> 16)
			w++
			e = lt[bits&lmask]
			if e>>8&0xff != opLiteral {
				continue
			}
			n = uint(e & 0xff)
			bits >>= n
			nb -= n
			hist[w] = byte(e >> 16)
			w++
			continue
		}
		if op == opEnd {
			d.st = stBlock
			break
		}
		if op >= opBad {
			d.bits, d.nb, d.pos = bits, nb, pos
			err = d.corrupt("invalid literal/length code")
			break
		}
		x := uint(op - opBase)
		length := int(e>>16) + int(bits&(1<<x-1))
		bits >>= x
		nb -= x
		e = dt[bits&dmask]
		if e>>8&0xff == opLink {
			bits >>= droot
			nb -= droot
			e = dt[e>>16+uint32(bits&(1<<(e&0xff)-1))]
		}
		n = uint(e & 0xff)
		bits >>= n
		nb -= n
		op = e >> 8 & 0xff
		if op >= opBad || op < opBase {
			d.bits, d.nb, d.pos = bits, nb, pos
			err = d.corrupt("invalid distance code")
			break
		}
		x = uint(op - opBase)
		dist := int(e>>16) + int(bits&(1<<x-1))
		bits >>= x
		nb -= x
		if dist > w-lo {
			d.bits, d.nb, d.pos = bits, nb, pos
			err = d.corrupt("distance %d reaches before the start of the output", dist)
			break
		}
		from := w - dist
		if dist >= 8 {
			// Eight bytes at a time, the last word running up to 7
			// bytes past the match: hist has room after limit, and
			// those bytes are written again before they are output.
			for end := w + length; w < end; w, from = w+8, from+8 {
				binary.LittleEndian.PutUint64(hist[w:], binary.LittleEndian.Uint64(hist[from:]))
			}
			w += length - (length+7)&^7
			continue
		}
		if dist >= length {
			copy(hist[w:w+length], hist[from:from+length])
			w += length
			continue
		}
		// Overlapping: the match repeats its first dist bytes.
		end := w + length
		for w < end {
			w += copy(hist[w:end], hist[from:w])
		}
	}
	if err == nil {
		d.bits, d.nb, d.pos = bits, nb, pos
		if d.overrun() {
			err = d.truncated()
		}
	}
	d.w = w
	d.out += int64(w - start)
	return err
}

func (d *inflater) trailer() error {
	d.drop(d.nb % 8)
	d.sum()
	if d.kind == Zlib {
		v, err := d.getBits(32)
		if err != nil {
			return err
		}
		want := v>>24 | v>>8&0xff00 | v<<8&0xff0000 | v<<24
		if d.checked && want != d.adler.Sum32() {
			return d.corrupt("zlib Adler-32 mismatch (stored %08x, data %08x)", want, d.adler.Sum32())
		}
	} else {
		crc, err := d.getBits(32)
		if err != nil {
			return err
		}
		size, err := d.getBits(32)
		if err != nil {
			return err
		}
		if d.checked && (crc != d.crc || size != uint32(d.mOut)) {
			return &FormatError{Offset: d.memberIn, Reason: fmt.Sprintf("gzip member's CRC-32 or length does not match its data (stored %08x/%d, data %08x/%d)", crc, size, d.crc, uint32(d.mOut))}
		}
	}
	// More input: another gzip member, or garbage.
	ended := func() bool { return d.eof && d.inOff() >= (d.inBase+int64(d.end))*8 }
	if !ended() {
		if err := d.need(8); err != nil && !ended() {
			return err
		}
	}
	if d.kind == Gzip {
		// Zero bytes after a member are padding (tape blocks, files
		// preallocated or padded to a block size): gzip(1) ignores them
		// at the end ("trailing zeros"), and Python's gzip module skips
		// them before another member, which is decoded.
		for !ended() && d.bits&0xff == 0 {
			d.drop(8)
			if !ended() {
				if err := d.need(8); err != nil && !ended() {
					return err
				}
			}
		}
	}
	if ended() {
		d.st = stDone
		return nil
	}
	at := d.inOff() / 8
	if d.kind == Gzip {
		if err := d.need(16); err == nil && d.bits&0xffff == 0x8b1f {
			d.st = stHeader
			return nil
		}
	}
	return &FormatError{Offset: at, Reason: "trailing bytes after the end of the compressed stream"}
}
