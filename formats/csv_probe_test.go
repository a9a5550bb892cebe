package formats

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// checkCSVProbe probes data, a CSV file the full scan s accepted, at every
// offset with a few look-backs and read limits, and fails if a probe
// returns anything but the first row start at or after its offset (an
// ErrProbeAmbiguous is allowed); every step-th offset. It returns how many probes answered and
// how many there were.
func checkCSVProbe(t *testing.T, data []byte, s fileRecords, step int64) (answered, probes int) {
	t.Helper()
	h := s.head
	r := bytes.NewReader(data)
	for off := h.Start; off <= h.End; off += step {
		want := h.End
		for _, rec := range s.recs {
			if rec.Offset >= off {
				want = rec.Offset
				break
			}
		}
		if got, err := (CSV{}).Probe(r, h, off); err != nil && !errors.Is(err, ErrProbeAmbiguous) || err == nil && got != want {
			t.Fatalf("Probe of %q at %d: %d, %v; the first row start at or after it is %d", data, off, got, err, want)
		}
		// Reading back past the file's first byte, or on past its end, is
		// the same probe as reading back to the first byte or to the end:
		// each window is probed once (in a small file most of the 20 pairs
		// are the same window, and the fuzz target spends its time here).
		var windows [20][2]int64
		tried := 0
		for _, back := range []int64{0, 1, 5, 40, 1 << 20} {
			for _, limit := range []int64{1, 9, 64, 1 << 20} {
				w := [2]int64{min(back, off-h.Start), min(limit, h.End-h.Start)}
				if slices.Contains(windows[:tried], w) {
					continue
				}
				windows[tried] = w
				tried++
				got, err := probeCSV(r, h, off, back, limit)
				probes++
				switch {
				case errors.Is(err, ErrProbeAmbiguous):
					if back >= off-h.Start && limit >= h.End-h.Start {
						t.Fatalf("probe of %q at %d (back %d, limit %d): %v, though it could read from the first row", data, off, back, limit, err)
					}
				case err != nil:
					t.Fatalf("probe of %q at %d: %v", data, off, err)
				case got != want:
					t.Fatalf("probe of %q at %d (back %d, limit %d) cut at %d; the first row start at or after it is %d", data, off, back, limit, got, want)
				default:
					answered++
				}
			}
		}
	}
	return answered, probes
}

// randomCSV returns a CSV file of random rows: plain and quoted fields,
// quoted fields holding newlines, "\r\n", commas and "" escapes, empty
// quoted fields, LF and CRLF row ends, with or without a last line end.
func randomCSV(r *rand.Rand) []byte {
	var b []byte
	fields := 1 + r.IntN(3)
	for range 1 + r.IntN(12) {
		for f := range fields {
			if f > 0 {
				b = append(b, ',')
			}
			switch r.IntN(6) {
			case 0:
				b = append(b, "x"[:r.IntN(2)]...)
			case 1:
				b = append(b, strings.Repeat("ab", 1+r.IntN(3))...)
			default:
				b = append(b, '"')
				for range r.IntN(6) {
					b = append(b, []string{"a", "\n", "\r\n", ",", `""`, " ", ",\n", `"",`}[r.IntN(8)]...)
				}
				b = append(b, '"')
			}
		}
		if r.IntN(3) == 0 {
			b = append(b, '\r')
		}
		b = append(b, '\n')
	}
	if r.IntN(4) == 0 && len(b) > 0 {
		b = b[:len(b)-1]
	}
	return b
}

// A CSV probe never cuts where the full scan finds no row start: on
// random files with quoted newlines, "" escapes, commas and CRLF, at every
// offset and with look-backs and read limits small enough that the
// probe's hypotheses about the quoting matter, it returns the first row
// start at or after the offset or gives up (ErrProbeAmbiguous); with the
// file's first row in reach it always answers. And it is not vacuous:
// most probes answer.
func TestCSVProbeReturnsOnlyTrueRowStarts(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	answered, probes, files := 0, 0, 0
	for range 150 {
		data := randomCSV(r)
		for _, header := range []bool{false, true} {
			s, err := scanFile(CSV{Header: header}, data)
			if err != nil {
				continue
			}
			files++
			a, p := checkCSVProbe(t, data, s, 1)
			answered, probes = answered+a, probes+p
		}
	}
	t.Logf("%d files, %d of %d probes answered", files, answered, probes)
	if files < 100 || answered < probes/2 {
		t.Fatalf("%d valid files, %d of %d probes answered: the test says little", files, answered, probes)
	}
}

// Where the window holds no quote, the probe cannot know whether it is
// inside one long quoted field, and says so; one quoted field in the
// window settles it.
func TestCSVProbeWithoutQuotesInItsWindowIsAmbiguous(t *testing.T) {
	plain := strings.Repeat("1,plain row\n", 200)
	for _, tc := range []struct {
		name      string
		data      string
		ambiguous bool
	}{
		{"plain rows", "id,text\n" + plain, true},
		{"one long quoted field", "id,text\n1,\"" + plain + "\"\n", true},
		{"plain rows and a quoted field", "id,text\n" + plain[:1200] + "7,\"q\"\n" + plain, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.data)
			s, err := scanFile(CSV{Header: true}, data)
			if err != nil {
				t.Fatal(err)
			}
			_, err = probeCSV(bytes.NewReader(data), s.head, 1000, 100, 1000)
			if got := errors.Is(err, ErrProbeAmbiguous); got != tc.ambiguous {
				t.Fatalf("probe at 1000: %v; want ambiguous %v", err, tc.ambiguous)
			}
			checkCSVProbe(t, data, s, 13)
		})
	}
}

// BenchmarkCSVProbe measures one probe in the middle of 8 MiB of rows
// that all have quoted fields with newlines, of rows without a quote (the
// probe reads its 1 MiB and gives up), and of plain rows with a quoted
// one every 2000 rows.
func BenchmarkCSVProbe(b *testing.B) {
	for _, kind := range []string{"quoted", "plain", "sparse"} {
		d := []byte("id,text,tag\n")
		for i := 0; len(d) < 8<<20; i++ {
			switch {
			case kind == "quoted":
				d = fmt.Appendf(d, "%d,\"row %d\nsecond, \"\"q\"\"\n%s\",t\n", i, i, strings.Repeat("x", i%97))
			case kind == "sparse" && i%2000 == 0:
				d = fmt.Appendf(d, "%d,\"q\",t\n", i)
			default:
				d = fmt.Appendf(d, "%d,plain row %d %s,t\n", i, i, strings.Repeat("x", i%97))
			}
		}
		s, err := scanFile(CSV{Header: true}, d)
		if err != nil {
			b.Fatal(err)
		}
		r := bytes.NewReader(d)
		b.Run(kind, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				CSV{}.Probe(r, s.head, int64(4<<20+i%1000))
			}
		})
	}
}
