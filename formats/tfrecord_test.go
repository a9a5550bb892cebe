package formats

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
)

// specMask is the TFRecord CRC mask written out from the format description,
// independently of the package's own mask.
func specMask(c uint32) uint32 { return ((c >> 15) | (c << 17)) + 0xa282ead8 }

// specFrame builds a frame byte by byte from the format description.
func specFrame(data []byte) []byte {
	crc := func(b []byte) uint32 { return specMask(crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))) }
	var b []byte
	b = binary.LittleEndian.AppendUint64(b, uint64(len(data)))
	b = binary.LittleEndian.AppendUint32(b, crc(b[:8]))
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, crc(data))
}

// header returns a 12-byte frame header with a valid length CRC for any
// length, including lengths no file could hold.
func header(n uint64) []byte {
	h := binary.LittleEndian.AppendUint64(nil, n)
	return binary.LittleEndian.AppendUint32(h, MaskedCRC(h))
}

// file frames records with Writer and returns the bytes and the frame offsets.
func file(t testing.TB, records ...[]byte) ([]byte, []int64) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	var offs []int64
	for _, r := range records {
		offs = append(offs, w.Written())
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes(), offs
}

// scanned is what a full scan with Resync saw.
type scanned struct {
	records []Record
	damaged [][2]int64
	err     error // a non-corruption error that ended the scan
}

func scan(s *Scanner) scanned {
	var got scanned
	for {
		for s.Next() {
			got.records = append(got.records, s.Record())
		}
		if s.Err() == nil {
			return got
		}
		from, to, err := s.Resync()
		if err != nil {
			got.err = err
			return got
		}
		// Without progress the loop would never end.
		if to <= from || s.Offset() != to {
			got.err = fmt.Errorf("Resync skipped [%d,%d) and left the scanner at %d", from, to, s.Offset())
			return got
		}
		got.damaged = append(got.damaged, [2]int64{from, to})
	}
}

// heapAllocated returns the bytes allocated on the heap so far. It reads
// runtime/metrics rather than MemStats because it does not stop the world,
// which matters inside fuzz targets.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func TestMaskedCRCKnownAnswer(t *testing.T) {
	tests := []struct {
		data  string
		crc32 uint32 // plain CRC32C, from published check values
	}{
		{"", 0},
		{"123456789", 0xe3069283},
		{strings.Repeat("\x00", 32), 0x8a9136aa}, // RFC 3720 B.4
		{strings.Repeat("\xff", 32), 0x62a8ab43}, // RFC 3720 B.4
	}
	for _, tt := range tests {
		if got := crc32.Checksum([]byte(tt.data), castagnoli); got != tt.crc32 {
			t.Fatalf("CRC32C(%q) = %#08x, want %#08x; wrong polynomial?", tt.data, got, tt.crc32)
		}
		if got, want := MaskedCRC([]byte(tt.data)), specMask(tt.crc32); got != want {
			t.Errorf("MaskedCRC(%q) = %#08x, want %#08x", tt.data, got, want)
		}
	}
	// Computed outside Go, in case specMask and mask share a mistake.
	if got := MaskedCRC([]byte("123456789")); got != 0xc78ab0e5 {
		t.Errorf("MaskedCRC(\"123456789\") = %#08x, want 0xc78ab0e5", got)
	}
}

func TestFrameMatchesSpec(t *testing.T) {
	for _, data := range []string{"", "a", "hello", "123456789", strings.Repeat("xyz", 1000)} {
		want := specFrame([]byte(data))
		if got := AppendFrame(nil, []byte(data)); !bytes.Equal(got, want) {
			t.Errorf("AppendFrame(%.10q) =\n%x\nwant\n%x", data, got, want)
		}
		var buf bytes.Buffer
		if err := NewWriter(&buf).Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("Writer.Write(%.10q) =\n%x\nwant\n%x", data, buf.Bytes(), want)
		}
	}
}

