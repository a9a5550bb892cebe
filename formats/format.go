package formats

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Format is everything corgifs knows about one record format. The index,
// the loader, the planner and the file system reach a format only through
// it, so that a new format is one new file in this package.
//
// A source file of a format is read as three parts: an optional file
// header, records packed back to back in [Head.Start, Head.End), and
// optional trailing bytes (a tar shard's end-of-archive marker and
// padding, which its scanner finds and checks; its records then end
// before End). Every record boundary a scanner reports is a place where
// a block may start or end. A served part is the prologue, then whole
// records in any order, then the epilogue; every record is served as
// stored, except a file's last one, which gets Head.Tail after it.
//
// Formats are values without state, safe for concurrent use.
type Format interface {
	// Name is the --format value.
	Name() string
	// Include is the default list of glob patterns, matched against base
	// names, that selects the files of a dataset.
	Include() []string
	// Ext is the extension of a served part, with its dot (".csv").
	Ext() string
	// Head reads what the format needs from the start (and, for text,
	// the last byte) of a source file of size bytes. Callers add the
	// file's name to the error.
	Head(r io.ReaderAt, size int64) (Head, error)
	// Scan returns a scanner over the records of [start, end) of a file
	// whose Head is h. start must be a record boundary (h.Start at first)
	// and end is taken as the end of the file's records (h.End): a text
	// line without line end is a record only there.
	Scan(r io.ReaderAt, h Head, start, end int64) RecordScanner
	// SplitFilled finds the records of a loaded block of a file whose
	// Head is h, as the TFRecord SplitFilled does: buf holds whole
	// records (the last one completed by Head.Tail when the block ends
	// the file), only buf[:filled] is there yet, and from is where the
	// previous call stopped. It appends the start of every record that
	// lies whole in buf[:filled] and returns the offset of the first one
	// left for a later call; once filled is len(buf), every record must
	// be whole. It checks structure (and TFRecord's CRCs), not content:
	// the block CRC does that. base is the file offset of buf[0], for
	// errors.
	SplitFilled(h Head, buf []byte, filled, from, base int64, starts []int64) ([]int64, int64, error)
	// AppendPrologue appends the bytes a served part holds before its
	// records: h is the dataset's Head (see Agree), records the number
	// of records the part serves.
	AppendPrologue(dst []byte, h Head, records int64) []byte
	// AppendEpilogue appends the bytes a served part holds after its
	// records.
	AppendEpilogue(dst []byte, h Head) []byte
	// NewReader reads the records of a whole file of the format, a source
	// file or a served part, from start to end.
	NewReader(r io.Reader) RecordReader
	// Checksummed reports whether every record carries its own checksum
	// that SplitFilled verifies. Blocks of formats without one are
	// checked against the CRC32C the index keeps per block (BlockSummer).
	Checksummed() bool
}

// Head is what a format reads from a source file's header. It is plain
// data, so that the index can save it with the file in its sidecar.
type Head struct {
	// Start and End delimit the records of the file.
	Start, End int64
	// Tail is appended to the file's last record when it is served: a
	// text file whose last line has no line end gets "\n". The record's
	// served length is its stored length plus len(Tail).
	Tail []byte `json:",omitempty"`
	// Key must be the same in every file of a dataset (the CSV header
	// row, the .npy dtype and row shape); nil when the file has none. The
	// prologue of a served part is built from it.
	Key []byte `json:",omitempty"`
}

// Agree checks that two files of one dataset can be served in one part:
// their Keys are equal, or one of them has none (an empty CSV file). The
// error names both files and shows both keys.
func Agree(f Format, nameA string, a Head, nameB string, b Head) error {
	same := bytes.Equal
	if k, ok := f.(keyComparer); ok {
		same = k.SameKey
	}
	if a.Key == nil || b.Key == nil || same(a.Key, b.Key) {
		return nil
	}
	what := "header"
	if f.Name() == "npy" {
		what = "dtype and row shape"
	}
	return fmt.Errorf("%s: %s has %s %q but %s has %q; every file of a dataset must have the same %s (use {include} to pick files that agree)",
		f.Name(), nameA, what, a.Key, nameB, b.Key, what)
}

