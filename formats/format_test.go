package formats

import (
	"bytes"
	"encoding/binary"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// fileRecords is what a Format's Head and Scan found in one file.
type fileRecords struct {
	head Head
	recs []Record
}

func scanFile(f Format, data []byte) (fileRecords, error) {
	r := bytes.NewReader(data)
	h, err := f.Head(r, int64(len(data)))
	if err != nil {
		return fileRecords{}, err
	}
	s := fileRecords{head: h}
	sc := f.Scan(r, h, h.Start, h.End)
	for sc.Next() {
		s.recs = append(s.recs, sc.Record())
	}
	return s, sc.Err()
}

// served returns record i of a fileRecords file as a part serves it: its
// stored bytes, and the file's Tail after the last one.
func (s fileRecords) served(data []byte, i int) []byte {
	r := s.recs[i]
	b := slices.Clone(data[r.Offset : r.Offset+r.Len])
	if i == len(s.recs)-1 {
		b = append(b, s.head.Tail...)
	}
	return b
}

// block returns the bytes of records [lo, hi) as the loader holds them.
func (s fileRecords) block(data []byte, lo, hi int) []byte {
	var b []byte
	for i := lo; i < hi; i++ {
		b = append(b, s.served(data, i)...)
	}
	return b
}

// checkScanSplitRead checks that the scanner's records tile the file from
// Head.Start, that SplitFilled finds the same records in any block of
// them (whole, or fed a few bytes at a time), and that the format's
// reader returns them too.
func checkScanSplitRead(t *testing.T, f Format, data []byte) fileRecords {
	t.Helper()
	s, err := scanFile(f, data)
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	off := s.head.Start
	if len(s.recs) > 0 && f.Name() == "wds" {
		off = s.recs[0].Offset // members before the first sample are not served
	}
	for i, r := range s.recs {
		if r.Offset != off || r.Len <= 0 {
			t.Fatalf("record %d is %+v, want it to start at %d", i, r, off)
		}
		off += r.Len
	}
	for _, lohi := range [][2]int{{0, len(s.recs)}, {len(s.recs) / 2, len(s.recs)}, {0, len(s.recs) / 2}} {
		lo, hi := lohi[0], lohi[1]
		if lo == hi {
			continue
		}
		buf := s.block(data, lo, hi)
		var want []int64
		for i := lo; i < hi; i++ {
			want = append(want, s.recs[i].Offset-s.recs[lo].Offset)
		}
		got, _, err := f.SplitFilled(s.head, buf, int64(len(buf)), 0, s.recs[lo].Offset, nil)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("split of records [%d,%d): %v, %v; want %v", lo, hi, got, err, want)
		}
		for _, step := range []int64{1, 7, 100} {
			var got []int64
			from := int64(0)
			for filled := min(step, int64(len(buf))); ; filled = min(filled+step, int64(len(buf))) {
				got, from, err = f.SplitFilled(s.head, buf, filled, from, s.recs[lo].Offset, got)
				if err != nil {
					t.Fatalf("split filled %d of %d by %d: %v", filled, len(buf), step, err)
				}
				if filled == int64(len(buf)) {
					break
				}
			}
			if !slices.Equal(got, want) || from != int64(len(buf)) {
				t.Fatalf("split by %d: %v ending at %d; want %v ending at %d", step, got, from, want, len(buf))
			}
		}
	}
	rd := f.NewReader(bytes.NewReader(data))
	for i := range s.recs {
		got, err := rd.Next()
		if err != nil {
			t.Fatalf("reader: record %d: %v", i, err)
		}
		if want := s.served(data, i); !bytes.Equal(got, want) {
			t.Fatalf("reader: record %d is %q, want %q", i, got, want)
		}
	}
	if got, err := rd.Next(); err != io.EOF {
		t.Fatalf("reader after %d records: %q, %v; want io.EOF", len(s.recs), got, err)
	}
	if s.head.Start > 0 && f.Name() != "fixed" && !bytes.Equal(rd.Prologue(), data[:s.head.Start]) {
		t.Fatalf("reader prologue %q, want %q", rd.Prologue(), data[:s.head.Start])
	}
	return s
}

