package zaccess

// The DEFLATE blocks (RFC 1951): a block's header, the dynamic Huffman
// tables, and the decoding of stored and Huffman-coded data into the
// history.

import (
	"encoding/binary"
)

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
