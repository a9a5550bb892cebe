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
// [from, to). When only the data CRC failed, the frame's length is trusted
// and just that frame is skipped; otherwise the scanner looks for the next
// offset holding a frame whose two CRCs check, or gives up at the end.
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
	if s.dataLen >= 0 {
		s.off = from + s.dataLen + FrameExtra
		return from, s.off, nil
	}
	for p := from + 1; p+FrameExtra <= s.end; p++ {
		ok, err := s.intactAt(p)
		if err != nil {
			// Keep the read error so that Next stops instead of walking
			// into the damage again.
			s.err = err
			return 0, 0, err
		}
		if ok {
			s.off = p
			return from, p, nil
		}
	}
	s.off = s.end
	return from, s.end, nil
}

// intactAt reports whether an intact frame starts at p.
func (s *Scanner) intactAt(p int64) (bool, error) {
	h, err := s.bytesAt(p, HeaderLen)
	if err != nil {
		return false, err
	}
	n, herr := checkHeader(h, p, s.end-p)
	if herr != nil {
		return false, nil
	}
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
