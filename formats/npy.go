package formats

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// NPY is the Format of NumPy .npy files: a record is one row of the
// array, that is one element along its first axis, of itemsize × the
// product of the other dimensions bytes. Only C order is supported (a
// Fortran-order array's rows are not contiguous), and only plain dtypes
// ('<f4', '|u1', '<U8', ...; not structured or object arrays). Every file
// of a dataset must have the same dtype and row shape (Head.Key, e.g.
// "<f4 (*, 32, 32)"). A served part starts with a version 1.0 header
// (2.0 if it does not fit) whose first dimension is the part's row count.
type NPY struct{}

func (NPY) Name() string      { return "npy" }
func (NPY) Include() []string { return []string{"*.npy"} }
func (NPY) Ext() string       { return ".npy" }
func (NPY) Checksummed() bool { return false }

// npyMagic starts every .npy file.
const npyMagic = "\x93NUMPY"

// maxNPYHeader bounds the header dictionary read from a file.
const maxNPYHeader = 1 << 20

// npyHeader is what a .npy header says.
type npyHeader struct {
	descr  string
	shape  []int64
	rowLen int64 // bytes of one row
	len    int64 // bytes of the whole header, magic included
}

// key is the Head.Key of a file with header h: dtype and row shape.
func (h npyHeader) key() []byte {
	var b strings.Builder
	b.WriteString(h.descr)
	b.WriteString(" (*,")
	for i, d := range h.shape[1:] {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(" ")
		b.WriteString(strconv.FormatInt(d, 10))
	}
	b.WriteString(")")
	return []byte(b.String())
}

func (n NPY) Head(r io.ReaderAt, size int64) (Head, error) {
	pre := make([]byte, min(size, 12))
	if k, err := r.ReadAt(pre, 0); k < len(pre) {
		return Head{}, fmt.Errorf("read the .npy header: %w", err)
	}
	hlen, err := npyPreamble(pre)
	if err != nil {
		return Head{}, err
	}
	if hlen > size {
		return Head{}, fmt.Errorf(".npy header of %d bytes is longer than the file (%d bytes)", hlen, size)
	}
	buf := make([]byte, hlen)
	if k, err := r.ReadAt(buf, 0); int64(k) < hlen {
		return Head{}, fmt.Errorf("read the .npy header: %w", err)
	}
	h, err := parseNPYHeader(buf)
	if err != nil {
		return Head{}, err
	}
	rows := h.shape[0]
	if p := size - h.len; rows > (1<<62)/max(h.rowLen, 1) || p != rows*h.rowLen {
		return Head{}, fmt.Errorf(".npy payload is %d bytes, but the header says %d rows of %d bytes (%s, shape %v)", p, rows, h.rowLen, h.descr, h.shape)
	}
	return Head{Start: h.len, End: size, Key: h.key()}, nil
}

func (NPY) Scan(r io.ReaderAt, h Head, start, end int64) RecordScanner {
	return &fixedScanner{off: start, end: end, size: npyRowLen(h.Key)}
}

func (NPY) SplitFilled(h Head, buf []byte, filled, from, base int64, starts []int64) ([]int64, int64, error) {
	return splitFixed(npyRowLen(h.Key), buf, filled, from, base, starts)
}

func (NPY) AppendPrologue(dst []byte, h Head, records int64) []byte {
	return appendNPYHeader(dst, h.Key, records)
}
func (NPY) AppendEpilogue(dst []byte, h Head) []byte { return dst }

func (NPY) NewReader(r io.Reader) RecordReader {
	f := &fixedReader{r: r}
	f.start = func() error {
		pre := make([]byte, 12)
		if _, err := io.ReadFull(r, pre[:10]); err != nil {
			return fmt.Errorf("read the .npy header: %w", err)
		}
		if pre[6] >= 2 {
			if _, err := io.ReadFull(r, pre[10:]); err != nil {
				return fmt.Errorf("read the .npy header: %w", err)
			}
		}
		hlen, err := npyPreamble(pre)
		if err != nil {
			return err
		}
		buf := make([]byte, hlen)
		n := 10
		if pre[6] >= 2 {
			n = 12
		}
		copy(buf, pre[:n])
		if _, err := io.ReadFull(r, buf[n:]); err != nil {
			return fmt.Errorf("read the .npy header: %w", err)
		}
		h, err := parseNPYHeader(buf)
		if err != nil {
			return err
		}
		f.prologue, f.size, f.rows, f.skip = buf, h.rowLen, h.shape[0], h.len
		if f.size == 0 {
			return fmt.Errorf(".npy rows of 0 bytes (shape %v) cannot be records", h.shape)
		}
		return nil
	}
	return f
}

