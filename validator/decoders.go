package validator

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/corgifs/corgifs/formats"
)

// parseNumber parses a decimal number. Short fields are converted on the
// stack, so the common case does not allocate.
func parseNumber(b []byte) (float64, error) {
	return strconv.ParseFloat(string(b), 64)
}

// A CSVDecoder reads rows of a CSV file: the label from one column and
// every other column, except those in Ignore, as a numeric feature.
type CSVDecoder struct {
	// NoHeader says the files have no header row (formats.Options), so
	// columns are named by number only.
	NoHeader bool
	// Label is the label column: a name from the header, or a number
	// from 0.
	Label string
	// Ignore lists columns (names or numbers) that are not features,
	// such as an id. A name the header does not have is ignored.
	Ignore []string
	// Divide, if not 0, divides every feature (e.g. 255 for 0–255 pixels,
	// which then match the uint8 formats' scaling).
	Divide float32

	header   []string
	label    int
	skip     []bool // per column: not a feature
	resolved bool
	fields   [][]byte
}

func (d *CSVDecoder) Format() formats.Format { return formats.CSV{Header: !d.NoHeader} }

func (d *CSVDecoder) Begin(prologue []byte) error {
	d.header, d.resolved = nil, false
	if d.NoHeader {
		return nil
	}
	rec, err := csv.NewReader(bytes.NewReader(prologue)).Read()
	if err != nil {
		return fmt.Errorf("csv header %q: %w", prologue, err)
	}
	d.header = rec
	return d.resolve(len(rec))
}

// column returns the number of the column called name (a header name, or
// a number).
func (d *CSVDecoder) column(name string, cols int) (int, bool) {
	if i := slices.Index(d.header, name); i >= 0 {
		return i, true
	}
	if i, err := strconv.Atoi(name); err == nil && i >= 0 && i < cols {
		return i, true
	}
	return 0, false
}

// resolve finds the columns of a stream whose rows have cols fields.
func (d *CSVDecoder) resolve(cols int) error {
	label := cmp.Or(d.Label, "label")
	var ok bool
	if d.label, ok = d.column(label, cols); !ok {
		if d.header != nil {
			return fmt.Errorf("csv: no label column %q in the header %q (pass {label-column} NAME or a number from 0)", label, d.header)
		}
		return fmt.Errorf("csv: label column %q is not a column number from 0 to %d (the files have no header)", label, cols-1)
	}
	d.skip = append(d.skip[:0], make([]bool, cols)...)
	d.skip[d.label] = true
	for _, name := range d.Ignore {
		if i, ok := d.column(name, cols); ok {
			d.skip[i] = true
		}
	}
	d.resolved = true
	return nil
}

func (d *CSVDecoder) Decode(row []byte, n int64, x []float32) (int, []float32, error) {
	row = bytes.TrimSuffix(bytes.TrimSuffix(row, []byte("\n")), []byte("\r"))
	if bytes.IndexByte(row, '"') >= 0 {
		// Quoted fields are rare in numeric data: let encoding/csv undo
		// the quoting, at the cost of allocating.
		rec, err := csv.NewReader(bytes.NewReader(row)).Read()
		if err != nil {
			return 0, x, fmt.Errorf("row %d: %w", n, err)
		}
		d.fields = d.fields[:0]
		for _, f := range rec {
			d.fields = append(d.fields, []byte(f))
		}
	} else {
		d.fields = d.fields[:0]
		for f := range bytes.SplitSeq(row, []byte{','}) {
			d.fields = append(d.fields, f)
		}
	}
	if !d.resolved {
		if err := d.resolve(len(d.fields)); err != nil {
			return 0, x, err
		}
	}
	if len(d.fields) != len(d.skip) {
		return 0, x, fmt.Errorf("row %d: %d fields, the first row has %d", n, len(d.fields), len(d.skip))
	}
	v, err := parseNumber(d.fields[d.label])
	if err != nil {
		return 0, x, fmt.Errorf("row %d: label column %d: %w", n, d.label, err)
	}
	label, err := classOf(v)
	if err != nil {
		return 0, x, fmt.Errorf("row %d: %w", n, err)
	}
	out := x
	for i, f := range d.fields {
		if d.skip[i] {
			continue
		}
		v, err := strconv.ParseFloat(string(f), 32)
		if err != nil {
			return 0, x, fmt.Errorf("row %d: column %s is not a number (leave it out with {ignore-columns}): %w", n, d.name(i), err)
		}
		out = append(out, divide(float32(v), d.Divide))
	}
	return label, out, nil
}

