package formats

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"testing"
)

// seedFiles are small TFRecord files, intact and damaged, that the fuzz
// targets start from. testdata/fuzz holds the same files as a corpus.
func seedFiles(t testing.TB) map[string][]byte {
	several, offs := file(t, []byte("first"), nil, []byte("third record"), []byte{0, 1, 2, 3})
	one, _ := file(t, []byte("hello"))
	flip := func(i int64) []byte {
		b := bytes.Clone(several)
		b[i] ^= 0x10
		return b
	}
	return map[string][]byte{
		"valid-0-records":     {},
		"valid-1-record":      one,
		"valid-1-empty":       AppendFrame(nil, nil),
		"valid-several":       several,
		"truncated-in-data":   several[:offs[2]+HeaderLen+4],
		"truncated-in-header": several[:offs[3]+5],
		"corrupt-data":        flip(offs[2] + HeaderLen + 1),
		"corrupt-length":      flip(offs[1]),
		"huge-length":         append(append(bytes.Clone(one), header(1<<63)...), "after"...),
		"garbage-tail":        append(bytes.Clone(several), "not a frame at all"...),
	}
}

func FuzzScanner(f *testing.F) {
	seeds := seedFiles(f)
	for _, name := range slices.Sorted(maps.Keys(seeds)) {
		f.Add(seeds[name])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		before := heapAllocated()
		want := checkScan(t, data, NewScanner(bytes.NewReader(data), 0, int64(len(data))))
		// Tiny windows make headers, data and footers straddle window
		// edges, which the default window never does on small inputs.
		for _, w := range []int{HeaderLen, 29} {
			got := checkScan(t, data, newScanner(bytes.NewReader(data), 0, int64(len(data)), w))
			if !slices.Equal(got.records, want.records) || !slices.Equal(got.damaged, want.damaged) {
				t.Fatalf("window %d: got %+v, default window got %+v", w, got, want)
			}
		}
		checkAllocs(t, before, len(data))

		// Split must agree with the scanner up to the first damage, and
		// every stretch between damaged ranges must split cleanly.
		starts, err := Split(data, 0, nil)
		var clean []int64
		for _, r := range want.records {
			if len(want.damaged) > 0 && r.Offset >= want.damaged[0][0] {
				break
			}
			clean = append(clean, r.Offset)
		}
		if !slices.Equal(starts, clean) {
			t.Fatalf("Split starts %v, scanner found %v before the first damage", starts, clean)
		}
		var ce *CorruptError
		switch {
		case len(want.damaged) == 0 && err != nil:
			t.Fatalf("Split failed with %v where the scanner found no damage", err)
		case len(want.damaged) > 0 && (!errors.As(err, &ce) || ce.Offset != want.damaged[0][0]):
			t.Fatalf("Split error %v, scanner found damage first at %d", err, want.damaged[0][0])
		}
		from := int64(0)
		for _, d := range append(want.damaged, [2]int64{int64(len(data)), 0}) {
			if _, err := Split(data[from:d[0]], from, nil); err != nil {
				t.Fatalf("stretch [%d,%d) between damaged ranges: %v", from, d[0], err)
			}
			from = d[1]
		}
	})
}

// checkScan runs s to the end of data, resyncing after damage, and checks
// that records and damaged ranges tile the data in order.
func checkScan(t *testing.T, data []byte, s *Scanner) scanned {
	t.Helper()
	var got scanned
	var pos int64
	// Every step moves pos on by at least one byte.
	for steps := 0; ; steps++ {
		if steps > len(data)+1 {
			t.Fatalf("no progress after %d steps, at offset %d", steps, pos)
		}
		if s.Next() {
			r := s.Record()
			if r.Offset != pos || r.Len < FrameExtra || r.Len > int64(len(data))-pos {
				t.Fatalf("record %+v: want a frame at %d inside %d bytes", r, pos, len(data))
			}
			frame := data[r.Offset : r.Offset+r.Len]
			if starts, err := Split(frame, r.Offset, nil); err != nil || !slices.Equal(starts, []int64{0}) {
				t.Fatalf("record %+v does not split on its own: %v, %v", r, starts, err)
			}
			got.records = append(got.records, r)
			pos += r.Len
			continue
		}
		if s.Err() == nil {
			break
		}
		var ce *CorruptError
		if !errors.As(s.Err(), &ce) {
			t.Fatalf("Next: %v, want a *CorruptError", s.Err())
		}
		if ce.Offset != pos || s.Offset() != pos {
			t.Fatalf("damage reported at %d, scanner at %d, want %d", ce.Offset, s.Offset(), pos)
		}
		from, to, err := s.Resync()
		if err != nil {
			t.Fatalf("Resync: %v", err)
		}
		if from != pos || to <= from || to > int64(len(data)) {
			t.Fatalf("Resync skipped [%d,%d), want a non-empty range from %d within %d bytes", from, to, pos, len(data))
		}
		got.damaged = append(got.damaged, [2]int64{from, to})
		pos = to
	}
	if pos != int64(len(data)) {
		t.Fatalf("scan ended at %d of %d bytes", pos, len(data))
	}
	return got
}