// npyPreamble checks the magic and version of a .npy file and returns
// the length of its whole header. pre holds at least the first 10 bytes
// (12 for versions 2 and 3).
func npyPreamble(pre []byte) (int64, error) {
	if len(pre) < 10 || string(pre[:6]) != npyMagic {
		return 0, fmt.Errorf("not a .npy file: it does not start with %q", npyMagic)
	}
	switch pre[6] {
	case 1:
		return 10 + int64(binary.LittleEndian.Uint16(pre[8:10])), nil
	case 2, 3:
		if len(pre) < 12 {
			return 0, fmt.Errorf("truncated .npy header")
		}
		n := int64(binary.LittleEndian.Uint32(pre[8:12]))
		if n > maxNPYHeader {
			return 0, fmt.Errorf(".npy header of %d bytes is too long (at most %d)", n, maxNPYHeader)
		}
		return 12 + n, nil
	}
	return 0, fmt.Errorf(".npy format version %d.%d is not supported (1, 2 and 3 are)", pre[6], pre[7])
}

// parseNPYHeader parses the whole header of a .npy file.
func parseNPYHeader(buf []byte) (npyHeader, error) {
	h := npyHeader{len: int64(len(buf))}
	dict := buf[10:]
	if buf[6] >= 2 {
		dict = buf[12:]
	}
	p := pyParser{s: string(bytes.TrimRight(dict, " \n\x00"))}
	d, err := p.dict()
	if err != nil {
		return h, fmt.Errorf(".npy header %q: %w", dict, err)
	}
	descr, ok := d["descr"].(string)
	if !ok {
		if _, list := d["descr"].([]any); list {
			return h, fmt.Errorf(".npy structured dtypes are not supported")
		}
		return h, fmt.Errorf(".npy header %q has no descr string", dict)
	}
	fortran, ok := d["fortran_order"].(bool)
	if !ok {
		return h, fmt.Errorf(".npy header %q has no fortran_order", dict)
	}
	shape, ok := d["shape"].([]int64)
	if !ok {
		return h, fmt.Errorf(".npy header %q has no shape", dict)
	}
	if len(shape) == 0 {
		return h, fmt.Errorf(".npy array of shape () has no rows")
	}
	if fortran && len(shape) > 1 {
		return h, fmt.Errorf(".npy array in Fortran (column-major) order: its rows are not contiguous; save it with numpy.ascontiguousarray")
	}
	item, err := npyItemSize(descr)
	if err != nil {
		return h, err
	}
	row := item
	for _, d := range shape[1:] {
		if d != 0 && row > (1<<40)/d {
			return h, fmt.Errorf(".npy rows of shape %v are too large", shape[1:])
		}
		row *= d
	}
	if row == 0 && shape[0] > 0 {
		return h, fmt.Errorf(".npy rows of 0 bytes (shape %v) cannot be records", shape)
	}
	h.descr, h.shape, h.rowLen = descr, shape, row
	return h, nil
}

// npyItemSize returns the size of one element of a plain dtype.
func npyItemSize(descr string) (int64, error) {
	s := descr
	if s != "" && strings.ContainsRune("<>|=", rune(s[0])) {
		s = s[1:]
	}
	if i := strings.IndexByte(s, '['); i >= 0 && strings.HasSuffix(s, "]") { // datetime units
		s = s[:i]
	}
	if len(s) < 2 || !strings.ContainsRune("biufcmMSUV", rune(s[0])) {
		return 0, fmt.Errorf(".npy dtype %q is not supported (object and structured arrays are not)", descr)
	}
	n, err := strconv.ParseInt(s[1:], 10, 64)
	if err != nil || n <= 0 || n > 1<<30 {
		return 0, fmt.Errorf(".npy dtype %q has no valid size", descr)
	}
	if s[0] == 'U' {
		n *= 4
	}
	return n, nil
}

// npyRowLen returns the row length recorded in a Head.Key.
func npyRowLen(key []byte) int64 {
	descr, dims, _ := strings.Cut(string(key), " ")
	n, err := npyItemSize(descr)
	if err != nil {
		return 0
	}
	for d := range strings.SplitSeq(strings.Trim(dims, "(*,)"), ",") {
		if d = strings.TrimSpace(d); d != "" {
			v, _ := strconv.ParseInt(d, 10, 64)
			n *= v
		}
	}
	return n
}