// name names column i in messages.
func (d *CSVDecoder) name(i int) string {
	if i < len(d.header) {
		return strconv.Quote(d.header[i])
	}
	return strconv.Itoa(i)
}

// A JSONLDecoder reads JSON lines: objects holding a number under Label
// and an array of numbers under Features.
type JSONLDecoder struct {
	Label    string  // key of the label; "" means "label"
	Features string  // key of the features; "" means "features", or "pixels" if there is no "features"
	Divide   float32 // if not 0, divides every feature

	fields map[string]json.RawMessage
	values []float32
}

func (d *JSONLDecoder) Format() formats.Format { return formats.JSONL{} }
func (d *JSONLDecoder) Begin([]byte) error     { return nil }

func (d *JSONLDecoder) Decode(line []byte, n int64, x []float32) (int, []float32, error) {
	lk, fk := cmp.Or(d.Label, "label"), cmp.Or(d.Features, "features")
	if d.fields == nil {
		d.fields = map[string]json.RawMessage{}
	}
	clear(d.fields)
	if err := json.Unmarshal(line, &d.fields); err != nil {
		return 0, x, fmt.Errorf("line %d: %w", n, err)
	}
	var v float64
	if err := json.Unmarshal(d.fields[lk], &v); err != nil {
		return 0, x, fmt.Errorf("line %d: key %q (the label) is not a number: %w", n, lk, err)
	}
	label, err := classOf(v)
	if err != nil {
		return 0, x, fmt.Errorf("line %d: %w", n, err)
	}
	raw, ok := d.fields[fk]
	if !ok && d.Features == "" {
		raw, ok = d.fields["pixels"]
	}
	if !ok {
		return 0, x, fmt.Errorf("line %d: no key %q (the features)", n, fk)
	}
	if err := json.Unmarshal(raw, &d.values); err != nil {
		return 0, x, fmt.Errorf("line %d: key %q (the features) is not an array of numbers: %w", n, fk, err)
	}
	out := x
	for _, v := range d.values {
		out = append(out, divide(v, d.Divide))
	}
	return label, out, nil
}

// A LibSVMDecoder reads LIBSVM lines, "label [qid:N] index:value …" with
// indexes from 1, into dense vectors of Dim features (those a line does
// not name are 0). A qid and a "#" comment are ignored. Labels follow
// classOf: binary data labelled -1 and +1 gives classes 0 and 1.
type LibSVMDecoder struct {
	Dim    int     // features per record; see LibSVMDim
	Divide float32 // if not 0, divides every feature

	words [][]byte
}

func (d *LibSVMDecoder) Format() formats.Format { return formats.LibSVM{} }

func (d *LibSVMDecoder) Begin([]byte) error {
	if d.Dim < 1 {
		return fmt.Errorf("libsvm: the number of features must be given ({features} N), got %d", d.Dim)
	}
	return nil
}