// checkAllocs fails if more was allocated since before than the bookkeeping
// for n bytes of input can need. A buffer sized from a length field would
// blow through this for any length beyond the data.
func checkAllocs(t *testing.T, before uint64, n int) {
	t.Helper()
	if used, limit := heapAllocated()-before, uint64(64*n+1<<20); used > limit {
		t.Fatalf("allocated %d bytes for %d bytes of input, want at most %d", used, n, limit)
	}
}

func FuzzSplit(f *testing.F) {
	seeds := seedFiles(f)
	for _, name := range slices.Sorted(maps.Keys(seeds)) {
		f.Add(seeds[name])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const base = 1 << 40
		before := heapAllocated()
		starts, err := Split(data, base, nil)
		checkAllocs(t, before, len(data))

		var pos int64
		for _, s := range starts {
			if s != pos {
				t.Fatalf("frame at %d, want frames back to back from 0: next at %d", s, pos)
			}
			if int64(len(data))-s < FrameExtra {
				t.Fatalf("frame at %d: only %d bytes left", s, int64(len(data))-s)
			}
			n := int64(len(Payload(data[s:]))) + FrameExtra
			if n > int64(len(data))-s {
				t.Fatalf("frame at %d of length %d runs past %d bytes", s, n, len(data))
			}
			if got, err := Split(data[s:s+n], base+s, nil); err != nil || !slices.Equal(got, []int64{0}) {
				t.Fatalf("frame at %d does not split on its own: %v, %v", s, got, err)
			}
			if !bytes.Equal(AppendFrame(nil, Payload(data[s:s+n])), data[s:s+n]) {
				t.Fatalf("frame at %d is not what AppendFrame makes of its payload", s)
			}
			pos = s + n
		}
		var ce *CorruptError
		switch {
		case err == nil && pos != int64(len(data)):
			t.Fatalf("Split stopped at %d of %d bytes without an error", pos, len(data))
		case err != nil && (!errors.As(err, &ce) || ce.Offset != base+pos || pos >= int64(len(data))):
			t.Fatalf("Split error %v, want a *CorruptError at %d (after the last frame)", err, base+pos)
		}

		// Split appends to starts and takes base only for error offsets.
		prefix := []int64{-1}
		starts0, err0 := Split(data, 0, prefix)
		if !slices.Equal(starts0, append(prefix, starts...)) {
			t.Fatalf("Split with base 0 and a prefix = %v, want %v", starts0, append(prefix, starts...))
		}
		var ce0 *CorruptError
		if (err == nil) != (err0 == nil) || err != nil && (!errors.As(err0, &ce0) || ce0.Offset != ce.Offset-base || ce0.Reason != ce.Reason) {
			t.Fatalf("Split with base 0: %v, with base %d: %v", err0, base, err)
		}

		// Fed in pieces, as the loader feeds it while a block is read,
		// SplitFilled finds the same frames and fails at the same place.
		for _, chunk := range []int{1, 7, 1 + len(data)/3, 4096} {
			var got []int64
			var done int64
			var err1 error
			for filled := 0; err1 == nil; filled = min(filled+chunk, len(data)) {
				got, done, err1 = SplitFilled(data, int64(filled), done, base, got)
				if filled == len(data) {
					break
				}
			}
			if !slices.Equal(got, starts) || (err1 == nil) != (err == nil) || err != nil && err1.Error() != err.Error() {
				t.Fatalf("SplitFilled in pieces of %d: %v, %v; Split: %v, %v", chunk, got, err1, starts, err)
			}
		}
	})
}
