package formats

// The tar layer under WebDataset: member headers, their checksums and
// numbers, pax and GNU long names, and the sources the member walker reads
// an archive from (a file at offsets, a block in memory, a stream).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

const (
	tarBlock = 512
	// maxTarMeta bounds the pax and long-name data read into memory.
	maxTarMeta = 1 << 20
)

var errNeedMore = errors.New("need more bytes")

// tarSrc gives the member walker the bytes of an archive.
type tarSrc interface {
	// bytes returns the n bytes at off (headers, pax data), valid until
	// the next call.
	bytes(off, n int64) ([]byte, error)
	// skip passes over the n data bytes of a member at off.
	skip(off, n int64) error
}

// tarMember is one member of an archive, with the extended headers
// before it: its bytes are [start, end).
type tarMember struct {
	start, end int64
	name       []byte // valid until the next call of nextMember
	flag       byte
	eoa        bool  // a zero block: the end-of-archive marker
	data, size int64 // where its data starts, and its length
}

func pad512(n int64) int64 { return (n + tarBlock - 1) / tarBlock * tarBlock }

// nextMember reads the member at off. Its name is built in *nb, reused
// from member to member, so that walking a block allocates nothing.
func nextMember(src tarSrc, off int64, nb *[]byte) (tarMember, error) {
	m := tarMember{start: off}
	var haveLong, havePax bool
	paxSize := int64(-1)
	for {
		h, err := src.bytes(off, tarBlock)
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return m, &CorruptError{Offset: off, Reason: "truncated tar: no end-of-archive marker (a shard cut short?)"}
			}
			return m, err
		}
		if isZero(h) {
			if off != m.start {
				return m, &CorruptError{Offset: off, Reason: "end-of-archive marker right after an extended header"}
			}
			m.eoa, m.end = true, off+tarBlock
			return m, nil
		}
		if err := tarChecksum(h); err != nil {
			return m, &CorruptError{Offset: off, Reason: fmt.Sprintf("tar header of %q: %v", cString(h[:100]), err)}
		}
		flag := h[156]
		size, err := tarNumber(h[124:136])
		if err != nil {
			return m, &CorruptError{Offset: off, Reason: fmt.Sprintf("tar header of %q: size: %v", cString(h[:100]), err)}
		}
		switch flag {
		case 'x', 'L', 'K':
			if size > maxTarMeta {
				return m, &CorruptError{Offset: off, Reason: fmt.Sprintf("extended header of %d bytes (at most %d)", size, maxTarMeta)}
			}
			d, err := src.bytes(off+tarBlock, size)
			if err != nil {
				if errors.Is(err, io.ErrUnexpectedEOF) {
					return m, &CorruptError{Offset: off, Reason: "truncated tar: extended header runs past the end"}
				}
				return m, err
			}
			switch flag {
			case 'x':
				var path []byte
				if path, paxSize, err = parsePAX(d, paxSize); err != nil {
					return m, &CorruptError{Offset: off, Reason: fmt.Sprintf("pax header: %v", err)}
				}
				if path != nil {
					*nb, havePax = append((*nb)[:0], path...), true
				}
			case 'L':
				if !havePax { // a pax path wins, as in archive/tar
					*nb, haveLong = append((*nb)[:0], cBytes(d)...), true
				}
			}
			off += tarBlock + pad512(size)
			continue
		case 'g':
			return m, &CorruptError{Offset: off, Reason: "global pax header (typeflag 'g'): not supported in a WebDataset shard, since its settings would apply to the samples of other shards in a part; rewrite the shard without it"}
		case 'S', 'M', 'V', 'N', 'D':
			return m, &CorruptError{Offset: off, Reason: fmt.Sprintf("tar member %q of GNU type %q is not supported", cString(h[:100]), flag)}
		}
		if !havePax && !haveLong {
			*nb = (*nb)[:0]
			if string(h[257:263]) == "ustar\x00" {
				if p := cBytes(h[345:500]); len(p) > 0 {
					*nb = append(append(*nb, p...), '/')
				}
			}
			*nb = append(*nb, cBytes(h[:100])...)
		}
		name := *nb
		if paxSize >= 0 {
			size = paxSize
		}
		switch flag {
		case '1', '2', '3', '4', '5', '6':
			size = 0 // header-only types, as archive/tar reads them
		}
		if err := src.skip(off+tarBlock, pad512(size)); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return m, &CorruptError{Offset: off, Reason: fmt.Sprintf("truncated tar: the data of member %q runs past the end", name)}
			}
			return m, err
		}
		m.name, m.flag, m.end = name, flag, off+tarBlock+pad512(size)
		m.data, m.size = off+tarBlock, size
		return m, nil
	}
}

// readerAtSrc is a tarSrc over an io.ReaderAt.
type readerAtSrc struct {
	r   io.ReaderAt
	end int64
	buf []byte
}

func (s *readerAtSrc) bytes(off, n int64) ([]byte, error) {
	if off+n > s.end {
		return nil, io.ErrUnexpectedEOF
	}
	if int64(cap(s.buf)) < n {
		s.buf = make([]byte, max(n, 4<<10))
	}
	b := s.buf[:n]
	k, err := s.r.ReadAt(b, off)
	if int64(k) < n {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("short read at offset %d: file shorter than expected: %w", off+int64(k), io.ErrUnexpectedEOF)
		}
		return nil, err
	}
	return b, nil
}

