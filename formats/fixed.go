package formats

import (
	"errors"
	"fmt"
	"io"
)

// Fixed is the Format of raw binary files of fixed-size records, such as
// CIFAR-10's data_batch_*.bin (3,073-byte records, no header): each file
// is HeaderBytes of header, which is not served, then records of
// RecordSize bytes. A served part is the records alone, so its reader is
// a Fixed with HeaderBytes 0. There is no checksum: blocks are checked
// against the index's CRC32C.
type Fixed struct {
	RecordSize, HeaderBytes int64
}

func (Fixed) Name() string      { return "fixed" }
func (Fixed) Include() []string { return []string{"*.bin"} }
func (Fixed) Ext() string       { return ".bin" }
func (Fixed) Checksummed() bool { return false }
func (f Fixed) Head(r io.ReaderAt, size int64) (Head, error) {
	if size < f.HeaderBytes {
		return Head{}, fmt.Errorf("file of %d bytes is shorter than its %d header bytes", size, f.HeaderBytes)
	}
	if p := size - f.HeaderBytes; p%f.RecordSize != 0 {
		return Head{}, fmt.Errorf("payload of %d bytes is not a whole number of %d-byte records (%d bytes left over)", p, f.RecordSize, p%f.RecordSize)
	}
	return Head{Start: f.HeaderBytes, End: size}, nil
}
func (f Fixed) Scan(r io.ReaderAt, h Head, start, end int64) RecordScanner {
	return &fixedScanner{off: start, end: end, size: f.RecordSize}
}
func (f Fixed) SplitFilled(h Head, buf []byte, filled, from, base int64, starts []int64) ([]int64, int64, error) {
	return splitFixed(f.RecordSize, buf, filled, from, base, starts)
}
func (Fixed) AppendPrologue(dst []byte, h Head, records int64) []byte { return dst }
func (Fixed) AppendEpilogue(dst []byte, h Head) []byte                { return dst }
func (f Fixed) NewReader(r io.Reader) RecordReader {
	return &fixedReader{r: r, size: f.RecordSize, skip: f.HeaderBytes, rows: -1}
}

// fixedScanner steps over records of one size; there is nothing to check
// in them.
type fixedScanner struct {
	off, end, size int64
	rec            Record
	err            error
}

func (s *fixedScanner) Next() bool {
	if s.err != nil || s.off >= s.end {
		return false
	}
	if s.size <= 0 {
		s.err = fmt.Errorf("records of %d bytes cannot be scanned", s.size)
		return false
	}
	if s.end-s.off < s.size {
		s.err = &CorruptError{Offset: s.off, Reason: fmt.Sprintf("partial record: %d bytes left, records are %d bytes", s.end-s.off, s.size)}
		return false
	}
	s.rec = Record{s.off, s.size}
	s.off += s.size
	return true
}

func (s *fixedScanner) Record() Record { return s.rec }
func (s *fixedScanner) Offset() int64  { return s.off }
func (s *fixedScanner) Err() error     { return s.err }

func splitFixed(size int64, buf []byte, filled, from, base int64, starts []int64) ([]int64, int64, error) {
	if size <= 0 {
		return starts, from, fmt.Errorf("records of %d bytes cannot be split", size)
	}
	if filled == int64(len(buf)) && (filled-from)%size != 0 {
		return starts, from, &CorruptError{Offset: base + from, Reason: fmt.Sprintf("%d bytes are not a whole number of %d-byte records", filled-from, size)}
	}
	off := from
	for ; off+size <= filled; off += size {
		starts = append(starts, off)
	}
	return starts, off, nil
}

// fixedReader reads records of one size after skip header bytes; rows,
// when not negative, is how many there must be, with nothing after.
type fixedReader struct {
	r        io.Reader
	size     int64
	skip     int64
	rows     int64
	read     int64
	buf      []byte
	prologue []byte
	started  bool
	// start reads what comes before the records (the .npy header).
	start func() error
}

func (f *fixedReader) Prologue() []byte { return f.prologue }

func (f *fixedReader) Next() ([]byte, error) {
	if !f.started {
		f.started = true
		if f.start != nil {
			if err := f.start(); err != nil {
				return nil, err
			}
		} else if f.skip > 0 {
			f.prologue = make([]byte, f.skip)
			if _, err := io.ReadFull(f.r, f.prologue); err != nil {
				return nil, fmt.Errorf("read %d header bytes: %w", f.skip, err)
			}
		}
		f.buf = make([]byte, f.size)
	}
	if f.rows >= 0 && f.read == f.rows {
		var b [1]byte
		if n, _ := io.ReadFull(f.r, b[:]); n > 0 {
			return nil, &CorruptError{Offset: f.skip + f.read*f.size, Reason: fmt.Sprintf("data after the %d rows the header announces", f.rows)}
		}
		return nil, io.EOF
	}
	n, err := io.ReadFull(f.r, f.buf)
	if errors.Is(err, io.EOF) && f.rows < 0 {
		return nil, io.EOF
	}
	if err != nil {
		at := f.skip + f.read*f.size
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, &CorruptError{Offset: at, Reason: fmt.Sprintf("partial record: %d bytes, records are %d bytes", n, f.size)}
		}
		return nil, err
	}
	f.read++
	return f.buf, nil
}