// part builds a served part from all the records of files, shuffled,
// as the planner and the stream will: prologue, records, epilogue.
func part(t *testing.T, f Format, files [][]byte, seed uint64) ([]byte, [][]byte) {
	t.Helper()
	var recs [][]byte
	var head Head
	for i, data := range files {
		s, err := scanFile(f, data)
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		if i == 0 {
			head = s.head
		} else if err := Agree(f, "a", head, "b", s.head); err != nil {
			t.Fatal(err)
		}
		for j := range s.recs {
			recs = append(recs, s.served(data, j))
		}
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	b := f.AppendPrologue(nil, head, int64(len(recs)))
	for _, r := range recs {
		b = append(b, r...)
	}
	return f.AppendEpilogue(b, head), recs
}

// sameMultiset reports whether a and b hold the same strings, counted.
func sameMultiset(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestLinesKeepLineEndsVerbatimAndEndTheLastLine(t *testing.T) {
	files := [][]byte{
		[]byte("one\ntwo\r\n\nthree"),
		[]byte("four\r\nfive\n"),
		[]byte(""),
		[]byte("x"),
	}
	for _, data := range files {
		checkScanSplitRead(t, Lines{}, data)
	}
	p, _ := part(t, Lines{}, files, 1)
	got := strings.SplitAfter(string(p), "\n")
	got = got[:len(got)-1] // after the last "\n"
	want := []string{"one\n", "two\r\n", "\n", "three\n", "four\r\n", "five\n", "x\n"}
	if !sameMultiset(got, want) {
		t.Fatalf("part lines %q, want %q in some order", got, want)
	}
	if !strings.HasSuffix(string(p), "\n") {
		t.Fatalf("part %q does not end with a line end", p)
	}
}

func TestJSONLCheckNamesTheLineThatIsNotJSON(t *testing.T) {
	good := []byte("{\"a\": 1}\n[1, 2]\r\n\"s\"\n3")
	s := checkScanSplitRead(t, JSONL{Check: true}, good)
	if len(s.recs) != 4 {
		t.Fatalf("%d records, want 4", len(s.recs))
	}
	p, _ := part(t, JSONL{Check: true}, [][]byte{good, []byte("{}\n")}, 2)
	for l := range strings.Lines(string(p)) {
		if !json.Valid([]byte(l)) {
			t.Fatalf("served line %q is not JSON", l)
		}
	}
	bad := []byte("{\"a\": 1}\n{\"b\": \n{}\n")
	_, err := scanFile(JSONL{Check: true}, bad)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Offset != 9 || !strings.Contains(ce.Reason, "line 2") {
		t.Fatalf("got %v, want a *CorruptError at offset 9 naming line 2", err)
	}
	if _, err := scanFile(JSONL{}, bad); err != nil {
		t.Fatalf("without Check: %v", err)
	}
}

func TestLibSVMSyntaxErrorsNameTheLine(t *testing.T) {
	good := []byte("1 1:0.5 3:2\n-1 qid:3 2:1e-3 10:-4 # comment\r\n+1\n0,2 4:inf\n")
	checkScanSplitRead(t, LibSVM{}, good)
	p, recs := part(t, LibSVM{}, [][]byte{good}, 3)
	if got := strings.Count(string(p), "\n"); got != len(recs) {
		t.Fatalf("part has %d lines, want %d", got, len(recs))
	}
	for _, c := range []struct {
		line, reason string
	}{
		{"1 2:1 1:1\n", "indices must increase"},
		{"1 a:1\n", "not a non-negative integer"},
		{"1 -1:1\n", "not a non-negative integer"},
		{"1 1:x\n", "not a number"},
		{"x 1:1\n", "not a number"},
		{"1 1\n", "not index:value"},
		{"\n", "empty line"},
		{"1 1:1.\n", ""}, // valid: "1." is a number
	} {
		data := []byte("1 1:1\n" + c.line)
		_, err := scanFile(LibSVM{}, data)
		if c.reason == "" {
			if err != nil {
				t.Errorf("%q: %v", c.line, err)
			}
			continue
		}
		var ce *CorruptError
		if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "line 2") || !strings.Contains(ce.Reason, c.reason) {
			t.Errorf("%q: got %v, want an error naming line 2 and %q", c.line, err, c.reason)
		}
	}
}

func TestIsNumberAgreesWithParseFloat(t *testing.T) {
	for _, s := range []string{"1", "-1", "+1.5", ".5", "5.", "1e3", "1E-3", "1e", "e3", ".", "", "-", "inf", "-Inf", "NaN", "infinity", "0x10", "1_000", "1.2.3", "in"} {
		_, err := strconv.ParseFloat(s, 64)
		ok := err == nil && !strings.ContainsAny(s, "x_")
		if got := isNumber([]byte(s)); got != ok {
			t.Errorf("isNumber(%q) = %v, want %v", s, got, ok)
		}
	}
}

// csvRows reads data with encoding/csv, the independent reader.
func csvRows(t *testing.T, data []byte) [][]string {
	t.Helper()
	rows, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatalf("encoding/csv: %v", err)
	}
	return rows
}

