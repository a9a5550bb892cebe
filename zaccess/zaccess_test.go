package zaccess

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// sample returns n bytes that compress somewhat, like records: runs of
// text with repeats near and far, and random bytes.
func sample(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	words := []string{"corgi", "pile", "shuffle", "block", "record", "epoch", "{\"label\": ", "0.125,", "\n"}
	var b bytes.Buffer
	for b.Len() < n {
		switch r.IntN(10) {
		case 0:
			for range r.IntN(300) {
				b.WriteByte(byte(r.Uint32()))
			}
		case 1:
			if b.Len() > 1000 {
				at := r.IntN(b.Len() - 500)
				b.Write(bytes.Clone(b.Bytes()[at : at+r.IntN(500)]))
			}
		default:
			b.WriteString(words[r.IntN(len(words))])
		}
	}
	return b.Bytes()[:n]
}

func gz(t testing.TB, data []byte, level int, members int) []byte {
	var out bytes.Buffer
	step := (len(data) + members - 1) / max(members, 1)
	for i := 0; i < len(data) || i == 0; i += max(step, 1) {
		w, err := gzip.NewWriterLevel(&out, level)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data[i:min(len(data), i+step)])
		w.Close()
		if step == 0 {
			break
		}
	}
	return out.Bytes()
}

func zl(t testing.TB, data []byte, level int) []byte {
	var out bytes.Buffer
	w, _ := zlib.NewWriterLevel(&out, level)
	w.Write(data)
	w.Close()
	return out.Bytes()
}

func zst(t testing.TB, data []byte, frame int) []byte {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var out []byte
	for i := 0; i < len(data); i += frame {
		out = enc.EncodeAll(data[i:min(len(data), i+frame)], out)
	}
	return out
}

// checkAll builds the index of comp and checks that reading from every
// access point, and from offsets around them, gives data.
func checkAll(t *testing.T, comp []byte, kind Kind, span int64, data []byte) *Index {
	t.Helper()
	ix, err := Build(bytes.NewReader(comp), int64(len(comp)), kind, span, nil)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if ix.Size != int64(len(data)) {
		t.Fatalf("size %d, want %d", ix.Size, len(data))
	}
	var dc Decoder
	defer dc.Close()
	offs := []int64{0, int64(len(data)) / 3, int64(len(data)) - 1}
	for _, p := range ix.Points {
		offs = append(offs, p.Out, max(0, p.Out-1), p.Out+span/2)
	}
	for _, off := range offs {
		if off < 0 || off >= int64(len(data)) {
			continue
		}
		n := min(int64(len(data))-off, span+1000)
		got := make([]byte, n)
		if err := dc.ReadAt(ix, bytes.NewReader(comp), int64(len(comp)), got, off, nil); err != nil {
			t.Fatalf("read %d bytes at %d: %v", n, off, err)
		}
		if !bytes.Equal(got, data[off:off+n]) {
			t.Fatalf("read %d bytes at %d: differ from the data", n, off)
		}
	}
	return ix
}

func TestAccessPointsReproduceTheStream(t *testing.T) {
	data := sample(400<<10, 1)
	for _, tc := range []struct {
		name string
		comp []byte
		kind Kind
		min  int // points at least
	}{
		{"gzip-1", gz(t, data, 1, 1), Gzip, 5},
		{"gzip-9", gz(t, data, 9, 1), Gzip, 5},
		{"gzip-stored", gz(t, data, 0, 1), Gzip, 5},
		{"gzip-huffman-only", gz(t, data, gzip.HuffmanOnly, 1), Gzip, 5},
		{"gzip-members", gz(t, data, 6, 37), Gzip, 5},
		{"zlib", zl(t, data, 6), Zlib, 5},
		{"zstd-frames", zst(t, data, 20<<10), Zstd, 5},
		{"zstd-one-frame", zst(t, data, len(data)), Zstd, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := checkAll(t, tc.comp, tc.kind, 32<<10, data)
			if len(ix.Points) < tc.min {
				t.Fatalf("%d access points, want at least %d", len(ix.Points), tc.min)
			}
			var win int
			for _, p := range ix.Points {
				win += len(p.Window)
			}
			t.Logf("%d points, windows %d bytes, compressed %d", len(ix.Points), win, len(tc.comp))
		})
	}
}