func TestFrameGolden(t *testing.T) {
	// Computed outside Go with a bitwise CRC32C from the format description.
	tests := []struct{ data, frame string }{
		{"", "0000000000000000" + "29039807" + "" + "d8ea82a2"},
		{"hello", "0500000000000000" + "eab2043e" + "68656c6c6f" + "bb1f1c19"},
	}
	for _, tt := range tests {
		want, _ := hex.DecodeString(tt.frame)
		if got := AppendFrame(nil, []byte(tt.data)); !bytes.Equal(got, want) {
			t.Errorf("AppendFrame(%q) = %x, want %x", tt.data, got, want)
		}
		if got := Payload(want); string(got) != tt.data {
			t.Errorf("Payload(%x) = %q, want %q", want, got, tt.data)
		}
	}
}

func TestAppendFrameKeepsPrefix(t *testing.T) {
	got := AppendFrame([]byte("prefix"), []byte("hello"))
	if !bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(got[6:], specFrame([]byte("hello"))) {
		t.Errorf("AppendFrame with prefix = %x", got)
	}
}

func TestWriterRoundTripsThroughSplitAndScanner(t *testing.T) {
	tests := []struct {
		name    string
		records []string
	}{
		{"no records", nil},
		{"one empty record", []string{""}},
		{"one record", []string{"hello"}},
		{"empty records between others", []string{"a", "", "", "bc", ""}},
		{"varied sizes", []string{"x", strings.Repeat("y", 100), strings.Repeat("z", 70000), "w"}},
		{"data that looks like frames", []string{string(specFrame([]byte("inner"))), string(specFrame(nil))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var recs [][]byte
			for _, r := range tt.records {
				recs = append(recs, []byte(r))
			}
			buf, offs := file(t, recs...)

			var appended []byte
			for _, r := range recs {
				appended = AppendFrame(appended, r)
			}
			if !bytes.Equal(appended, buf) {
				t.Errorf("AppendFrame and Writer disagree")
			}

			starts, err := Split(buf, 0, nil)
			if err != nil {
				t.Fatalf("Split: %v", err)
			}
			if !slices.Equal(starts, offs) {
				t.Errorf("Split starts = %v, want %v", starts, offs)
			}

			s := NewScanner(bytes.NewReader(buf), 0, int64(len(buf)))
			var i int
			for ; s.Next(); i++ {
				if i >= len(recs) {
					t.Fatalf("scanner returned more than %d records", len(recs))
				}
				want := Record{offs[i], int64(len(recs[i])) + FrameExtra}
				rec := s.Record()
				if rec != want {
					t.Errorf("record %d = %+v, want %+v", i, rec, want)
				}
				if got := Payload(buf[rec.Offset:]); !bytes.Equal(got, recs[i]) {
					t.Errorf("record %d payload = %.20q, want %.20q", i, got, recs[i])
				}
			}
			if err := s.Err(); err != nil {
				t.Fatalf("Scanner: %v", err)
			}
			if i != len(recs) {
				t.Errorf("scanner returned %d records, want %d", i, len(recs))
			}
			if s.Offset() != int64(len(buf)) {
				t.Errorf("scanner stopped at %d, want %d", s.Offset(), len(buf))
			}
		})
	}
}

func TestEmptyRecordIsValid(t *testing.T) {
	frame := AppendFrame(nil, nil)
	if len(frame) != FrameExtra {
		t.Fatalf("empty frame is %d bytes, want %d", len(frame), FrameExtra)
	}
	if starts, err := Split(frame, 0, nil); err != nil || !slices.Equal(starts, []int64{0}) {
		t.Errorf("Split(empty frame) = %v, %v; want [0], nil", starts, err)
	}
	s := NewScanner(bytes.NewReader(frame), 0, FrameExtra)
	if !s.Next() || s.Record() != (Record{0, FrameExtra}) {
		t.Errorf("Scanner did not return the empty record: %+v, %v", s.Record(), s.Err())
	}
	if s.Next() || s.Err() != nil {
		t.Errorf("Scanner after the empty record: err = %v", s.Err())
	}
}

