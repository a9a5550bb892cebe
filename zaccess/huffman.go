package zaccess

import "errors"

// A Huffman table maps the next bits of the stream to a decoded entry in
// one lookup for codes up to its root bits, two for longer ones (as zlib's
// inflate does): a root entry for a long code links to a sub-table indexed
// by the bits after the root ones.
//
// An entry packs, from the low byte up: the bits to drop, an op, and a
// 16-bit value.
//
//	op opLiteral: value is the byte
//	op opBase+e:  value is a length or distance base, e extra bits follow
//	op opLink:    value is the sub-table's offset, the bits-to-drop byte its
//	              index width (after the root bits are dropped)
//	op opEnd:     end of block
//	op opBad:     no code has these bits, or an invalid symbol (286, 287, 30, 31)
const (
	opLiteral = 0
	opBase    = 16
	opLink    = 64
	opEnd     = 96
	opBad     = 128
)

const (
	litRoot  = 10 // root bits of literal/length tables
	distRoot = 8
	clenRoot = 7 // code-length codes are at most 7 bits: one level
	maxBits  = 15
)

type table struct {
	e    []uint32
	root uint
	mask uint64
}

func entry(drop uint, op uint32, val uint32) uint32 { return val<<16 | op<<8 | uint32(drop) }

var errBadCode = errors.New("invalid Huffman code lengths")

// symbols says what the symbols of a table decode to.
type symbols func(sym int) (op, val uint32)

// build fills t for the code lengths lens (0: symbol unused), with root
// bits at the first level. A code is valid when it is complete, or a
// single code of one bit; an empty code is allowed too and decodes nothing
// (a block without distances), as the standard library allows.
func (t *table) build(lens []uint8, root uint, sym symbols) error {
	var count [maxBits + 1]int
	maxLen := uint(0)
	for _, l := range lens {
		count[l]++
		if uint(l) > maxLen {
			maxLen = uint(l)
		}
	}
	count[0] = 0
	// Kraft: left is the number of codes of the current length still free.
	left := 1
	for l := 1; l <= maxBits; l++ {
		left <<= 1
		left -= count[l]
		if left < 0 {
			return errBadCode
		}
	}
	n := 0
	for _, c := range count {
		n += c
	}
	if left > 0 && !(n == 0 || (n == 1 && count[1] == 1)) {
		return errBadCode
	}
	t.root = root
	t.mask = 1<<root - 1
	size := 1 << root
	// Sub-tables: every long code shares its root prefix with others of
	// its prefix; each prefix gets a table as wide as its longest code.
	var next [maxBits + 2]uint32
	code := uint32(0)
	for l := 1; l <= maxBits; l++ {
		code = (code + uint32(count[l-1])) << 1
		next[l] = code
	}
	// First pass: widths of sub-tables.
	// Width of the sub-table of every root prefix (0: none).
	var subBits [1 << litRoot]uint8
	var subAt [1 << litRoot]uint32
	if maxLen > root {
		nc := next
		for _, l := range lens {
			if uint(l) <= root {
				if l > 0 {
					nc[l]++
				}
				continue
			}
			rev := reverse(nc[l], uint(l))
			nc[l]++
			p := rev & uint32(t.mask)
			if w := uint8(uint(l) - root); w > subBits[p] {
				subBits[p] = w
			}
		}
	}
	for p := range 1 << root {
		if w := subBits[p]; w > 0 {
			size += 1 << w
		}
	}
	if cap(t.e) >= size {
		t.e = t.e[:size]
	} else {
		t.e = make([]uint32, size)
	}
	bad := entry(0, opBad, 0)
	for i := range t.e {
		t.e[i] = bad
	}
	at := uint32(1 << root)
	for p := uint32(0); p < 1<<root && maxLen > root; p++ {
		if w := subBits[p]; w > 0 {
			subAt[p] = at
			t.e[p] = entry(uint(w), opLink, at)
			at += 1 << w
		}
	}
	for s, l := range lens {
		if l == 0 {
			continue
		}
		op, val := sym(s)
		rev := reverse(next[l], uint(l))
		next[l]++
		if uint(l) <= root {
			e := entry(uint(l), op, val)
			for i := rev; i < 1<<root; i += 1 << l {
				t.e[i] = e
			}
			continue
		}
		p := rev & uint32(t.mask)
		w := uint(subBits[p])
		base := subAt[p]
		e := entry(uint(l)-root, op, val)
		for i := rev >> root; i < 1<<w; i += 1 << (uint(l) - root) {
			t.e[base+i] = e
		}
	}
	return nil
}

func reverse(code uint32, n uint) uint32 {
	var r uint32
	for range n {
		r = r<<1 | code&1
		code >>= 1
	}
	return r
}

var lenBase = [29]uint32{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
var lenExtra = [29]uint32{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
var distBase = [30]uint32{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
var distExtra = [30]uint32{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}

func litSym(s int) (uint32, uint32) {
	switch {
	case s < 256:
		return opLiteral, uint32(s)
	case s == 256:
		return opEnd, 0
	case s < 286:
		return opBase + lenExtra[s-257], lenBase[s-257]
	}
	return opBad, 0
}

func distSym(s int) (uint32, uint32) {
	if s < 30 {
		return opBase + distExtra[s], distBase[s]
	}
	return opBad, 0
}

func clenSym(s int) (uint32, uint32) { return opLiteral, uint32(s) }

// fixedTables are the tables of RFC 1951's fixed Huffman codes.
func fixedTables() (lit, dist table) {
	var l [288]uint8
	for i := range l {
		switch {
		case i < 144:
			l[i] = 8
		case i < 256:
			l[i] = 9
		case i < 280:
			l[i] = 7
		default:
			l[i] = 8
		}
	}
	if err := lit.build(l[:], litRoot, litSym); err != nil {
		panic(err)
	}
	var d [30]uint8
	for i := range d {
		d[i] = 5
	}
	// 30 codes of 5 bits are an incomplete code: 30 and 31 are invalid
	// symbols, built as such.
	var d32 [32]uint8
	copy(d32[:], d[:])
	d32[30], d32[31] = 5, 5
	if err := dist.build(d32[:], distRoot, distSym); err != nil {
		panic(err)
	}
	return lit, dist
}
