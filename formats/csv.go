package formats

import (
	"bytes"
	"fmt"
	"io"
)

// CSV is the Format of RFC 4180 files: a record is one row, which a
// quoted field may spread over several lines; rows end at "\n" (or
// "\r\n") outside quotes, so a block never starts inside a quoted field.
// The quoting rules are those of encoding/csv without LazyQuotes: a
// quote inside an unquoted field, or text after a closing quote, is an
// error. Empty lines are an error too (encoding/csv and Python's csv
// would silently skip or return an empty row; write "" for a row of one
// empty field). With Header, the first row of every file is its header,
// not a record: every file must have the same one, every row as many
// fields as it, and every served part starts with it.
type CSV struct{ Header bool }

func (CSV) Name() string      { return "csv" }
func (CSV) Include() []string { return []string{"*.csv"} }
func (CSV) Ext() string       { return ".csv" }
func (CSV) Checksummed() bool { return false }

var comma = []byte{','}

// maxCSVHeader bounds the header row Head reads.
const maxCSVHeader = 1 << 20

func (c CSV) Head(r io.ReaderAt, size int64) (Head, error) {
	if !c.Header || size == 0 {
		tail, err := textTail(r, 0, size)
		return Head{Start: 0, End: size, Tail: tail}, err
	}
	// Most headers are short: read a little, and more only if the row
	// goes on.
	var buf []byte
	var k int
	for want := min(size, 4<<10); ; want = min(size, 2*want) {
		buf = make([]byte, want)
		if n, err := r.ReadAt(buf, 0); n < len(buf) {
			return Head{}, fmt.Errorf("read the header row: %w", err)
		}
		var err error
		if k, _, err = cutCSV(buf, want == size); err != nil {
			return Head{}, fmt.Errorf("header row: %w", err)
		}
		if k > 0 {
			break
		}
		if want >= maxCSVHeader {
			return Head{}, fmt.Errorf("header row longer than %d bytes", maxCSVHeader)
		}
	}
	if len(trimEOL(buf[:k])) == 0 {
		return Head{}, fmt.Errorf("the first line, the header row, is empty (pass {header}=false if the file has no header)")
	}
	key := bytes.Clone(buf[:k])
	if key[len(key)-1] != '\n' {
		key = append(key, '\n')
	}
	tail, err := textTail(r, int64(k), size)
	return Head{Start: int64(k), End: size, Tail: tail, Key: key}, err
}

func (c CSV) Scan(r io.ReaderAt, h Head, start, end int64) RecordScanner {
	fields, first := -1, "the first row"
	if c.Header && h.Key != nil {
		_, fields, _ = cutCSV(h.Key, true)
		first = "the header"
	}
	label := "row"
	if c.Header {
		label = "row (after the header)"
	}
	cut := func(data []byte, atEOF bool) (int, error) {
		n, f, err := cutCSV(data, atEOF)
		if err == nil && n > 0 {
			switch {
			case len(trimEOL(data[:n])) == 0:
				err = &CorruptError{Offset: 0, Reason: "empty line (write \"\" for a row of one empty field)"}
			case fields < 0:
				fields = f
			case f != fields:
				err = &CorruptError{Offset: 0, Reason: fmt.Sprintf("%d fields, but %s has %d", f, first, fields)}
			}
		}
		return n, err
	}
	return newCutScanner(r, start, end, label, cut, nil)
}

func (CSV) SplitFilled(h Head, buf []byte, filled, from, base int64, starts []int64) ([]int64, int64, error) {
	return splitCut(cutCSVRow, buf, filled, from, base, starts)
}

// SameKey compares header rows without their line ends: a part of CRLF
// and LF files starts with the first file's header, verbatim.
func (CSV) SameKey(a, b []byte) bool { return bytes.Equal(trimEOL(a), trimEOL(b)) }

func (CSV) AppendPrologue(dst []byte, h Head, records int64) []byte { return append(dst, h.Key...) }
func (CSV) AppendEpilogue(dst []byte, h Head) []byte                { return dst }

func (c CSV) NewReader(r io.Reader) RecordReader { return newCutReader(r, cutCSVRow, c.Header) }

func cutCSVRow(data []byte, atEOF bool) (int, error) {
	n, _, err := cutCSV(data, atEOF)
	return n, err
}

// cutCSV cuts the first row of data and counts its fields.
func cutCSV(data []byte, atEOF bool) (n, fields int, err error) {
	// Most rows (numbers, plain text) have no quote: such a row ends at
	// its first "\n" and has a field more than it has commas. Vectorised
	// scans find that; the byte loop below, in which splitting loaded
	// blocks spent most of a warm CSV epoch's CPU, is left for rows with
	// quotes.
	nl := bytes.IndexByte(data, '\n')
	row := data
	if nl >= 0 {
		row = data[:nl+1]
	}
	if bytes.IndexByte(row, '"') < 0 {
		switch {
		case nl >= 0, atEOF && len(data) > 0:
			return len(row), bytes.Count(row, comma) + 1, nil
		default:
			return 0, 0, nil
		}
	}
	return cutQuotedCSV(data, atEOF)
}

// cutQuotedCSV is cutCSV for any row, quoted fields included.
func cutQuotedCSV(data []byte, atEOF bool) (n, fields int, err error) {
	i := 0
	for {
		fields++
		if i < len(data) && data[i] == '"' {
			open := i
			i++
			for {
				j := bytes.IndexByte(data[i:], '"')
				if j < 0 {
					if atEOF {
						return 0, 0, &CorruptError{Offset: int64(open), Reason: "quoted field never closed"}
					}
					return 0, 0, nil
				}
				i += j + 1
				if i == len(data) {
					if atEOF {
						return i, fields, nil
					}
					return 0, 0, nil
				}
				if data[i] != '"' {
					break
				}
				i++ // "" is an escaped quote
			}
			switch data[i] {
			case ',':
				i++
				continue
			case '\n':
				return i + 1, fields, nil
			case '\r':
				if i+1 == len(data) {
					if atEOF {
						return i + 1, fields, nil
					}
					return 0, 0, nil
				}
				if data[i+1] == '\n' {
					return i + 2, fields, nil
				}
			}
			return 0, 0, &CorruptError{Offset: int64(i), Reason: "extraneous or missing \" in quoted field"}
		}
		for ; i < len(data); i++ {
			switch data[i] {
			case ',':
				goto next
			case '\n':
				return i + 1, fields, nil
			case '"':
				return 0, 0, &CorruptError{Offset: int64(i), Reason: "bare \" in non-quoted field"}
			}
		}
		if atEOF && len(data) > 0 {
			return len(data), fields, nil
		}
		return 0, 0, nil
	next:
		i++
	}
}
