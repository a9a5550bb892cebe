package formats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Record locates one frame in a file: Offset is where its header starts and
// Len is the whole frame length (header, data and footer).
type Record struct {
	Offset int64
	Len    int64
}

// DefaultWindow is the read size of a Scanner: large reads keep a scan at
// the disk's sequential speed.
const DefaultWindow = 4 << 20

// Scanner walks the TFRecord frames of the byte range [start, end) of an
// io.ReaderAt, checking both CRCs of every record. Its use follows
// bufio.Scanner: call Next until it returns false, then look at Err. After a
// *CorruptError, Resync skips the damaged bytes and scanning can go on.
type Scanner struct {
	r      io.ReaderAt
	end    int64
	off    int64 // offset of the next frame
	win    []byte
	winOff int64 // file offset of win[0]
	rec    Record
	err    error
	// dataLen is the length of the frame that failed its data CRC, or -1 when
	// the failure left the length itself untrustworthy.
	dataLen int64
	// grow, for a probe, is the largest window: each read after the
	// first takes a window twice the last, up to grow, so that a probe
	// among small records reads little and one among large ones few
	// times (probe_window.go). 0: the window keeps its size.
	grow int64
	read bool // a window was read
	// confirmed is the data length of the frame nextConfirmed found last.
	confirmed int64
}

// NewScanner returns a Scanner over [start, end) of r.
func NewScanner(r io.ReaderAt, start, end int64) *Scanner {
	return newScanner(r, start, end, DefaultWindow)
}

// newScanner is NewScanner with a chosen window size, so that tests can make
// reads cross window edges without multi-megabyte inputs.
func newScanner(r io.ReaderAt, start, end int64, window int) *Scanner {
	// A range smaller than the window never needs more than its own size, and
	// many scanners run over small blocks. The window must still hold a header.
	w := max(min(int64(window), end-start), HeaderLen)
	return &Scanner{r: r, off: start, end: end, win: make([]byte, 0, w), dataLen: -1}
}

// Offset returns the offset the scanner has reached.
func (s *Scanner) Offset() int64 { return s.off }

// Record returns the frame found by the last successful call to Next.
func (s *Scanner) Record() Record { return s.rec }

// Err returns the error that stopped Next, if any. Damaged data is reported
// as a *CorruptError.
func (s *Scanner) Err() error { return s.err }

// bytesAt returns n bytes at file offset at, reading a new window if needed.
// n must not exceed the window capacity.
func (s *Scanner) bytesAt(at int64, n int) ([]byte, error) {
	if at >= s.winOff && at+int64(n) <= s.winOff+int64(len(s.win)) {
		i := at - s.winOff
		return s.win[i : i+int64(n)], nil
	}
	if s.grow > int64(cap(s.win)) {
		if s.read {
			s.win = make([]byte, 0, min(2*int64(cap(s.win)), s.grow))
		}
		s.read = true
	}
	m := min(int64(cap(s.win)), s.end-at)
	if m < int64(n) {
		return nil, io.ErrUnexpectedEOF
	}
	s.win = s.win[:m]
	k, err := s.r.ReadAt(s.win, at)
	if k < int(m) {
		s.win = s.win[:0]
		if err == nil || errors.Is(err, io.EOF) {
			// The file shrank since its size was taken.
			return nil, fmt.Errorf("short read at offset %d: file shorter than expected: %w", at+int64(k), io.ErrUnexpectedEOF)
		}
		return nil, err
	}
	s.winOff = at
	return s.win[:n], nil
}