func TestCorruptionGivesCorruptErrorAtFrameOffset(t *testing.T) {
	valid, offs := file(t, []byte("first"), []byte("second record"), []byte("third"))
	second := offs[1]
	flip := func(i int64) []byte {
		b := bytes.Clone(valid)
		b[i] ^= 0x01
		return b
	}
	// withHeader replaces the second frame by a header with a valid length
	// CRC but a length the file cannot hold, followed by some bytes.
	withHeader := func(n uint64) []byte {
		b := bytes.Clone(valid[:second])
		b = append(b, header(n)...)
		return append(b, "some bytes after the header"...)
	}
	tests := []struct {
		name   string
		data   []byte
		offset int64
		reason string
	}{
		{"flipped data byte", flip(second + HeaderLen + 3), second, "data CRC mismatch"},
		{"flipped data CRC byte", flip(offs[2] - 1), second, "data CRC mismatch"},
		{"flipped length byte", flip(second + 1), second, "length CRC mismatch"},
		{"flipped high length byte", flip(second + 7), second, "length CRC mismatch"},
		{"flipped length CRC byte", flip(second + 9), second, "length CRC mismatch"},
		{"fewer than 16 bytes left", valid[:offs[2]+FrameExtra-1], offs[2], "truncated frame"},
		{"one byte left", valid[:offs[2]+1], offs[2], "truncated frame"},
		{"data cut short", valid[:len(valid)-1], offs[2], "runs past the end"},
		{"length 2^63", withHeader(1 << 63), second, "runs past the end"},
		{"length 2^64-1", withHeader(math.MaxUint64), second, "runs past the end"},
		{"length 2^63-1", withHeader(math.MaxInt64), second, "runs past the end"},
		{"length larger than the file", withHeader(1 << 40), second, "runs past the end"},
		{"length one more than the file holds", withHeader(uint64(len("some bytes after the header")) - FooterLen + 1), second, "runs past the end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, base := range []int64{0, 1 << 40} {
				starts, err := Split(tt.data, base, nil)
				checkCorrupt(t, "Split", err, base+tt.offset, tt.reason)
				if want := offs[:len(starts)]; !slices.Equal(starts, want) {
					t.Errorf("Split starts before the damage = %v, want %v", starts, want)
				}
			}

			s := NewScanner(bytes.NewReader(tt.data), 0, int64(len(tt.data)))
			var n int
			for s.Next() {
				n++
			}
			checkCorrupt(t, "Scanner", s.Err(), tt.offset, tt.reason)
			if want := offsetIndex(offs, tt.offset); n != want {
				t.Errorf("Scanner returned %d records before the damage, want %d", n, want)
			}
		})
	}
}

func checkCorrupt(t *testing.T, who string, err error, offset int64, reason string) {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Errorf("%s: got error %v, want a *CorruptError", who, err)
		return
	}
	if ce.Offset != offset || !strings.Contains(ce.Reason, reason) {
		t.Errorf("%s: got %v, want offset %d and reason %q", who, err, offset, reason)
	}
}

func offsetIndex(offs []int64, off int64) int {
	for i, o := range offs {
		if o == off {
			return i
		}
	}
	return -1
}

func TestHugeLengthFieldDoesNotAllocate(t *testing.T) {
	// A length field must be checked against the bytes actually present
	// before anything is sized from it; a 1 TiB length in a tiny file must
	// cost no more than the scanner's own fixed window.
	const limit = DefaultWindow + 1<<20
	for _, n := range []uint64{1 << 30, 1 << 40, 1 << 62, 1 << 63, math.MaxUint64} {
		data := append(header(n), make([]byte, 100)...)
		before := heapAllocated()
		_, serr := Split(data, 0, nil)
		s := NewScanner(bytes.NewReader(data), 0, int64(len(data)))
		s.Next()
		if used := heapAllocated() - before; used > limit {
			t.Errorf("length %d: allocated %d bytes, want at most %d", n, used, limit)
		}
		checkCorrupt(t, "Split", serr, 0, "runs past the end")
		checkCorrupt(t, "Scanner", s.Err(), 0, "runs past the end")
	}
}