func joinRows(rows [][]string) []string {
	var s []string
	for _, r := range rows {
		s = append(s, strings.Join(r, "\x00"))
	}
	return s
}

func TestCSVRowsWithQuotedNewlinesAreNeverCutAndPartsParse(t *testing.T) {
	files := [][]byte{
		[]byte("id,text\n1,plain\n2,\"two\nlines\"\r\n3,\"a \"\"quote\"\", and, commas\"\n4,\"\"\n"),
		[]byte("id,text\r\n5,\"\n\"\n6,last without newline"),
		[]byte("id,text\n"),
		[]byte(""),
	}
	var want []string
	for _, data := range files {
		s := checkScanSplitRead(t, CSV{Header: true}, data)
		for i := range s.recs {
			rows := csvRows(t, s.served(data, i))
			if len(rows) != 1 {
				t.Fatalf("record %q holds %d rows", s.served(data, i), len(rows))
			}
		}
		if len(data) > 0 {
			want = append(want, joinRows(csvRows(t, data)[1:])...)
		}
	}
	for seed := range uint64(5) {
		p, _ := part(t, CSV{Header: true}, files, seed)
		rows := csvRows(t, p)
		if !slices.Equal(rows[0], []string{"id", "text"}) {
			t.Fatalf("part header %q", rows[0])
		}
		if got := joinRows(rows[1:]); !sameMultiset(got, want) {
			t.Fatalf("part rows %q, want %q in some order", got, want)
		}
	}
	// Without a header every row is a record.
	s := checkScanSplitRead(t, CSV{}, files[0])
	if len(s.recs) != 5 {
		t.Fatalf("%d records without header, want 5", len(s.recs))
	}
}