// Next advances to the next valid frame. It returns false at the end of the
// range or on error.
func (s *Scanner) Next() bool {
	if s.err != nil || s.off >= s.end {
		return false
	}
	s.dataLen = -1
	off := s.off
	if s.end-off < FrameExtra {
		s.err = &CorruptError{off, fmt.Sprintf("truncated frame: %d bytes left, need at least %d", s.end-off, FrameExtra)}
		return false
	}
	h, err := s.bytesAt(off, HeaderLen)
	if err != nil {
		s.err = err
		return false
	}
	n, err := checkHeader(h, off, s.end-off)
	if err != nil {
		s.err = err
		return false
	}
	crc, err := s.crcOf(off+HeaderLen, n)
	if err != nil {
		s.err = err
		return false
	}
	f, err := s.bytesAt(off+HeaderLen+n, FooterLen)
	if err != nil {
		s.err = err
		return false
	}
	if mask(crc) != binary.LittleEndian.Uint32(f) {
		s.dataLen = n
		s.err = &CorruptError{off, "data CRC mismatch"}
		return false
	}
	s.rec = Record{off, n + FrameExtra}
	s.off = off + n + FrameExtra
	return true
}

// crcOf computes the CRC32C of n bytes at at, a window at a time, so a huge
// record never needs a buffer of its own size.
func (s *Scanner) crcOf(at, n int64) (uint32, error) {
	var crc uint32
	for n > 0 {
		k := min(n, int64(cap(s.win)))
		b, err := s.bytesAt(at, int(k))
		if err != nil {
			return 0, err
		}
		crc = crc32.Update(crc, castagnoli, b)
		at += k
		n -= k
	}
	return crc, nil
}

// Resync skips the damage that the last *CorruptError reported, so that Next
// can continue with the next intact frame. It returns the damaged range
// [from, to).
//
// When only the data CRC failed, the frame's length is trusted and just that
// frame is skipped; so it is when only the length's CRC failed but the data
// CRC checks with the length as written. Otherwise the damaged frame's extent
// is unknown, and its payload may itself hold bytes that look like a frame (a
// record that embeds another TFRecord, or plain chance): a frame found in it
// must never be served as a record. So the scanner accepts, as the first
// offset after the damage, only a confirmed frame: both its CRCs check, and
// it either ends exactly at the end of the range or is followed by 8 length
// bytes whose CRC checks. A frame inside a payload is followed by more
// payload (or by the damaged frame's footer), which passes that check with
// odds of 2^-32. When no offset qualifies, everything to the end of the range
// is damaged. The rule errs towards skipping: an intact frame followed by a
// short tail is reported as damaged along with the tail. It cannot tell a
// payload made of two or more whole frames in a row from records, when the
// length bytes themselves were hit.
func (s *Scanner) Resync() (from, to int64, err error) {
	if s.err == nil {
		return 0, 0, errors.New("resync without a corrupt record")
	}
	var ce *CorruptError
	if !errors.As(s.err, &ce) {
		return 0, 0, fmt.Errorf("resync without a corrupt record: %w", s.err)
	}
	from = ce.Offset
	s.err = nil
	if s.dataLen < 0 {
		if s.dataLen, err = s.lengthDespiteItsCRC(from); err != nil {
			s.err = err
			return 0, 0, err
		}
	}
	if s.dataLen >= 0 {
		s.off = from + s.dataLen + FrameExtra
		return from, s.off, nil
	}
	to, err = s.nextConfirmed(from + 1)
	if err != nil {
		// Keep the read error so that Next stops instead of walking into
		// the damage again.
		s.err = err
		return 0, 0, err
	}
	s.off = to
	return from, to, nil
}

