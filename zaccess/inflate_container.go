package zaccess

// The containers of a DEFLATE stream: the gzip member's and the zlib
// stream's header, read before the first block, and their trailer, checked
// after the last.

import (
	"fmt"
)

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