// keyComparer is implemented by formats whose Keys may differ in bytes
// that do not matter (a CSV header's line end).
type keyComparer interface {
	SameKey(a, b []byte) bool
}

// RecordScanner walks the records of a byte range of a file, validating
// them as far as the format allows. Its use follows bufio.Scanner: call
// Next until it returns false, then look at Err. Damaged data is reported
// as a *CorruptError with the file offset.
type RecordScanner interface {
	Next() bool
	// Record is the record found by the last successful Next, with its
	// stored length (without Head.Tail).
	Record() Record
	// Offset is the offset the scanner has reached.
	Offset() int64
	Err() error
}

// Resyncer is implemented by scanners that can skip a damaged range and
// go on (TFRecord's, for --skip-corrupt). Formats without record
// checksums cannot tell where good data starts again, so they fail.
type Resyncer interface {
	Resync() (from, to int64, err error)
}

// Framer is implemented by formats whose records carry framing around
// their payload (TFRecord: 16 bytes), so that the index can report
// payload sizes. Other formats' records are their payload.
type Framer interface {
	FrameOverhead() int64
}

// PayloadLen returns the payload length of a record of n stored bytes.
func PayloadLen(f Format, n int64) int64 {
	if fr, ok := f.(Framer); ok {
		return n - fr.FrameOverhead()
	}
	return n
}

// RecordReader reads the records of a file as a stream.
type RecordReader interface {
	// Next returns the next record, as a served part holds it (a whole
	// TFRecord frame, a line with its line end, a whole tar sample, one
	// array row). The bytes are valid until the next call. At the end it
	// returns io.EOF.
	Next() ([]byte, error)
	// Prologue returns the bytes read before the first record (the CSV
	// header row, the .npy header), once Next has been called.
	Prologue() []byte
}

// ReadAll reads every record from rd to the end and returns copies of
// them. An error says which record it stopped at.
func ReadAll(rd RecordReader) ([][]byte, error) {
	var recs [][]byte
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return recs, nil
		}
		if err != nil {
			return recs, fmt.Errorf("record %d: %w", len(recs), err)
		}
		recs = append(recs, bytes.Clone(rec))
	}
}

// cutFunc finds the first record of data, which starts at a record
// boundary: it returns the record's length, or 0 when data does not hold
// a whole record yet and more may come. atEOF says no more will come: a
// non-empty data must then give a record or an error. Errors are
// *CorruptError with offsets relative to data[0].
type cutFunc func(data []byte, atEOF bool) (int, error)

// rebase adds base to the offset of a *CorruptError.
func rebase(err error, base int64) error {
	var ce *CorruptError
	if errors.As(err, &ce) {
		return &CorruptError{Offset: ce.Offset + base, Reason: ce.Reason}
	}
	return err
}

// splitCut is SplitFilled for formats whose records cut finds.
func splitCut(cut cutFunc, buf []byte, filled, from, base int64, starts []int64) ([]int64, int64, error) {
	off := from
	end := int64(len(buf))
	for off < filled {
		n, err := cut(buf[off:filled], filled == end)
		if err != nil {
			return starts, off, rebase(err, base+off)
		}
		if n == 0 {
			if filled == end {
				return starts, off, &CorruptError{Offset: base + off, Reason: "incomplete record at the end of the block"}
			}
			break
		}
		starts = append(starts, off)
		off += int64(n)
	}
	return starts, off, nil
}

// maxCutRecord bounds the records a cut-based scanner or reader holds in
// memory at once: a file with no line end would otherwise be read whole.
const maxCutRecord = 256 << 20