// nextConfirmed returns the first offset at or after p where a confirmed
// frame starts (see Resync), or the end of the range if there is none.
//
// Damage can be long (a zeroed or overwritten stretch of a large file), so
// every offset is first tested on the window's bytes with no call: the
// length must fit in what is left of the range, which garbage rarely
// satisfies, and its CRC is computed only when the length differs from the
// last one tested. Zeros, the commonest damage, have length 0 and a length
// CRC of 0, which is not the masked CRC of 8 zero bytes, so a run of them is
// stepped over a word at a time.
func (s *Scanner) nextConfirmed(p int64) (int64, error) {
	last := uint64(0)
	var zero [8]byte
	lastCRC := MaskedCRC(zero[:])
	stop := s.end - FrameExtra // the last offset that can start a frame
	for p <= stop {
		w, err := s.rest(p)
		if err != nil {
			return 0, err
		}
		for i := 0; i+HeaderLen <= len(w) && p <= stop; i, p = i+1, p+1 {
			n := binary.LittleEndian.Uint64(w[i:])
			if n == 0 && binary.LittleEndian.Uint32(w[i+8:]) == 0 {
				// 12 zero bytes are no header, nor is any 12 bytes of a
				// longer run of zeros: step over the run 8 bytes at a time.
				for i+HeaderLen+8 <= len(w) && p+8 <= stop && binary.LittleEndian.Uint64(w[i+HeaderLen:]) == 0 {
					i, p = i+8, p+8
				}
				continue
			}
			if n > uint64(stop-p) {
				continue
			}
			if n != last {
				last, lastCRC = n, MaskedCRC(w[i:i+8])
			}
			if binary.LittleEndian.Uint32(w[i+8:]) != lastCRC {
				continue
			}
			ok, err := s.confirmedAt(p)
			if err != nil || ok {
				return p, err
			}
			// confirmedAt may have moved the window.
			p++
			break
		}
	}
	return s.end, nil
}

// rest returns the window's bytes from file offset at on, at least
// HeaderLen of them, reading a new window at at if needed. at+HeaderLen
// must not pass the end of the range.
func (s *Scanner) rest(at int64) ([]byte, error) {
	if at < s.winOff || at+HeaderLen > s.winOff+int64(len(s.win)) {
		if _, err := s.bytesAt(at, HeaderLen); err != nil {
			return nil, err
		}
	}
	return s.win[at-s.winOff:], nil
}

// confirmedAt reports whether a confirmed frame starts at p: intact, and
// ending at the end of the range or followed by a length with a valid CRC.
func (s *Scanner) confirmedAt(p int64) (bool, error) {
	n, ok, err := s.intactAt(p)
	if err != nil || !ok {
		return false, err
	}
	s.confirmed = n
	next := p + n + FrameExtra
	if next == s.end {
		return true, nil
	}
	if s.end-next < HeaderLen {
		return false, nil
	}
	h, err := s.bytesAt(next, HeaderLen)
	if err != nil {
		return false, err
	}
	return MaskedCRC(h[:8]) == binary.LittleEndian.Uint32(h[8:]), nil
}

// intactAt reports whether an intact frame starts at p, and its data length.
func (s *Scanner) intactAt(p int64) (int64, bool, error) {
	h, err := s.bytesAt(p, HeaderLen)
	if err != nil {
		return 0, false, err
	}
	n, herr := checkHeader(h, p, s.end-p)
	if herr != nil {
		return 0, false, nil
	}
	ok, err := s.dataIntact(p, n)
	return n, ok, err
}

// dataIntact reports whether the n data bytes of the frame at p match its
// data CRC. The frame must lie inside the range.
func (s *Scanner) dataIntact(p, n int64) (bool, error) {
	crc, err := s.crcOf(p+HeaderLen, n)
	if err != nil {
		return false, err
	}
	f, err := s.bytesAt(p+HeaderLen+n, FooterLen)
	if err != nil {
		return false, err
	}
	return mask(crc) == binary.LittleEndian.Uint32(f), nil
}

// lengthDespiteItsCRC returns the length field of the frame at p if the
// frame's data matches its data CRC with that length although the length's
// own CRC did not check, or -1. Then only the length's CRC was hit, and the
// frame is skipped whole rather than searched for frames inside it.
func (s *Scanner) lengthDespiteItsCRC(p int64) (int64, error) {
	if s.end-p < FrameExtra {
		return -1, nil
	}
	h, err := s.bytesAt(p, HeaderLen)
	if err != nil {
		return -1, err
	}
	n := binary.LittleEndian.Uint64(h)
	if n > uint64(s.end-p-FrameExtra) {
		return -1, nil
	}
	ok, err := s.dataIntact(p, int64(n))
	if err != nil || !ok {
		return -1, err
	}
	return int64(n), nil
}