func (d *LibSVMDecoder) Decode(line []byte, n int64, x []float32) (int, []float32, error) {
	var err error
	d.words, err = splitLibSVM(line, d.words[:0])
	if err != nil {
		return 0, x, fmt.Errorf("line %d: %w", n, err)
	}
	v, err := parseNumber(d.words[0])
	if err != nil {
		return 0, x, fmt.Errorf("line %d: label: %w", n, err)
	}
	class, err := classOf(v)
	if err != nil {
		return 0, x, fmt.Errorf("line %d: %w", n, err)
	}
	base := len(x)
	out := slices.Grow(x, d.Dim)[:base+d.Dim]
	clear(out[base:])
	for _, p := range d.words[1:] {
		k, val, _ := bytes.Cut(p, []byte{':'})
		if string(k) == "qid" {
			continue
		}
		idx, err := strconv.Atoi(string(k))
		if err != nil || idx < 1 {
			return 0, x, fmt.Errorf("line %d: index %q is not an integer from 1", n, k)
		}
		if idx > d.Dim {
			return 0, x, fmt.Errorf("line %d: index %d is beyond the %d features (pass {features} N)", n, idx, d.Dim)
		}
		f, err := strconv.ParseFloat(string(val), 32)
		if err != nil {
			return 0, x, fmt.Errorf("line %d: index %d: %w", n, idx, err)
		}
		out[base+idx-1] = divide(float32(f), d.Divide)
	}
	return class, out, nil
}

// splitLibSVM appends the words of a LIBSVM line, without its comment,
// to words: the label, then index:value (or qid:N) pairs.
func splitLibSVM(line []byte, words [][]byte) ([][]byte, error) {
	if i := bytes.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	for {
		i := 0
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		j := i
		for j < len(line) && !isSpace(line[j]) {
			j++
		}
		if i == j {
			break
		}
		words = append(words, line[i:j])
		line = line[j:]
	}
	if len(words) == 0 {
		return words, fmt.Errorf("no label")
	}
	return words, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// LibSVMDim returns the largest feature index in the LIBSVM files at
// paths, the smallest Dim that reads them all.
func LibSVMDim(open func(path string) (io.ReadCloser, error), paths ...string) (int, error) {
	dim := 0
	var words [][]byte
	for _, p := range paths {
		f, err := open(p)
		if err != nil {
			return 0, err
		}
		rr := formats.LibSVM{}.NewReader(f)
		for n := int64(0); ; n++ {
			line, err := rr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return 0, fmt.Errorf("%s: line %d: %w", p, n, err)
			}
			words, err = splitLibSVM(line, words[:0])
			if err != nil {
				f.Close()
				return 0, fmt.Errorf("%s: line %d: %w", p, n, err)
			}
			for _, w := range words[1:] {
				k, _, _ := bytes.Cut(w, []byte{':'})
				if i, err := strconv.Atoi(string(k)); err == nil {
					dim = max(dim, i)
				}
			}
		}
		if err := f.Close(); err != nil {
			return 0, err
		}
	}
	return dim, nil
}

// A RowDecoder reads rows of numbers: .npy arrays (the dtype from each
// file's header: '<f4', '<f8' or '|u1') or fixed-size records of
// little-endian float32 (Fixed set). Column Label holds the label; every
// other column, except those in Ignore, is a feature.
type RowDecoder struct {
	Fixed  *formats.Fixed // nil: .npy
	Label  int            // column of the label, from 0
	Ignore []int          // columns that are not features

	dtype string
}

func (d *RowDecoder) Format() formats.Format {
	if d.Fixed != nil {
		return *d.Fixed
	}
	return formats.NPY{}
}

// npyDescr finds the dtype in a .npy header. The header itself was
// checked by the format's reader.
var npyDescr = regexp.MustCompile(`'descr':\s*'([^']*)'`)

func (d *RowDecoder) Begin(prologue []byte) error {
	if d.Fixed != nil {
		d.dtype = "<f4"
		return nil
	}
	m := npyDescr.FindSubmatch(prologue)
	if m == nil {
		return fmt.Errorf("npy: no dtype in the header %q", prologue)
	}
	switch d.dtype = string(m[1]); d.dtype {
	case "<f4", "<f8", "|u1", "<u1":
	default:
		return fmt.Errorf("npy: dtype %q is not one the validator reads (float32 '<f4', float64 '<f8', uint8 '|u1')", d.dtype)
	}
	return nil
}