func (s *readerAtSrc) skip(off, n int64) error {
	if off+n > s.end {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// zeroFrom checks that the bytes from off to the end are zeros: what
// follows the end-of-archive marker is padding, never more members.
func (s *readerAtSrc) zeroFrom(off int64) error {
	for off < s.end {
		b, err := s.bytes(off, min(s.end-off, 64<<10))
		if err != nil {
			return err
		}
		if i := bytes.IndexFunc(b, func(r rune) bool { return r != 0 }); i >= 0 {
			return &CorruptError{Offset: off + int64(i), Reason: "data after the end-of-archive marker (two archives concatenated?)"}
		}
		off += int64(len(b))
	}
	return nil
}

// memSrc is a tarSrc over a block being loaded: only buf[:filled] is
// there yet.
type memSrc struct {
	buf    []byte
	filled int64
}

func (s *memSrc) bytes(off, n int64) ([]byte, error) {
	if err := s.skip(off, n); err != nil {
		return nil, err
	}
	return s.buf[off : off+n], nil
}

func (s *memSrc) skip(off, n int64) error {
	switch {
	case off+n <= s.filled:
		return nil
	case s.filled < int64(len(s.buf)):
		return errNeedMore
	}
	return io.ErrUnexpectedEOF
}

// streamSrc is a tarSrc over a stream: what it reads accumulates in buf,
// whose first byte is at offset pos of the stream.
type streamSrc struct {
	r   io.Reader
	buf []byte
	pos int64
}

func (s *streamSrc) fill(upTo int64) error {
	need := upTo - s.pos
	if need <= int64(len(s.buf)) {
		return nil
	}
	n := int64(len(s.buf))
	s.buf = append(s.buf, make([]byte, need-n)...)
	k, err := io.ReadFull(s.r, s.buf[n:])
	if err != nil {
		s.buf = s.buf[:n+int64(k)]
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

func (s *streamSrc) bytes(off, n int64) ([]byte, error) {
	if err := s.fill(off + n); err != nil {
		return nil, err
	}
	return s.buf[off-s.pos : off-s.pos+n], nil
}

func (s *streamSrc) skip(off, n int64) error { return s.fill(off + n) }

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// cBytes returns b up to its first NUL.
func cBytes(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return b
}

// cString returns b up to its first NUL.
func cString(b []byte) string { return string(cBytes(b)) }

// tarChecksum checks a header's checksum: the sum of its bytes with the
// checksum field read as spaces, unsigned or (as old tars wrote it)
// signed.
func tarChecksum(h []byte) error {
	want, err := tarNumber(h[148:156])
	if err != nil {
		return fmt.Errorf("checksum field: %v", err)
	}
	// The checksum field counts as eight spaces.
	u := unsignedSum(h[:tarBlock]) - unsignedSum(h[148:156]) + 8*' '
	if want == u {
		return nil
	}
	// Some old tar programs summed signed bytes.
	var s int64 = 8 * ' '
	for i, c := range h[:tarBlock] {
		if i < 148 || i >= 156 {
			s += int64(int8(c))
		}
	}
	if want != s {
		return fmt.Errorf("header checksum mismatch: stored %d, computed %d", want, u)
	}
	return nil
}

// unsignedSum is the sum of the bytes of b, eight at a time: a header
// checksum byte by byte took a quarter of a warm epoch's daemon CPU for
// samples of small members.
func unsignedSum(b []byte) int64 {
	const lanes = 0x00ff00ff00ff00ff
	var sum int64
	for len(b) >= 8 {
		// Up to 128 words per round: each 16-bit lane then holds at most
		// 256 bytes' worth, 65280.
		var acc uint64
		n := min(len(b)/8, 128)
		for i := range n {
			w := binary.LittleEndian.Uint64(b[8*i:])
			acc += w&lanes + (w>>8)&lanes
		}
		acc = acc&0x0000ffff0000ffff + (acc>>16)&0x0000ffff0000ffff
		sum += int64(acc&0xffffffff + acc>>32)
		b = b[8*n:]
	}
	for _, c := range b {
		sum += int64(c)
	}
	return sum
}

// tarNumber parses a numeric header field: octal text, or GNU base-256
// when its first byte has the high bit set.
func tarNumber(f []byte) (int64, error) {
	if len(f) > 0 && f[0]&0x80 != 0 {
		if f[0] == 0xff {
			return 0, errors.New("negative base-256 number")
		}
		v := int64(f[0] & 0x7f)
		for _, c := range f[1:] {
			if v > (1<<62)>>8 {
				return 0, errors.New("base-256 number too large")
			}
			v = v<<8 | int64(c)
		}
		return v, nil
	}
	s := strings.Trim(string(f), " \x00")
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 8, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an octal number", f)
	}
	return v, nil
}

// parsePAX reads the path and size records of a pax extended header:
// path is nil and size unchanged when it has none.
func parsePAX(d []byte, size int64) (path []byte, _ int64, _ error) {
	for len(d) > 0 {
		sp := bytes.IndexByte(d, ' ')
		if sp <= 0 {
			return path, size, errors.New("malformed record")
		}
		n, err := strconv.Atoi(string(d[:sp]))
		if err != nil || n <= sp+1 || n > len(d) || d[n-1] != '\n' {
			return path, size, errors.New("malformed record length")
		}
		k, v, ok := bytes.Cut(d[sp+1:n-1], []byte{'='})
		if !ok {
			return path, size, errors.New("record without '='")
		}
		switch string(k) {
		case "path":
			path = v
		case "size":
			if size, err = strconv.ParseInt(string(v), 10, 64); err != nil || size < 0 {
				return path, size, fmt.Errorf("bad size %q", v)
			}
		}
		d = d[n:]
	}
	return path, size, nil
}
