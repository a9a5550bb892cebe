package formats

import (
	"bytes"
	"testing"
)

// The chain walked from the start of the records meets exactly the
// scanner's record starts, and from any of them the next one at or after
// every offset: the proof the probe index relies on (blockcache's prover)
// is the scanner's own parse.
func TestChainFromATrueBoundaryMeetsExactlyTheScannersBoundaries(t *testing.T) {
	for _, c := range seamCases(t) {
		ch, ok := c.f.(Chainer)
		if !ok {
			continue
		}
		for fi, data := range c.files {
			s, err := scanFile(c.f, data)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.recs) == 0 {
				continue
			}
			r := bytes.NewReader(data)
			bounds := []int64{}
			for _, rec := range s.recs {
				bounds = append(bounds, rec.Offset)
			}
			last := s.recs[len(s.recs)-1]
			bounds = append(bounds, last.Offset+last.Len)
			from := s.head.Start
			for _, b := range bounds {
				for _, off := range []int64{b, max(from, b-1)} {
					got, err := ch.ChainFrom(r, s.head, from, off)
					want := b
					if off < b && off == from {
						want = from
					}
					if err != nil || got != want {
						t.Fatalf("%s file %d: ChainFrom(%d, %d) = %d, %v; want %d", c.f.Name(), fi, from, off, got, err, want)
					}
				}
				from = b
			}
		}
	}
}