func TestResyncAfterDataCRCSkipsExactlyThatFrame(t *testing.T) {
	data, offs := file(t, []byte("a"), []byte("damaged"), []byte("c"), []byte(""), []byte("e"))
	data[offs[1]+HeaderLen] ^= 0xff

	got := scan(NewScanner(bytes.NewReader(data), 0, int64(len(data))))
	if got.err != nil {
		t.Fatal(got.err)
	}
	wantRecords := []Record{{offs[0], 17}, {offs[2], 17}, {offs[3], 16}, {offs[4], 17}}
	if !slices.Equal(got.records, wantRecords) {
		t.Errorf("records = %v, want %v", got.records, wantRecords)
	}
	if want := [][2]int64{{offs[1], offs[2]}}; !slices.Equal(got.damaged, want) {
		t.Errorf("damaged = %v, want %v", got.damaged, want)
	}
}

func TestResyncAfterLengthCRCFindsNextIntactFrame(t *testing.T) {
	data, offs := file(t, []byte("a"), []byte("its length is damaged"), []byte("c"), []byte("d"))
	tests := []struct {
		name string
		at   int64
	}{
		{"length byte", offs[1]},
		{"length CRC byte", offs[1] + 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := bytes.Clone(data)
			data[tt.at] ^= 0x40
			got := scan(NewScanner(bytes.NewReader(data), 0, int64(len(data))))
			if got.err != nil {
				t.Fatal(got.err)
			}
			wantRecords := []Record{{offs[0], 17}, {offs[2], 17}, {offs[3], 17}}
			if !slices.Equal(got.records, wantRecords) {
				t.Errorf("records = %v, want %v", got.records, wantRecords)
			}
			if want := [][2]int64{{offs[1], offs[2]}}; !slices.Equal(got.damaged, want) {
				t.Errorf("damaged = %v, want %v", got.damaged, want)
			}
		})
	}
}

func TestResyncFindsFrameRightAfterStrayBytes(t *testing.T) {
	// Bytes spliced in between two frames: the next frame can start as
	// little as one byte after the damage, and Resync must not step over it.
	for n := 1; n <= 20; n++ {
		a := AppendFrame(nil, []byte("a"))
		data := append(bytes.Clone(a), bytes.Repeat([]byte{0xee}, n)...)
		next := int64(len(data))
		data = AppendFrame(data, []byte("b"))

		got := scan(NewScanner(bytes.NewReader(data), 0, int64(len(data))))
		if got.err != nil {
			t.Fatal(got.err)
		}
		if want := []Record{{0, 17}, {next, 17}}; !slices.Equal(got.records, want) {
			t.Errorf("%d stray bytes: records = %v, want %v", n, got.records, want)
		}
		if want := [][2]int64{{int64(len(a)), next}}; !slices.Equal(got.damaged, want) {
			t.Errorf("%d stray bytes: damaged = %v, want %v", n, got.damaged, want)
		}
	}
}

func TestResyncAfterSuccessiveDamage(t *testing.T) {
	// Each Resync must act on its own error: a data CRC failure followed by
	// a length CRC failure must not reuse the first frame's length.
	data, offs := file(t, []byte("a"), []byte("bad data"), []byte("bad length, longer"), []byte("d"), []byte("bad data again"), []byte("f"))
	data[offs[1]+HeaderLen] ^= 1
	data[offs[2]+2] ^= 1
	data[offs[4]+HeaderLen+5] ^= 1

	got := scan(NewScanner(bytes.NewReader(data), 0, int64(len(data))))
	if got.err != nil {
		t.Fatal(got.err)
	}
	if want := []Record{{offs[0], 17}, {offs[3], 17}, {offs[5], 17}}; !slices.Equal(got.records, want) {
		t.Errorf("records = %v, want %v", got.records, want)
	}
	if want := [][2]int64{{offs[1], offs[2]}, {offs[2], offs[3]}, {offs[4], offs[5]}}; !slices.Equal(got.damaged, want) {
		t.Errorf("damaged = %v, want %v", got.damaged, want)
	}
}