// appendNPYHeader appends the header of an array of rows rows whose Key
// (dtype and row shape) is key, padded as numpy pads it so that the data
// starts at a multiple of 64 bytes.
func appendNPYHeader(dst, key []byte, rows int64) []byte {
	descr, dims, _ := strings.Cut(string(key), " ")
	rest := strings.TrimPrefix(strings.TrimSuffix(dims, ")"), "(*") // ", 3, 4" or ","
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%d%s), }", descr, rows, rest)
	pre := 10
	if len(dict)+1+pre > 65535 {
		pre = 12
	}
	total := (pre + len(dict) + 1 + 63) / 64 * 64
	dst = append(dst, npyMagic...)
	if pre == 10 {
		dst = append(dst, 1, 0)
		dst = binary.LittleEndian.AppendUint16(dst, uint16(total-pre))
	} else {
		dst = append(dst, 2, 0)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(total-pre))
	}
	dst = append(dst, dict...)
	for range total - pre - len(dict) - 1 {
		dst = append(dst, ' ')
	}
	return append(dst, '\n')
}

// pyParser parses the Python literal of a .npy header: a dict of string
// keys whose values are strings, booleans, tuples of integers or lists.
type pyParser struct {
	s string
	i int
}

func (p *pyParser) ws() {
	for p.i < len(p.s) && strings.IndexByte(" \t\n\r", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *pyParser) eat(c byte) bool {
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *pyParser) dict() (map[string]any, error) {
	if !p.eat('{') {
		return nil, fmt.Errorf("not a dict")
	}
	d := map[string]any{}
	for !p.eat('}') {
		p.ws()
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		if !p.eat(':') {
			return nil, fmt.Errorf("no ':' after key %q", k)
		}
		if d[k], err = p.value(); err != nil {
			return nil, err
		}
		if !p.eat(',') {
			if !p.eat('}') {
				return nil, fmt.Errorf("no ',' or '}' after the value of %q", k)
			}
			break
		}
	}
	p.ws()
	if p.i != len(p.s) {
		return nil, fmt.Errorf("text after the dict")
	}
	return d, nil
}

func (p *pyParser) str() (string, error) {
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", fmt.Errorf("expected a string at %d", p.i)
	}
	q := p.s[p.i]
	j := strings.IndexByte(p.s[p.i+1:], q)
	if j < 0 {
		return "", fmt.Errorf("string not closed")
	}
	s := p.s[p.i+1 : p.i+1+j]
	p.i += j + 2
	return s, nil
}

func (p *pyParser) value() (any, error) {
	p.ws()
	switch {
	case p.i >= len(p.s):
		return nil, fmt.Errorf("missing value")
	case p.s[p.i] == '\'' || p.s[p.i] == '"':
		return p.str()
	case strings.HasPrefix(p.s[p.i:], "True"):
		p.i += 4
		return true, nil
	case strings.HasPrefix(p.s[p.i:], "False"):
		p.i += 5
		return false, nil
	case p.s[p.i] == '(':
		p.i++
		var t []int64
		for !p.eat(')') {
			p.ws()
			j := p.i
			for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
				p.i++
			}
			v, err := strconv.ParseInt(p.s[j:p.i], 10, 64)
			if err != nil || v > 1<<53 {
				return nil, fmt.Errorf("bad dimension %q in shape", p.s[j:p.i])
			}
			if p.i < len(p.s) && p.s[p.i] == 'L' { // Python 2 long
				p.i++
			}
			t = append(t, v)
			if !p.eat(',') {
				if !p.eat(')') {
					return nil, fmt.Errorf("shape tuple not closed")
				}
				break
			}
		}
		if t == nil {
			t = []int64{}
		}
		return t, nil
	case p.s[p.i] == '[':
		// A structured dtype, refused by the caller: skip to its end.
		depth := 0
		for ; p.i < len(p.s); p.i++ {
			switch p.s[p.i] {
			case '[', '(':
				depth++
			case ']', ')':
				depth--
			}
			if depth == 0 {
				p.i++
				return []any{}, nil
			}
		}
		return nil, fmt.Errorf("list not closed")
	}
	return nil, fmt.Errorf("unexpected %q", p.s[p.i:])
}