func TestInflaterMatchesStandardLibrary(t *testing.T) {
	for i, data := range [][]byte{nil, {0}, []byte("a"), bytes.Repeat([]byte("ab"), 100000), sample(256<<10, 2)} {
		for _, level := range []int{-2, 0, 1, 5, 9} {
			comp := gz(t, data, level, 1)
			d := newInflater(bytes.NewReader(comp), Gzip)
			got, err := io.ReadAll(d)
			if err != nil {
				t.Fatalf("input %d level %d: %v", i, level, err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("input %d level %d: output differs", i, level)
			}
		}
	}
}

func TestTruncatedAndTrailingGarbageAreErrors(t *testing.T) {
	data := sample(200<<10, 3)
	comp := gz(t, data, 6, 1)
	for _, cut := range []int{1, 5, 9, len(comp) / 2, len(comp) - 4} {
		_, err := Build(bytes.NewReader(comp[:len(comp)-cut]), int64(len(comp)-cut), Gzip, 64<<10, nil)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut %d bytes: err %v, want unexpected EOF", cut, err)
		}
	}
	bad := append(bytes.Clone(comp), "garbage"...)
	_, err := Build(bytes.NewReader(bad), int64(len(bad)), Gzip, 64<<10, nil)
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Offset != int64(len(comp)) {
		t.Fatalf("trailing garbage: err %v, want a FormatError at %d", err, len(comp))
	}
	z := zl(t, data, 6)
	z[len(z)-1] ^= 1
	if _, err := Build(bytes.NewReader(z), int64(len(z)), Zlib, 64<<10, nil); !errors.As(err, &fe) {
		t.Fatalf("bad Adler-32: err %v", err)
	}
	zs := zst(t, data, 50<<10)
	if _, err := Build(bytes.NewReader(zs[:len(zs)-3]), int64(len(zs)-3), Zstd, 64<<10, nil); err == nil {
		t.Fatal("truncated zstd: no error")
	}
}

func TestCorruptByteIsAnError(t *testing.T) {
	data := sample(300<<10, 4)
	comp := gz(t, data, 6, 1)
	for i := 20; i < len(comp)-8; i += len(comp) / 17 {
		c := bytes.Clone(comp)
		c[i] ^= 0x55
		if _, err := Build(bytes.NewReader(c), int64(len(c)), Gzip, 64<<10, nil); err == nil {
			t.Errorf("byte %d flipped: no error", i)
		}
	}
}

// FuzzAccessPoint decodes a raw DEFLATE stream, records an access point
// at every block, and checks that from every one of them the output equals
// the standard library's from the start; on input the standard library
// refuses, the inflater must not panic.
func FuzzAccessPoint(f *testing.F) {
	for i, d := range [][]byte{sample(6<<10, 5), bytes.Repeat([]byte("xyz"), 700), {}} {
		for _, level := range []int{0, 1, 9, -2} {
			var b bytes.Buffer
			w, _ := flate.NewWriter(&b, level)
			w.Write(d)
			w.Close()
			f.Add(b.Bytes(), uint16(i*500))
		}
	}
	// Seeds are small: the fuzzer minimizes every new input it finds, at
	// a cost that grows with the input.
	f.Fuzz(func(t *testing.T, raw []byte, span uint16) {
		// Small outputs only: a few bytes of input can ask for gigabytes.
		want, werr := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(raw)), 4<<20+1))
		if len(want) > 4<<20 {
			return
		}
		// The raw stream as a zlib stream without its trailer check:
		// the inflater is driven directly.
		d := newInflater(bytes.NewReader(raw), Zlib)
		d.st = stBlock
		d.checked = false
		type pt struct {
			bit, out int64
			win      []byte
		}
		var pts []pt
		d.onBlock = func(bit, out int64, _ bool) {
			if n := len(pts); n > 0 && out-pts[n-1].out < int64(span) {
				return
			}
			pts = append(pts, pt{bit, out, bytes.Clone(d.window())})
		}
		var got []byte
		var gerr error
		for {
			b, err := d.next(1 << 20)
			got = append(got, b...)
			if err != nil {
				if err != io.EOF {
					gerr = err
				}
				break
			}
			if len(got) > 4<<20 {
				return
			}
		}
		if werr != nil {
			return // whatever the inflater did, it did not panic
		}
		if gerr != nil {
			// The standard library stops at the final block and ignores
			// what follows; the inflater reads a trailer after it.
			if !bytes.Equal(got, want) && !errors.Is(gerr, io.ErrUnexpectedEOF) {
				var fe *FormatError
				if !errors.As(gerr, &fe) {
					t.Fatalf("inflater failed where the standard library did not: %v", gerr)
				}
			}
			return
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("output of %d bytes differs from the standard library's %d", len(got), len(want))
		}
		for _, p := range pts {
			if p.out > int64(len(want)) {
				t.Fatalf("access point at %d past the end %d", p.out, len(want))
			}
			d2 := newInflater(nil, Zlib)
			if err := d2.reset(bytes.NewReader(raw[p.bit/8:]), p.bit/8, uint(p.bit%8), p.out, p.win, false); err != nil {
				t.Fatalf("reset at bit %d: %v", p.bit, err)
			}
			rest, err := readDeflate(d2)
			if err != nil {
				t.Fatalf("from the access point at bit %d (output %d): %v", p.bit, p.out, err)
			}
			if !bytes.Equal(rest, want[p.out:]) {
				t.Fatalf("from the access point at bit %d (output %d): %d bytes differ from the standard library's", p.bit, p.out, len(rest))
			}
		}
	})
}