func TestResyncOverGarbageAtEndReportsDamageToEnd(t *testing.T) {
	valid, offs := file(t, []byte("a"), []byte("b"))
	tests := []struct {
		name    string
		garbage []byte
	}{
		{"fewer than a frame", []byte("0123456789")},
		{"zeros", make([]byte, 100)},
		{"text", []byte(strings.Repeat("not a TFRecord frame ", 20))},
		{"a frame cut short", AppendFrame(nil, []byte("cut short"))[:20]},
		{"a header without its data", header(64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := append(bytes.Clone(valid), tt.garbage...)
			got := scan(NewScanner(bytes.NewReader(data), 0, int64(len(data))))
			if got.err != nil {
				t.Fatal(got.err)
			}
			if want := []Record{{offs[0], 17}, {offs[1], 17}}; !slices.Equal(got.records, want) {
				t.Errorf("records = %v, want %v", got.records, want)
			}
			if want := [][2]int64{{int64(len(valid)), int64(len(data))}}; !slices.Equal(got.damaged, want) {
				t.Errorf("damaged = %v, want %v", got.damaged, want)
			}
		})
	}
}

func TestResyncWithoutCorruptionFails(t *testing.T) {
	data, _ := file(t, []byte("a"))
	s := NewScanner(bytes.NewReader(data), 0, int64(len(data)))
	if _, _, err := s.Resync(); err == nil {
		t.Error("Resync before any error succeeded")
	}
	for s.Next() {
	}
	if _, _, err := s.Resync(); err == nil {
		t.Error("Resync at a clean end succeeded")
	}
}

func TestScannerRecordsLargerThanWindow(t *testing.T) {
	big := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i * 7)
		}
		return b
	}
	tests := []struct {
		name string
		size int
	}{
		{"frame of one window", DefaultWindow - FrameExtra},
		{"data of one window", DefaultWindow},
		{"data of one window and a byte", DefaultWindow + 1},
		{"5 MiB", 5 << 20},
		{"two and a half windows", 5*DefaultWindow/2 + 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, offs := file(t, []byte("before"), big(tt.size), []byte("after"))
			got := scan(NewScanner(bytes.NewReader(data), 0, int64(len(data))))
			want := []Record{{offs[0], 22}, {offs[1], int64(tt.size) + FrameExtra}, {offs[2], 21}}
			if got.err != nil || got.damaged != nil || !slices.Equal(got.records, want) {
				t.Errorf("got %v, damaged %v, err %v; want %v", got.records, got.damaged, got.err, want)
			}

			// Damage past the first window must still be seen, and only the
			// big frame skipped.
			data[offs[2]-FooterLen-1] ^= 1
			got = scan(NewScanner(bytes.NewReader(data), 0, int64(len(data))))
			want = []Record{want[0], want[2]}
			if got.err != nil || !slices.Equal(got.records, want) {
				t.Errorf("after damage: got %v, err %v; want %v", got.records, got.err, want)
			}
			if wantDamage := [][2]int64{{offs[1], offs[2]}}; !slices.Equal(got.damaged, wantDamage) {
				t.Errorf("after damage: damaged = %v, want %v", got.damaged, wantDamage)
			}
		})
	}
}