func (d *RowDecoder) Decode(row []byte, n int64, x []float32) (int, []float32, error) {
	size := 4
	switch d.dtype {
	case "<f8":
		size = 8
	case "|u1", "<u1":
		size = 1
	}
	if len(row)%size != 0 {
		return 0, x, fmt.Errorf("row %d: %d bytes is not a whole number of %s values", n, len(row), d.dtype)
	}
	cols := len(row) / size
	if d.Label < 0 || d.Label >= cols {
		return 0, x, fmt.Errorf("row %d: label column %d is not one of the %d columns", n, d.Label, cols)
	}
	value := func(i int) float64 {
		switch size {
		case 8:
			return math.Float64frombits(binary.LittleEndian.Uint64(row[8*i:]))
		case 1:
			return float64(row[i])
		}
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:])))
	}
	label, err := classOf(value(d.Label))
	if err != nil {
		return 0, x, fmt.Errorf("row %d: %w", n, err)
	}
	out := x
	for i := range cols {
		if i == d.Label || slices.Contains(d.Ignore, i) {
			continue
		}
		v := float32(value(i))
		if size == 1 {
			v /= 255
		}
		out = append(out, v)
	}
	return label, out, nil
}

// A WDSDecoder reads WebDataset samples: the label from member KEY.Label
// (a decimal integer, as WebDataset's "cls" decoder reads it) and the
// features from member KEY.Features: little-endian float32 values, or raw
// uint8 pixels when the extension is "pixels".
type WDSDecoder struct {
	Label    string // extension of the label member; "" means "cls"
	Features string // extension of the features member; "" means "bin" or "pixels", whichever the sample has
}

func (d *WDSDecoder) Format() formats.Format { return formats.WDS{} }
func (d *WDSDecoder) Begin([]byte) error     { return nil }

func (d *WDSDecoder) Decode(sample []byte, n int64, x []float32) (int, []float32, error) {
	lext := cmp.Or(d.Label, "cls")
	label, haveLabel := 0, false
	out, haveFeatures := x, false
	err := formats.SampleMembers(sample, func(name string, data []byte) error {
		base := path.Base(name)
		_, ext, _ := strings.Cut(base, ".")
		switch {
		case ext == lext:
			v, err := parseNumber(bytes.TrimSpace(data))
			if err != nil {
				return fmt.Errorf("member %s (the label): %w", name, err)
			}
			if label, err = classOf(v); err != nil {
				return fmt.Errorf("member %s: %w", name, err)
			}
			haveLabel = true
		case ext == d.Features || (d.Features == "" && (ext == "bin" || ext == "pixels")):
			if haveFeatures {
				return fmt.Errorf("member %s: a second features member", name)
			}
			haveFeatures = true
			if ext == "pixels" {
				out = appendPixels(out, data)
				return nil
			}
			if len(data)%4 != 0 {
				return fmt.Errorf("member %s: %d bytes is not a whole number of float32 values", name, len(data))
			}
			for i := 0; i < len(data); i += 4 {
				out = append(out, math.Float32frombits(binary.LittleEndian.Uint32(data[i:])))
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return 0, x, fmt.Errorf("sample %d: %w", n, err)
	case !haveLabel:
		return 0, x, fmt.Errorf("sample %d: no member .%s (the label)", n, lext)
	case !haveFeatures:
		want := ".bin or .pixels"
		if d.Features != "" {
			want = "." + d.Features
		}
		return 0, x, fmt.Errorf("sample %d: no member %s (the features)", n, want)
	}
	return label, out, nil
}

// divide returns v/by, or v when by is 0.
func divide(v, by float32) float32 {
	if by == 0 {
		return v
	}
	return v / by
}