func TestCSVFilesWithDifferentHeadersAreAnErrorNamingBothFilesAndHeaders(t *testing.T) {
	a, err := scanFile(CSV{Header: true}, []byte("x,y\n1,2\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := scanFile(CSV{Header: true}, []byte("x,z\n1,2\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = Agree(CSV{Header: true}, "a.csv", a.head, "sub/b.csv", b.head)
	if err == nil {
		t.Fatal("different headers agreed")
	}
	for _, s := range []string{"a.csv", "sub/b.csv", `"x,y\n"`, `"x,z\n"`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not show %s", err, s)
		}
	}
	empty, _ := scanFile(CSV{Header: true}, nil)
	if err := Agree(CSV{Header: true}, "a.csv", a.head, "empty.csv", empty.head); err != nil {
		t.Errorf("an empty file does not agree: %v", err)
	}
}

func TestCSVErrorsAgreeWithEncodingCSVAndNameTheRow(t *testing.T) {
	for _, c := range []struct{ data, reason string }{
		{"a,b\n1,x\"y\n", "bare \""},
		{"a,b\n1,\"x\"y\n", "extraneous"},
		{"a,b\n1,\"open\n", "never closed"},
		{"a,b\n1,2,3\n", "3 fields, but the header has 2"},
		{"a,b\n1,2\n\n", "empty line"},
	} {
		_, err := scanFile(CSV{Header: true}, []byte(c.data))
		var ce *CorruptError
		if !errors.As(err, &ce) || !strings.Contains(ce.Reason, c.reason) || !strings.Contains(ce.Reason, "row") {
			t.Errorf("%q: got %v, want a row error with %q", c.data, err, c.reason)
		}
		if c.reason == "empty line" {
			continue // encoding/csv skips empty lines
		}
		if _, err := csv.NewReader(strings.NewReader(c.data)).ReadAll(); err == nil {
			t.Errorf("%q: encoding/csv accepts what the scanner refused", c.data)
		}
	}
}

// npyFile returns a .npy file written the way numpy.save writes one,
// independently of appendNPYHeader.
func npyFile(dict string, payload []byte) []byte {
	n := 10 + len(dict) + 1
	pad := (64 - n%64) % 64
	h := dict + strings.Repeat(" ", pad) + "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	return append(append(b, h...), payload...)
}

// npyCheck is an independent reader of the served .npy parts: it returns
// descr, shape and data, checking the alignment numpy expects.
func npyCheck(t *testing.T, b []byte) (string, []int, []byte) {
	t.Helper()
	if !bytes.HasPrefix(b, []byte("\x93NUMPY\x01\x00")) {
		t.Fatalf("part does not start with a version 1.0 .npy magic: %q", b[:min(len(b), 10)])
	}
	hl := int(binary.LittleEndian.Uint16(b[8:10]))
	if (10+hl)%64 != 0 || b[10+hl-1] != '\n' {
		t.Fatalf("header of %d bytes is not padded to 64 with a final newline", 10+hl)
	}
	m := regexp.MustCompile(`^\{'descr': '([^']+)', 'fortran_order': False, 'shape': \(([0-9, ]*)\), \} *\n$`).FindSubmatch(b[10 : 10+hl])
	if m == nil {
		t.Fatalf("header %q is not numpy's", b[10:10+hl])
	}
	var shape []int
	for d := range strings.SplitSeq(string(m[2]), ",") {
		if d = strings.TrimSpace(d); d != "" {
			v, _ := strconv.Atoi(d)
			shape = append(shape, v)
		}
	}
	return string(m[1]), shape, b[10+hl:]
}

func TestNPYRowsAreRecordsAndPartsHaveTheirRowCount(t *testing.T) {
	row := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 12) } // 3 float32
	payload := func(from, n int) []byte {
		var b []byte
		for i := range n {
			b = append(b, row(from+i)...)
		}
		return b
	}
	files := [][]byte{
		npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }", payload(0, 4)),
		npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", payload(4, 2)),
		npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", nil),
	}
	for _, data := range files {
		checkScanSplitRead(t, NPY{}, data)
	}
	p, recs := part(t, NPY{}, files, 4)
	descr, shape, data := npyCheck(t, p)
	if descr != "<f4" || !slices.Equal(shape, []int{6, 3}) || len(data) != 6*12 {
		t.Fatalf("part is %s %v with %d data bytes, want <f4 [6 3] with 72", descr, shape, len(data))
	}
	var got, want []string
	for i := range 6 {
		got = append(got, string(data[i*12:(i+1)*12]))
		want = append(want, string(row(i)))
	}
	if !sameMultiset(got, want) || len(recs) != 6 {
		t.Fatalf("part rows differ from the source rows")
	}
	// Parts of other sizes, a one-dimensional array and the 2.0 header.
	h := Head{Key: []byte("<f4 (*, 3)")}
	for _, n := range []int64{0, 1, 9, 10, 1 << 40} {
		_, shape, _ := npyCheck(t, NPY{}.AppendPrologue(nil, h, n))
		if int64(shape[0]) != n {
			t.Errorf("prologue for %d rows says %v", n, shape)
		}
	}
	one := npyFile("{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }", []byte("abcde"))
	s := checkScanSplitRead(t, NPY{}, one)
	if d, shape, _ := npyCheck(t, NPY{}.AppendPrologue(nil, s.head, 5)); d != "|u1" || !slices.Equal(shape, []int{5}) {
		t.Errorf("1-d prologue is %s %v", d, shape)
	}
}

