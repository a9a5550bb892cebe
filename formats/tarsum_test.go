package formats

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The word-at-a-time sum must equal the byte-by-byte sum at every length
// and every byte value, and a header checksum stored either way (unsigned,
// or signed as old tar programs wrote it) must still be accepted while any
// other is refused.
func TestTarHeaderChecksumsAreSummedAsByteByByte(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 1100 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		if n%7 == 0 {
			for i := range b {
				b[i] = 0xff // the largest sums
			}
		}
		var want int64
		for _, c := range b {
			want += int64(c)
		}
		if got := unsignedSum(b); got != want {
			t.Fatalf("sum of %d bytes: %d, byte by byte %d", n, got, want)
		}
	}
	for range 200 {
		h := make([]byte, tarBlock)
		for i := range h {
			h[i] = byte(r.UintN(256))
		}
		var u, s int64
		for i, c := range h {
			if i >= 148 && i < 156 {
				c = ' '
			}
			u += int64(c)
			s += int64(int8(c))
		}
		for _, c := range []struct {
			sum int64
			ok  bool
		}{{u, true}, {s, true}, {u + 1, false}} {
			copy(h[148:156], fmt.Sprintf("%07o\x00", c.sum))
			if err := tarChecksum(h); (err == nil) != c.ok {
				t.Fatalf("checksum %d (unsigned %d, signed %d): %v", c.sum, u, s, err)
			}
		}
	}
}
