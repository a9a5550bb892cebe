package formats

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// benchmarkResync times one Resync over damage made of garbage followed by
// one intact frame, so that the whole garbage is walked.
func benchmarkResync(b *testing.B, garbage []byte) {
	data := AppendFrame(bytes.Clone(garbage), []byte("the frame after the damage"))
	b.SetBytes(int64(len(garbage)))
	for b.Loop() {
		s := NewScanner(bytes.NewReader(data), 0, int64(len(data)))
		if s.Next() {
			b.Fatal("the garbage scanned as a frame")
		}
		from, to, err := s.Resync()
		if err != nil || from != 0 || to != int64(len(garbage)) {
			b.Fatalf("Resync = [%d,%d), %v; want [0,%d)", from, to, err, len(garbage))
		}
	}
}

func BenchmarkResyncOverZeros(b *testing.B) { benchmarkResync(b, make([]byte, 64<<20)) }

func BenchmarkResyncOverRandomBytes(b *testing.B) {
	garbage := make([]byte, 64<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range garbage {
		garbage[i] = byte(r.Uint32())
	}
	benchmarkResync(b, garbage)
}

// windows are the scanner window sizes the resync tests run with: the
// smallest possible, one that cuts frames at odd places, and the default.
var windows = []int{HeaderLen, 29, 64, DefaultWindow}

func TestResyncNeverServesAFrameEmbeddedInADamagedRecord(t *testing.T) {
	embedded := AppendFrame(nil, []byte("a record that never existed on its own"))
	payloads := map[string][]byte{
		"at the start of the payload": append(bytes.Clone(embedded), "and more payload after it"...),
		"in the middle":               append(append([]byte("payload before "), embedded...), " and after"...),
		"at the end of the payload":   append([]byte("payload before it "), embedded...),
		"as the whole payload":        embedded,
		"twice, with bytes between":   append(append(append(bytes.Clone(embedded), "gap"...), embedded...), "tail"...),
	}
	for name, payload := range payloads {
		for _, last := range []bool{false, true} {
			recs := [][]byte{[]byte("first"), payload, []byte("third"), []byte("fourth")}
			if last {
				recs = recs[:2]
			}
			data, offs := file(t, recs...)
			end := int64(len(data))
			wantRecords := []Record{{offs[0], 21}}
			wantDamage := [][2]int64{{offs[1], end}}
			if !last {
				wantRecords = append(wantRecords, Record{offs[2], 21}, Record{offs[3], 22})
				wantDamage[0][1] = offs[2]
			}
			// Damage the length, or its CRC: either way the record's
			// extent is lost and the scanner walks through its payload.
			for _, at := range []int64{offs[1], offs[1] + 2, offs[1] + 9} {
				data := bytes.Clone(data)
				data[at] ^= 0x21
				for _, w := range windows {
					got := scan(newScanner(bytes.NewReader(data), 0, end, w))
					if got.err != nil {
						t.Fatalf("%s, last=%v, byte %d, window %d: %v", name, last, at, w, got.err)
					}
					if !slices.Equal(got.records, wantRecords) || !slices.Equal(got.damaged, wantDamage) {
						t.Errorf("%s, last=%v, byte %d damaged, window %d: records %v, damaged %v; want %v, %v",
							name, last, at, w, got.records, got.damaged, wantRecords, wantDamage)
					}
				}
			}
		}
	}
}

func TestResyncOverZeroRunsFindsTheFramesAfterThem(t *testing.T) {
	// Empty records start with 8 zero length bytes, so they are the frames
	// a run of zeros could hide or fake.
	tail := AppendFrame(AppendFrame(AppendFrame(nil, nil), []byte("b")), nil)
	for _, k := range []int{1, 2, 7, 8, 11, 12, 13, 16, 19, 20, 21, 28, 29, 63, 64, 65, 4096 + 3, 1 << 16} {
		for _, shape := range []string{"zeros", "zeros with a stray byte", "zeros to the end"} {
			a := AppendFrame(nil, []byte("a"))
			zeros := make([]byte, k)
			if shape == "zeros with a stray byte" {
				zeros[k/2] = 0x5a
			}
			data := append(bytes.Clone(a), zeros...)
			start := int64(len(a))
			after := int64(len(data))
			wantRecords := []Record{{0, 17}}
			if shape != "zeros to the end" {
				data = append(data, tail...)
				wantRecords = append(wantRecords, Record{after, 16}, Record{after + 16, 17}, Record{after + 33, 16})
			}
			wantDamage := [][2]int64{{start, after}}
			for _, w := range windows {
				got := scan(newScanner(bytes.NewReader(data), 0, int64(len(data)), w))
				if got.err != nil {
					t.Fatalf("%d %s, window %d: %v", k, shape, w, got.err)
				}
				if !slices.Equal(got.records, wantRecords) || !slices.Equal(got.damaged, wantDamage) {
					t.Errorf("%d %s, window %d: records %v, damaged %v; want %v, %v", k, shape, w, got.records, got.damaged, wantRecords, wantDamage)
				}
			}
		}
	}
}

func TestResyncAfterDamageToTheLengthCRCOnlySkipsExactlyThatFrame(t *testing.T) {
	// The payload is a whole TFRecord file of three records: walking it
	// would find frames that confirm each other. With only the length's
	// CRC hit, the length as written is checked against the data CRC and
	// the frame is skipped whole.
	nested, _ := file(t, []byte("nested one"), []byte("nested two"), []byte("nested three"))
	data, offs := file(t, []byte("first"), nested, []byte("third"))
	for at := offs[1] + 8; at < offs[1]+HeaderLen; at++ {
		data := bytes.Clone(data)
		data[at] ^= 0x80
		for _, w := range windows {
			got := scan(newScanner(bytes.NewReader(data), 0, int64(len(data)), w))
			wantRecords := []Record{{offs[0], 21}, {offs[2], 21}}
			wantDamage := [][2]int64{{offs[1], offs[2]}}
			if got.err != nil || !slices.Equal(got.records, wantRecords) || !slices.Equal(got.damaged, wantDamage) {
				t.Errorf("byte %d damaged, window %d: records %v, damaged %v, err %v; want %v, %v",
					at, w, got.records, got.damaged, got.err, wantRecords, wantDamage)
			}
		}
	}
}