func TestNPYErrorsSayWhatIsWrong(t *testing.T) {
	for _, c := range []struct {
		data []byte
		want string
	}{
		{npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }", make([]byte, 47)), "payload is 47 bytes, but the header says 4 rows of 12 bytes"},
		{npyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (4, 3), }", make([]byte, 48)), "Fortran"},
		{npyFile("{'descr': '|O', 'fortran_order': False, 'shape': (4,), }", make([]byte, 32)), "not supported"},
		{npyFile("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }", make([]byte, 16)), "structured"},
		{npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", make([]byte, 4)), "no rows"},
		{[]byte("PK\x03\x04 a zip file"), "not a .npy file"},
	} {
		_, err := scanFile(NPY{}, c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error saying %q", err, c.want)
		}
	}
}

func TestFixedRecordsSkipTheHeaderAndRefuseAPartialRecord(t *testing.T) {
	f := Fixed{RecordSize: 5, HeaderBytes: 3}
	data := []byte("HDRaaaaabbbbbccccc")
	s := checkScanSplitRead(t, f, data)
	if len(s.recs) != 3 || s.head.Start != 3 {
		t.Fatalf("got %+v", s)
	}
	p, _ := part(t, f, [][]byte{data, []byte("HDRddddd")}, 5)
	if len(p) != 20 {
		t.Fatalf("part of %d bytes, want 20 (no header)", len(p))
	}
	if _, err := scanFile(f, []byte("HDRaaaaab")); err == nil || !strings.Contains(err.Error(), "not a whole number of 5-byte records") {
		t.Fatalf("got %v", err)
	}
	if _, err := Lookup("fixed", Options{}); err == nil {
		t.Fatal("fixed without a record size was accepted")
	}
}

func TestTFRecordThroughTheSeamMatchesItsScanner(t *testing.T) {
	data, _ := frames([]byte("a"), nil, []byte("ccc"))
	s := checkScanSplitRead(t, TFRecord{}, data)
	if len(s.recs) != 3 {
		t.Fatalf("%d records", len(s.recs))
	}
	if PayloadLen(TFRecord{}, s.recs[2].Len) != 3 || PayloadLen(Lines{}, 4) != 4 {
		t.Error("PayloadLen does not remove exactly the TFRecord framing")
	}
	if _, ok := (TFRecord{}).Scan(bytes.NewReader(data), s.head, 0, int64(len(data))).(Resyncer); !ok {
		t.Error("the TFRecord scanner lost Resync")
	}
	gz := []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if _, err := (TFRecord{}).Head(bytes.NewReader(gz), int64(len(gz))); !errors.Is(err, ErrCompressed) {
		t.Fatalf("gzip: %v", err)
	}
}

func TestDetectChoosesByExtensionAndRefusesAMix(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  string
	}{
		{[]string{"a/x.tfrecord", "b.tfrecords", "README"}, "tfrecord"},
		{[]string{"t.csv"}, "csv"},
		{[]string{"t.jsonl", "u.ndjson"}, "jsonl"},
		{[]string{"t.libsvm", "t.svm"}, "libsvm"},
		{[]string{"t.txt", "u.txt"}, "lines"},
		{[]string{"README.txt", "d/x.csv"}, "csv"}, // a .txt beside data is not data
		{[]string{"shard-000.tar"}, "wds"},
		{[]string{"x.npy"}, "npy"},
	} {
		f, err := Detect(c.names, Options{})
		if err != nil || f.Name() != c.want {
			t.Errorf("%v: %v, %v; want %s", c.names, f, err, c.want)
		}
	}
	_, err := Detect([]string{"a.csv", "b.csv", "sub/c.tar"}, Options{})
	if err == nil || !strings.Contains(err.Error(), "a.csv") || !strings.Contains(err.Error(), "sub/c.tar") {
		t.Fatalf("mix: %v, want an error naming a.csv and sub/c.tar", err)
	}
	if _, err := Detect([]string{"a.bin"}, Options{}); !errors.Is(err, ErrNoFormat) {
		t.Fatalf("no format: %v", err)
	}
	for _, n := range Names() {
		f, err := Lookup(n, Options{RecordSize: 4})
		if err != nil || f.Name() != n || !strings.HasPrefix(f.Ext(), ".") || len(f.Include()) == 0 {
			t.Errorf("Lookup(%s) = %v, %v", n, f, err)
		}
	}
	if _, err := Lookup("parquet", Options{}); err == nil || !strings.Contains(err.Error(), "csv") {
		t.Errorf("unknown format: %v", err)
	}
}