// readDeflate reads d to the end of its DEFLATE stream, ignoring what the
// container would hold after it.
func readDeflate(d *inflater) ([]byte, error) {
	var out []byte
	for {
		b, err := d.next(1 << 20)
		out = append(out, b...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			if d.st == stTrailer || d.st == stDone || (d.final && d.st == stBlock) {
				return out, nil
			}
			return out, fmt.Errorf("%w (state %d)", err, d.st)
		}
	}
}

func TestReaderAtReadsAnyOffset(t *testing.T) {
	data := sample(512<<10, 7)
	comp := gz(t, data, 6, 1)
	ix, err := Build(bytes.NewReader(comp), int64(len(comp)), Gzip, 50<<10, nil)
	if err != nil {
		t.Fatal(err)
	}
	ra := NewReaderAt(ix, bytes.NewReader(comp), int64(len(comp)))
	defer ra.Close()
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 100 {
		off := r.Int64N(int64(len(data)))
		if i%3 == 0 && i > 0 {
			off = min(int64(len(data))-1, off/50+int64(i)*1500) // forward runs
		}
		p := make([]byte, r.IntN(80<<10))
		n, err := ra.ReadAt(p, off)
		want := data[off:min(int64(len(data)), off+int64(len(p)))]
		if n != len(want) || (n < len(p) && err != io.EOF) || (n == len(p) && err != nil) {
			t.Fatalf("read %d at %d: %d, %v", len(p), off, n, err)
		}
		if !bytes.Equal(p[:n], want) {
			t.Fatalf("read %d at %d: bytes differ", len(p), off)
		}
	}
}

// One Decoder reads files of every kind in turn.
func TestDecoderServesEveryKindInTurn(t *testing.T) {
	data := sample(100<<10, 8)
	var dc Decoder
	defer dc.Close()
	for range 2 {
		for _, c := range []struct {
			comp []byte
			kind Kind
		}{{gz(t, data, 6, 1), Gzip}, {zl(t, data, 6), Zlib}, {zst(t, data, 30<<10), Zstd}, {gz(t, data, 1, 3), Gzip}} {
			ix, err := Build(bytes.NewReader(c.comp), int64(len(c.comp)), c.kind, 20<<10, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 50<<10)
			if err := dc.ReadAt(ix, bytes.NewReader(c.comp), int64(len(c.comp)), got, 40<<10, nil); err != nil {
				t.Fatalf("%s: %v", c.kind, err)
			}
			if !bytes.Equal(got, data[40<<10:90<<10]) {
				t.Fatalf("%s: bytes differ", c.kind)
			}
		}
	}
}

// An Indexer serves reads mostly forward, some far back and far ahead,
// from one decompression, and its index then serves every offset.
func TestIndexerServesReadsWhileItIndexes(t *testing.T) {
	data := sample(600<<10, 11)
	comp := gz(t, data, 6, 3)
	x := NewIndexer(bytes.NewReader(comp), int64(len(comp)), Gzip, 40<<10, nil)
	r := rand.New(rand.NewPCG(5, 6))
	var off int64
	for i := range 200 {
		switch {
		case i%50 == 49:
			off = r.Int64N(off + 1) // far back
		case i%70 == 69:
			off = min(int64(len(data))-1, off+200<<10) // far ahead
		default:
			off = min(int64(len(data))-1, off+r.Int64N(8<<10))
		}
		p := make([]byte, r.IntN(20<<10))
		n, err := x.ReadAt(p, off)
		want := data[off:min(int64(len(data)), off+int64(len(p)))]
		if n != len(want) || (n < len(p) && err != io.EOF) || (n == len(p) && err != nil) {
			t.Fatalf("read %d at %d: %d, %v", len(p), off, n, err)
		}
		if !bytes.Equal(p[:n], want) {
			t.Fatalf("read %d at %d: bytes differ", len(p), off)
		}
	}
	ix, err := x.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if ix.Size != int64(len(data)) || len(ix.Points) < 10 {
		t.Fatalf("size %d, %d points", ix.Size, len(ix.Points))
	}
	var dc Decoder
	for _, p := range ix.Points {
		got := make([]byte, min(int64(len(data))-p.Out, 5000))
		if err := dc.ReadAt(ix, bytes.NewReader(comp), int64(len(comp)), got, p.Out, nil); err != nil || !bytes.Equal(got, data[p.Out:p.Out+int64(len(got))]) {
			t.Fatalf("from the point at %d: %v", p.Out, err)
		}
	}
}