func TestScannerSubRange(t *testing.T) {
	data, offs := file(t, []byte("r0"), []byte("r1"), []byte("r2"), []byte("r3"), []byte("r4"))
	rec := func(i int) Record { return Record{offs[i], 18} }
	tests := []struct {
		name       string
		start, end int64
		records    []Record
		damaged    [][2]int64
	}{
		{"whole file", 0, int64(len(data)), []Record{rec(0), rec(1), rec(2), rec(3), rec(4)}, nil},
		{"middle frames", offs[1], offs[4], []Record{rec(1), rec(2), rec(3)}, nil},
		{"one frame", offs[2], offs[3], []Record{rec(2)}, nil},
		{"empty range", offs[2], offs[2], nil, nil},
		{"start inside a frame", offs[1] + 1, offs[4], []Record{rec(2), rec(3)}, [][2]int64{{offs[1] + 1, offs[2]}}},
		// The frame at offs[3] is intact in the file, but not inside the
		// range: the scanner must not read past end, even when resyncing.
		{"end inside a frame header", offs[1], offs[3] + 5, []Record{rec(1), rec(2)}, [][2]int64{{offs[3], offs[3] + 5}}},
		{"end inside a frame footer", offs[1], offs[4] - 1, []Record{rec(1), rec(2)}, [][2]int64{{offs[3], offs[4] - 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := scan(NewScanner(bytes.NewReader(data), tt.start, tt.end))
			if got.err != nil {
				t.Fatal(got.err)
			}
			if !slices.Equal(got.records, tt.records) {
				t.Errorf("records = %v, want %v", got.records, tt.records)
			}
			if !slices.Equal(got.damaged, tt.damaged) {
				t.Errorf("damaged = %v, want %v", got.damaged, tt.damaged)
			}
		})
	}
}

func TestSniffCompressed(t *testing.T) {
	tfr, _ := file(t, []byte("some record"), []byte("another record"))
	compress := func(newWriter func(io.Writer) io.WriteCloser) []byte {
		var buf bytes.Buffer
		w := newWriter(&buf)
		if _, err := w.Write(tfr); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	zlibLevel := func(level int) func(io.Writer) io.WriteCloser {
		return func(w io.Writer) io.WriteCloser {
			zw, err := zlib.NewWriterLevel(w, level)
			if err != nil {
				t.Fatal(err)
			}
			return zw
		}
	}
	// A record of length 0x9c78 starts with the bytes 78 9c, the most common
	// zlib header; the valid frame header must win.
	zlibLookalike, _ := file(t, make([]byte, 0x9c78))
	if !bytes.HasPrefix(zlibLookalike, []byte{0x78, 0x9c}) {
		t.Fatalf("lookalike starts with %x", zlibLookalike[:2])
	}

	tests := []struct {
		name string
		head []byte
		want bool
	}{
		{"gzip", compress(func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }), true},
		{"zlib default", compress(zlibLevel(zlib.DefaultCompression)), true},
		{"zlib best speed", compress(zlibLevel(zlib.BestSpeed)), true},
		{"zlib best compression", compress(zlibLevel(zlib.BestCompression)), true},
		{"tfrecord", tfr, false},
		{"tfrecord with an empty record", AppendFrame(nil, nil), false},
		{"tfrecord whose length looks like zlib", zlibLookalike, false},
		{"empty", nil, false},
		{"one byte", []byte{0x1f}, false},
		{"gzip magic alone", []byte{0x1f, 0x8b}, true},
		{"zlib check bits with a 64 KiB window", []byte{0x88, 0x1c}, false},
		{"text", []byte("hello, world"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SniffCompressed(tt.head); got != tt.want {
				t.Errorf("SniffCompressed(%x...) = %v, want %v", tt.head[:min(len(tt.head), 4)], got, tt.want)
			}
		})
	}
}

func TestScannerOnShrunkenFileFails(t *testing.T) {
	data, offs := file(t, []byte("first"), []byte("second"), []byte("third"), []byte("fourth"))
	tests := []struct {
		name   string
		size   int64 // what the file holds now
		window int
		intact int // frames wholly inside the shrunken file
	}{
		{"shrunk before the first read", offs[2] + 3, DefaultWindow, 2},
		{"shrunk to nothing", 0, DefaultWindow, 0},
		{"shrunk mid-scan, cut in a frame", offs[2] + 3, HeaderLen, 2},
		{"shrunk mid-scan, cut at a frame", offs[3], HeaderLen, 3},
		{"shrunk by one byte", int64(len(data)) - 1, HeaderLen, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The scanner was told the old size; the reader returns io.EOF
			// with a short count, as os.File does on a shrunken file.
			r := io.NewSectionReader(bytes.NewReader(data), 0, tt.size)
			s := newScanner(r, 0, int64(len(data)), tt.window)
			var n int
			for s.Next() {
				if s.Record().Offset != offs[n] {
					t.Errorf("record %d at %d, want %d", n, s.Record().Offset, offs[n])
				}
				n++
			}
			// How far the scanner gets depends on how far it reads ahead,
			// but it can never return a frame the file no longer holds.
			if n > tt.intact {
				t.Errorf("read %d records, but only %d are in the file", n, tt.intact)
			}
			err := s.Err()
			var ce *CorruptError
			if err == nil || errors.As(err, &ce) || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("Err = %v, want a read error wrapping io.ErrUnexpectedEOF", err)
			}
			if _, _, rerr := s.Resync(); rerr == nil {
				t.Error("Resync after a read error succeeded")
			}
		})
	}
}