// cutScanner is a RecordScanner for formats whose records cut finds.
// check, if set, validates each whole record; n is its number in the
// scan, from 1, for messages ("line 12").
type cutScanner struct {
	sc    *bufio.Scanner
	off   int64
	rec   Record
	n     int64
	label string // "line" or "row"
	err   error
	// max is the longest record the scanner holds (LimitRecord), and
	// initial its buffer's first size.
	max, initial int64
}

func newCutScanner(r io.ReaderAt, start, end int64, label string, cut cutFunc, check func(rec []byte, n int64) error) *cutScanner {
	s := &cutScanner{off: start, label: label, max: maxCutRecord, initial: min(256<<10, max(end-start, 64))}
	s.sc = bufio.NewScanner(io.NewSectionReader(r, start, end-start))
	s.sc.Buffer(make([]byte, 0, s.initial), maxCutRecord)
	s.sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if atEOF && len(data) == 0 {
			return 0, nil, nil
		}
		n, err := cut(data, atEOF)
		if err == nil && n > 0 && check != nil {
			err = check(data[:n], s.n+1)
		}
		if err != nil {
			err = rebase(err, s.off)
			var ce *CorruptError
			if errors.As(err, &ce) {
				err = &CorruptError{Offset: ce.Offset, Reason: fmt.Sprintf("%s %d: %s", s.label, s.n+1, ce.Reason)}
			}
			return 0, nil, err
		}
		if n == 0 {
			return 0, nil, nil
		}
		return n, data[:n], nil
	})
	return s
}

func (s *cutScanner) Next() bool {
	if s.err != nil {
		return false
	}
	if !s.sc.Scan() {
		s.err = s.sc.Err()
		if errors.Is(s.err, bufio.ErrTooLong) {
			s.err = s.tooLong()
		}
		return false
	}
	n := int64(len(s.sc.Bytes()))
	s.rec = Record{s.off, n}
	s.off += n
	s.n++
	return true
}

func (s *cutScanner) Record() Record { return s.rec }
func (s *cutScanner) Offset() int64  { return s.off }
func (s *cutScanner) Err() error     { return s.err }

// cutReader is a RecordReader for formats whose records cut finds. The
// prologue, if any, is the first record when headed is set.
type cutReader struct {
	sc       *bufio.Scanner
	tail     []byte // a last record without line end, completed
	headed   bool
	prologue []byte
	started  bool
}

func newCutReader(r io.Reader, cut cutFunc, headed bool) *cutReader {
	c := &cutReader{headed: headed}
	c.sc = bufio.NewScanner(r)
	c.sc.Buffer(make([]byte, 0, 64<<10), maxCutRecord)
	c.sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if atEOF && len(data) == 0 {
			return 0, nil, nil
		}
		n, err := cut(data, atEOF)
		if err != nil || n == 0 {
			return 0, nil, err
		}
		return n, data[:n], nil
	})
	return c
}

func (c *cutReader) next() ([]byte, error) {
	if !c.sc.Scan() {
		if err := c.sc.Err(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}
	b := c.sc.Bytes()
	if b[len(b)-1] != '\n' {
		// Served as it would be: with a line end.
		c.tail = append(append(c.tail[:0], b...), '\n')
		b = c.tail
	}
	return b, nil
}

func (c *cutReader) Next() ([]byte, error) {
	if !c.started {
		c.started = true
		if c.headed {
			h, err := c.next()
			if err != nil {
				return nil, err
			}
			c.prologue = bytes.Clone(h)
		}
	}
	return c.next()
}

func (c *cutReader) Prologue() []byte { return c.prologue }

// textTail returns the Tail of a text file whose records lie in
// [start, size): "\n" when its last byte is not a line end.
func textTail(r io.ReaderAt, start, size int64) ([]byte, error) {
	if size <= start {
		return nil, nil
	}
	var b [1]byte
	if n, err := r.ReadAt(b[:], size-1); n < 1 {
		return nil, fmt.Errorf("read the last byte: %w", err)
	}
	if b[0] == '\n' {
		return nil, nil
	}
	return []byte{'\n'}, nil
}