// Reads of one file at increasing offsets decode on from the last one
// (through a new reader of the same bytes each time), interleaved with
// reads of another file and going back, and give the stream's bytes.
func TestDecoderDecodesOnForLaterReadsOfTheSameFile(t *testing.T) {
	a, b, c := sample(300<<10, 12), sample(200<<10, 13), sample(150<<10, 14)
	ca, cb, cc := gz(t, a, 6, 1), zl(t, b, 6), zst(t, c, 40<<10)
	ia, err := Build(bytes.NewReader(ca), int64(len(ca)), Gzip, 64<<10, nil)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := Build(bytes.NewReader(cb), int64(len(cb)), Zlib, 64<<10, nil)
	if err != nil {
		t.Fatal(err)
	}
	ic, err := Build(bytes.NewReader(cc), int64(len(cc)), Zstd, 64<<10, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A zstd decoder decodes on only from the same reader.
	rc := bytes.NewReader(cc)
	var dc Decoder
	defer dc.Close()
	r := rand.New(rand.NewPCG(7, 8))
	var off int64
	for i := range 400 {
		data, comp, ix := a, io.ReaderAt(bytes.NewReader(ca)), ia
		switch {
		case i%7 == 6:
			data, comp, ix = b, bytes.NewReader(cb), ib
		case i%4 == 3 || i > 300:
			data, comp, ix = c, rc, ic
		}
		switch {
		case i%29 == 28:
			off = r.Int64N(int64(len(data)))
		default:
			off = (off + r.Int64N(3000)) % int64(len(data))
		}
		p := make([]byte, min(int64(len(data))-off, r.Int64N(2000)))
		if err := dc.ReadAt(ix, comp, int64(map[*Index]int{ia: len(ca), ib: len(cb), ic: len(cc)}[ix]), p, off, nil); err != nil {
			t.Fatalf("read %d at %d: %v", len(p), off, err)
		}
		if !bytes.Equal(p, data[off:off+int64(len(p))]) {
			t.Fatalf("read %d at %d: bytes differ", len(p), off)
		}
	}
}

// FuzzGzip reads arbitrary bytes as a gzip file: the inflater must not
// panic, and when both it and the standard library (which reads every
// member) accept the file, their outputs are the same, from the start and
// from every access point.
func FuzzGzip(f *testing.F) {
	f.Add(gz(f, []byte("corgipile corgipile corgipile"), 6, 1))
	f.Add(gz(f, sample(600, 15), 1, 3))
	f.Add(gz(f, nil, 9, 1))
	f.Fuzz(func(t *testing.T, comp []byte) {
		zr, err := gzip.NewReader(bytes.NewReader(comp))
		if err != nil {
			return
		}
		want, werr := io.ReadAll(io.LimitReader(zr, 4<<20+1))
		if len(want) > 4<<20 {
			return
		}
		ix, err := Build(bytes.NewReader(comp), int64(len(comp)), Gzip, 512, nil)
		if err != nil || werr != nil {
			return
		}
		if ix.Size != int64(len(want)) {
			t.Fatalf("%d bytes, the standard library %d", ix.Size, len(want))
		}
		var dc Decoder
		for _, p := range ix.Points {
			got := make([]byte, int64(len(want))-p.Out)
			if err := dc.ReadAt(ix, bytes.NewReader(comp), int64(len(comp)), got, p.Out, nil); err != nil {
				t.Fatalf("from the point at %d: %v", p.Out, err)
			}
			if !bytes.Equal(got, want[p.Out:]) {
				t.Fatalf("from the point at %d: output differs from the standard library's", p.Out)
			}
		}
	})
}