func TestResyncReadErrorStopsScanner(t *testing.T) {
	// The second frame's length is damaged, so Resync has to read on; the
	// file has shrunk, so one of those reads fails.
	data, offs := file(t, []byte("first"), []byte("second"), []byte("third"))
	data[offs[1]] ^= 1
	r := io.NewSectionReader(bytes.NewReader(data), 0, offs[2]+4)
	s := newScanner(r, 0, int64(len(data)), HeaderLen)
	for s.Next() {
	}
	var ce *CorruptError
	if !errors.As(s.Err(), &ce) || ce.Offset != offs[1] {
		t.Fatalf("Err = %v, want a *CorruptError at %d", s.Err(), offs[1])
	}
	if _, _, err := s.Resync(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Resync over a shrunken file: err = %v, want io.ErrUnexpectedEOF", err)
	}
	if s.Next() || !errors.Is(s.Err(), io.ErrUnexpectedEOF) {
		t.Errorf("Next after a failed Resync: Err = %v, want the read error", s.Err())
	}
}

func TestScannerReturnsReadError(t *testing.T) {
	data, _ := file(t, []byte("a"), []byte("b"))
	f, err := os.CreateTemp(t.TempDir(), "tfrecord")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	f.Close() // every ReadAt now fails with os.ErrClosed
	s := NewScanner(f, 0, int64(len(data)))
	if s.Next() || !errors.Is(s.Err(), os.ErrClosed) {
		t.Errorf("Next on a closed file: Err = %v, want os.ErrClosed", s.Err())
	}
}

func TestWriterReturnsWriteError(t *testing.T) {
	r, w := io.Pipe()
	r.Close()
	fw := NewWriter(w)
	if err := fw.Write([]byte("a")); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Write to a closed pipe: %v, want io.ErrClosedPipe", err)
	}
	if fw.Written() != 0 {
		t.Errorf("Written = %d after a failed write, want 0", fw.Written())
	}
}

func TestCorruptErrorMessageNamesOffset(t *testing.T) {
	err := &CorruptError{Offset: 1234, Reason: "data CRC mismatch"}
	if got, want := err.Error(), "corrupt record at offset 1234: data CRC mismatch"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestSmallWindowMatchesDefault(t *testing.T) {
	// Scanning with windows smaller than a frame exercises every way a
	// header, data or footer can straddle a window edge.
	var recs [][]byte
	for i := range 40 {
		recs = append(recs, bytes.Repeat([]byte{byte(i)}, i*3))
	}
	data, _ := file(t, recs...)
	data[len(data)/2] ^= 1
	data = append(data, "trailing garbage"...)
	want := scan(NewScanner(bytes.NewReader(data), 0, int64(len(data))))
	if want.err != nil || len(want.damaged) != 2 || len(want.records) != len(recs)-1 {
		t.Fatalf("default window: %+v", want)
	}
	for w := HeaderLen; w < 80; w++ {
		got := scan(newScanner(bytes.NewReader(data), 0, int64(len(data)), w))
		if got.err != nil || !slices.Equal(got.records, want.records) || !slices.Equal(got.damaged, want.damaged) {
			t.Errorf("window %d: got %+v, want %+v", w, got, want)
		}
	}
}