func TestBlockSummerSumsTheBytesOfARange(t *testing.T) {
	data := make([]byte, 3<<20+17)
	for i := range data {
		data[i] = byte(i * 7)
	}
	s := NewBlockSummer(bytes.NewReader(data))
	for _, r := range [][2]int64{{0, 0}, {0, int64(len(data))}, {5, 1<<20 + 3}, {int64(len(data)) - 1, 1}} {
		got, err := s.Sum(r[0], r[1])
		want := UpdateChecksum(UpdateChecksum(0, data[r[0]:r[0]+r[1]/2]), data[r[0]+r[1]/2:r[0]+r[1]])
		if err != nil || got != want {
			t.Errorf("range %v: %08x, %v; want %08x", r, got, err, want)
		}
	}
	// Record by record, as the index sums a block while scanning it.
	var crc uint32
	for off := int64(0); off < int64(len(data)); off += 1000 {
		var err error
		if crc, err = s.Update(crc, off, min(1000, int64(len(data))-off)); err != nil {
			t.Fatal(err)
		}
	}
	if want, _ := s.Sum(0, int64(len(data))); crc != want {
		t.Errorf("record by record %08x, whole %08x", crc, want)
	}
	if _, err := s.Sum(int64(len(data))-1, 2); err == nil {
		t.Error("a range past the end summed")
	}
}

func TestScannersAllocateNothingPerRecord(t *testing.T) {
	if raceDetector {
		// Allocation counts mean nothing under the race detector: the
		// same test runs again in a plain build, so that `go test -race`
		// (CI's command) still checks the property instead of skipping it.
		cmd := exec.Command("go", "test", "-count=1", "-run", "^TestScannersAllocateNothingPerRecord$", ".")
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the allocation check in a build without the race detector: %v\n%s", err, out)
		}
		return
	}
	var text, csvData, libsvm []byte
	csvData = append(csvData, "a,b\n"...)
	for i := range 2000 {
		text = fmt.Appendf(text, "{\"n\": %d}\n", i)
		csvData = fmt.Appendf(csvData, "%d,\"x\ny\"\n", i)
		libsvm = fmt.Appendf(libsvm, "1 1:%d 7:0.5\n", i)
	}
	npy := npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2000, 2), }", make([]byte, 16000))
	var ms []member
	for i := range 300 {
		name := fmt.Sprintf("d/%s%04d", strings.Repeat("k", 100*(i%2)), i) // every other one a pax path
		ms = append(ms, member{name: name + ".cls", data: "1"}, member{name: name + ".bin", data: "xyz"})
	}
	wds := shard(t, 0, ms...)
	for _, c := range []struct {
		f    Format
		data []byte
	}{
		{Lines{}, text}, {JSONL{Check: true}, text}, {CSV{Header: true}, csvData}, {LibSVM{}, libsvm},
		{NPY{}, npy}, {Fixed{RecordSize: 8}, npy[128:]}, {WDS{}, wds},
	} {
		r := bytes.NewReader(c.data)
		h, err := c.f.Head(r, int64(len(c.data)))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		allocs := testing.AllocsPerRun(3, func() {
			sc := c.f.Scan(r, h, h.Start, h.End)
			for n = 0; sc.Next(); n++ {
			}
			if sc.Err() != nil {
				t.Fatal(sc.Err())
			}
		})
		// A scanner's own setup allocates a little; WDS keeps each key
		// in a map, to find keys that are not consecutive.
		limit := 20.0
		if c.f.Name() == "wds" {
			limit += 2 * float64(n)
		}
		t.Logf("%s: %.0f allocations for %d records", c.f.Name(), allocs, n)
		if allocs > limit {
			t.Errorf("%s: %.0f allocations to scan %d records", c.f.Name(), allocs, n)
		}
		// Splitting a loaded block, the loader's work, allocates nothing
		// once starts has room.
		if n == 0 {
			continue
		}
		sc := c.f.Scan(r, h, h.Start, h.End)
		sc.Next()
		first := sc.Record().Offset
		end := h.End
		if c.f.Name() == "wds" {
			end -= 2 * tarBlock
		}
		buf := append(bytes.Clone(c.data[first:end]), h.Tail...)
		starts := make([]int64, 0, n)
		var serr error
		if allocs := testing.AllocsPerRun(3, func() {
			starts, _, serr = c.f.SplitFilled(h, buf, int64(len(buf)), 0, first, starts[:0])
		}); allocs > 10 || serr != nil || len(starts) != n {
			t.Errorf("%s: split: %.0f allocations, %d records, %v", c.f.Name(), allocs, len(starts), serr)
		}
	}
}

