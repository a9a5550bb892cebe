package formats

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// The text formats (lines, jsonl, libsvm, csv) hold one record per line.
// A line ends at "\n"; a "\r" before it is part of the line, so LF and
// CRLF files are served verbatim. A file whose last line has no line end
// gets one ("\n") in the served record (Head.Tail), so that records from
// different files never run together in a part.

// cutLine cuts one line, with its line end. A last line without one is a
// record only at the end of the file.
func cutLine(data []byte, atEOF bool) (int, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, nil
	}
	if atEOF {
		return len(data), nil
	}
	return 0, nil
}

// splitLines is SplitFilled for line formats. In a block every line has
// its line end: the loader completes a file's last line with Head.Tail.
func splitLines(buf []byte, filled, from, base int64, starts []int64) ([]int64, int64, error) {
	off := from
	for off < filled {
		i := bytes.IndexByte(buf[off:filled], '\n')
		if i < 0 {
			if filled == int64(len(buf)) {
				return starts, off, &CorruptError{Offset: base + off, Reason: "line without line end at the end of the block"}
			}
			break
		}
		starts = append(starts, off)
		off += int64(i) + 1
	}
	return starts, off, nil
}

// lineHead is the Head of a headerless text file.
func lineHead(r io.ReaderAt, size int64) (Head, error) {
	tail, err := textTail(r, 0, size)
	return Head{Start: 0, End: size, Tail: tail}, err
}

// trimEOL returns line without its "\n" or "\r\n".
func trimEOL(line []byte) []byte {
	line = bytes.TrimSuffix(line, []byte{'\n'})
	return bytes.TrimSuffix(line, []byte{'\r'})
}

// lineFormat is what the formats of one record per line share: no header,
// nothing around a part's records, no checksum of their own, and lines
// cut at LF (CRLF kept).
type lineFormat struct{}

func (lineFormat) Checksummed() bool                            { return false }
func (lineFormat) Head(r io.ReaderAt, size int64) (Head, error) { return lineHead(r, size) }
func (lineFormat) SplitFilled(h Head, buf []byte, filled, from, base int64, starts []int64) ([]int64, int64, error) {
	return splitLines(buf, filled, from, base, starts)
}
func (lineFormat) AppendPrologue(dst []byte, h Head, records int64) []byte { return dst }
func (lineFormat) AppendEpilogue(dst []byte, h Head) []byte                { return dst }
func (lineFormat) NewReader(r io.Reader) RecordReader                      { return newCutReader(r, cutLine, false) }

// Lines is the Format of plain text files, one record per line.
type Lines struct{ lineFormat }

func (Lines) Name() string      { return "lines" }
func (Lines) Include() []string { return []string{"*.txt"} }
func (Lines) Ext() string       { return ".txt" }
func (Lines) Scan(r io.ReaderAt, h Head, start, end int64) RecordScanner {
	return newCutScanner(r, start, end, "line", cutLine, nil)
}

// JSONL is the Format of JSON Lines files. With Check, indexing checks
// that every line is one JSON value.
type JSONL struct {
	lineFormat
	Check bool
}

func (JSONL) Name() string      { return "jsonl" }
func (JSONL) Include() []string { return []string{"*.jsonl", "*.ndjson"} }
func (JSONL) Ext() string       { return ".jsonl" }
func (j JSONL) Scan(r io.ReaderAt, h Head, start, end int64) RecordScanner {
	var check func([]byte, int64) error
	if j.Check {
		check = checkJSONLine
	}
	return newCutScanner(r, start, end, "line", cutLine, check)
}

func checkJSONLine(line []byte, _ int64) error {
	if !json.Valid(line) {
		return &CorruptError{Offset: 0, Reason: "not one JSON value"}
	}
	return nil
}

// LibSVM is the Format of LIBSVM / SVMlight files: lines of
//
//	label [qid:N] index:value index:value ... [# comment]
//
// with a numeric label (or comma-separated labels), indices that are
// non-negative integers in increasing order, and numeric values.
// Indexing checks every line.
type LibSVM struct{ lineFormat }

func (LibSVM) Name() string      { return "libsvm" }
func (LibSVM) Include() []string { return []string{"*.libsvm", "*.svm", "*.svmlight"} }
func (LibSVM) Ext() string       { return ".libsvm" }
func (LibSVM) Scan(r io.ReaderAt, h Head, start, end int64) RecordScanner {
	return newCutScanner(r, start, end, "line", cutLine, func(line []byte, _ int64) error { return CheckLibSVM(line) })
}

// CheckLibSVM checks the syntax of one LIBSVM line (with or without its
// line end). The error is a *CorruptError whose offset is within line.
func CheckLibSVM(line []byte) error {
	body := trimEOL(line)
	if i := bytes.IndexByte(body, '#'); i >= 0 {
		body = body[:i]
	}
	i := 0
	skip := func() {
		for i < len(body) && (body[i] == ' ' || body[i] == '\t') {
			i++
		}
	}
	word := func() (int, []byte) {
		skip()
		s := i
		for i < len(body) && body[i] != ' ' && body[i] != '\t' {
			i++
		}
		return s, body[s:i]
	}
	bad := func(at int, format string, a ...any) error {
		return &CorruptError{Offset: int64(at), Reason: "libsvm: " + fmt.Sprintf(format, a...)}
	}
	at, label := word()
	if len(label) == 0 {
		return bad(at, "empty line; every line needs a label")
	}
	for l := range bytes.SplitSeq(label, []byte{','}) {
		if !isNumber(l) {
			return bad(at, "label %q is not a number", label)
		}
	}
	prev := int64(-1)
	for first := true; ; first = false {
		at, w := word()
		if len(w) == 0 {
			return nil
		}
		k, v, ok := bytes.Cut(w, []byte{':'})
		if !ok {
			return bad(at, "%q is not index:value", w)
		}
		if first && string(k) == "qid" {
			if !isInt(v) {
				return bad(at, "qid %q is not an integer", v)
			}
			continue
		}
		if !isInt(k) || k[0] == '-' || k[0] == '+' {
			return bad(at, "index %q is not a non-negative integer", k)
		}
		idx := int64(0)
		for _, c := range k {
			idx = idx*10 + int64(c-'0')
			if idx > 1<<53 {
				return bad(at, "index %q is too large", k)
			}
		}
		if idx <= prev {
			return bad(at, "index %d follows index %d; indices must increase", idx, prev)
		}
		prev = idx
		if !isNumber(v) {
			return bad(at, "value %q of index %d is not a number", v, idx)
		}
	}
}

func isInt(b []byte) bool {
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		b = b[1:]
	}
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// isNumber reports whether b is a decimal floating-point number, as
// strconv.ParseFloat would read it (inf and nan included), without
// allocating.
func isNumber(b []byte) bool {
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		b = b[1:]
	}
	if len(b) > 0 && (b[0]|0x20 == 'i' || b[0]|0x20 == 'n') {
		return bytes.EqualFold(b, []byte("inf")) || bytes.EqualFold(b, []byte("infinity")) || bytes.EqualFold(b, []byte("nan"))
	}
	i, digits := 0, 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i, digits = i+1, digits+1
	}
	if i < len(b) && b[i] == '.' {
		i++
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i, digits = i+1, digits+1
		}
	}
	if digits == 0 {
		return false
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '-' || b[i] == '+') {
			i++
		}
		e := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == e {
			return false
		}
	}
	return i == len(b)
}