func TestTFRecordReaderRefusesDamage(t *testing.T) {
	data, offs := frames([]byte("first"), []byte("second"))
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"truncated header", data[:offs[1]+5], "truncated frame header"},
		{"truncated data", data[:len(data)-2], "truncated frame"},
		{"data crc", func() []byte { b := bytes.Clone(data); b[offs[1]+HeaderLen] ^= 1; return b }(), "data CRC mismatch"},
		{"length crc", func() []byte { b := bytes.Clone(data); b[offs[1]] ^= 1; return b }(), "length CRC mismatch"},
	} {
		rd := TFRecord{}.NewReader(bytes.NewReader(c.data))
		if _, err := rd.Next(); err != nil {
			t.Fatalf("%s: first record: %v", c.name, err)
		}
		_, err := rd.Next()
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Offset != offs[1] || !strings.Contains(ce.Reason, c.want) {
			t.Errorf("%s: got %v, want %q at %d", c.name, err, c.want, offs[1])
		}
	}
}

func TestProbeFindsTheNextRecordBoundaryFromAnyOffset(t *testing.T) {
	for _, c := range seamCases(t) {
		p, ok := c.f.(Prober)
		if !ok {
			continue
		}
		for fi, data := range c.files {
			s, err := scanFile(c.f, data)
			if err != nil {
				t.Fatal(err)
			}
			r := bytes.NewReader(data)
			if len(s.recs) == 0 {
				continue
			}
			// Past the last record, the end of the records (a tar shard's
			// end-of-archive marker, else the end of the file).
			last := s.recs[len(s.recs)-1]
			for off := int64(0); off <= int64(len(data)); off++ {
				want := last.Offset + last.Len
				for _, rec := range s.recs {
					if rec.Offset >= off {
						want = rec.Offset
						break
					}
				}
				got, err := p.Probe(r, s.head, off)
				if err != nil || got != want {
					t.Fatalf("%s file %d: Probe(%d) = %d, %v; the scanner's next boundary is %d", c.f.Name(), fi, off, got, err, want)
				}
			}
		}
	}
}

func TestCSVHeaderLongerThanTheFirstReadIsFound(t *testing.T) {
	header := strings.Repeat("column,", 2000) + "\"last\ncolumn\"\n"
	data := []byte(header + strings.Repeat("1,", 2000) + "2\n")
	s := checkScanSplitRead(t, CSV{Header: true}, data)
	if string(s.head.Key) != header || len(s.recs) != 1 {
		t.Fatalf("header of %d bytes, %d records; want %d bytes and 1", len(s.head.Key), len(s.recs), len(header))
	}
	if _, err := scanFile(CSV{Header: true}, bytes.Repeat([]byte("x"), maxCSVHeader+1)); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("a header without end: %v", err)
	}
}

// frames returns a TFRecord file of records and the offset of each (a
// helper of its own, so that these tests do not lean on tfrecord_test.go).
func frames(records ...[]byte) ([]byte, []int64) {
	var b []byte
	var offs []int64
	for _, r := range records {
		offs = append(offs, int64(len(b)))
		b = AppendFrame(b, r)
	}
	return b, offs
}
