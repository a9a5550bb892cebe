package formats

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// seamBlock is a block as the index will keep it: a byte range of one
// file at record boundaries, its record count, whether it ends the
// file's records (and so gets Head.Tail), and the CRC32C of its stored
// bytes.
type seamBlock struct {
	file     int
	off, len int64
	records  int
	last     bool
	crc      uint32
}

// indexFiles does what blockcache's index will do through the seam: Head
// per file, Agree across files, Scan cut into blocks of about target
// bytes, and a CRC per block summed record by record.
func indexFiles(t *testing.T, f Format, files [][]byte, target int64) (Head, []Head, []seamBlock) {
	t.Helper()
	var heads []Head
	var blocks []seamBlock
	var dataset Head
	for i, data := range files {
		r := bytes.NewReader(data)
		h, err := f.Head(r, int64(len(data)))
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		if dataset.Key == nil {
			dataset = h
		}
		if err := Agree(f, "file 0", dataset, fmt.Sprintf("file %d", i), h); err != nil {
			t.Fatal(err)
		}
		heads = append(heads, h)
		sum := NewBlockSummer(r)
		cur := seamBlock{file: i, off: -1}
		flush := func() {
			if cur.records > 0 {
				blocks = append(blocks, cur)
			}
			cur = seamBlock{file: i, off: -1}
		}
		sc := f.Scan(r, h, h.Start, h.End)
		for sc.Next() {
			rec := sc.Record()
			if cur.records > 0 && cur.len+rec.Len > target {
				flush()
			}
			if cur.off < 0 {
				cur.off = rec.Offset
			}
			cur.len += rec.Len
			cur.records++
			if cur.crc, err = sum.Update(cur.crc, rec.Offset, rec.Len); err != nil {
				t.Fatal(err)
			}
		}
		if sc.Err() != nil {
			t.Fatalf("file %d: %v", i, sc.Err())
		}
		if cur.records > 0 {
			cur.last = true
		}
		flush()
	}
	return dataset, heads, blocks
}

// loadBlock does what the loader will do: read the stored bytes as they
// arrive, sum them, complete the file's last record with Head.Tail, and
// split. It returns the served records.
func loadBlock(f Format, files [][]byte, heads []Head, b seamBlock) ([][]byte, error) {
	h := heads[b.file]
	tail := 0
	if b.last {
		tail = len(h.Tail)
	}
	buf := make([]byte, b.len+int64(tail))
	src := files[b.file][b.off : b.off+b.len]
	var starts []int64
	var from int64
	var crc uint32
	var err error
	for filled := int64(0); filled < b.len; {
		n := min(b.len-filled, 37) // the bytes arrive a read at a time
		copy(buf[filled:], src[filled:filled+n])
		crc = UpdateChecksum(crc, buf[filled:filled+n])
		filled += n
		if filled == b.len {
			copy(buf[b.len:], h.Tail[:tail])
			filled = int64(len(buf))
		}
		if starts, from, err = f.SplitFilled(h, buf, filled, from, b.off, starts); err != nil {
			return nil, err
		}
	}
	if !f.Checksummed() && crc != b.crc {
		return nil, &CorruptError{Offset: b.off, Reason: "block checksum mismatch"}
	}
	if len(starts) != b.records {
		return nil, fmt.Errorf("%d records, index says %d", len(starts), b.records)
	}
	var recs [][]byte
	for i, s := range starts {
		end := int64(len(buf))
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		recs = append(recs, buf[s:end])
	}
	return recs, nil
}

// seamCases are small datasets of every format.
func seamCases(t *testing.T) []struct {
	f     Format
	files [][]byte
} {
	var lines, csvA, csvB, svm []byte
	csvA, csvB = []byte("id,v\r\n"), []byte("id,v\n")
	for i := range 40 {
		lines = fmt.Appendf(lines, "{\"n\": %d}\n", i)
		csvA = fmt.Appendf(csvA, "%d,\"multi\nline %d\"\r\n", i, i)
		csvB = fmt.Appendf(csvB, "%d,plain\n", 100+i)
		svm = fmt.Appendf(svm, "%d 1:%d 3:0.5\n", i%2, i)
	}
	rows := make([]byte, 30*8)
	for i := range rows {
		rows[i] = byte(i / 8)
	}
	return []struct {
		f     Format
		files [][]byte
	}{
		{TFRecord{}, func() [][]byte {
			a, _ := frames([]byte("a"), []byte("bb"), nil, []byte("dddd"))
			return [][]byte{a, a}
		}()},
		{Lines{}, [][]byte{lines, []byte("no newline at the end")}},
		{JSONL{Check: true}, [][]byte{lines, []byte("[1]\r\n{}")}},
		{CSV{Header: true}, [][]byte{csvA, csvB, []byte("id,v\n99,last")}},
		{LibSVM{}, [][]byte{svm, []byte("1 2:3")}},
		{NPY{}, [][]byte{npyFile("{'descr': '<i4', 'fortran_order': False, 'shape': (30, 2), }", rows), npyFile("{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2), }", rows[:8])}},
		{Fixed{RecordSize: 8, HeaderBytes: 2}, [][]byte{append([]byte("HH"), rows...)}},
		{WDS{}, wdsShards(t)},
	}
}

func TestSeamIndexLoadAndServeAgreeForEveryFormat(t *testing.T) {
	for _, c := range seamCases(t) {
		t.Run(c.f.Name(), func(t *testing.T) {
			dataset, heads, blocks := indexFiles(t, c.f, c.files, 100)
			// The records served from the blocks are the records the
			// format's reader finds in the source files.
			var want []string
			for _, data := range c.files {
				recs, err := ReadAll(c.f.NewReader(bytes.NewReader(data)))
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					want = append(want, string(r))
				}
			}
			var got []string
			for _, b := range blocks {
				recs, err := loadBlock(c.f, c.files, heads, b)
				if err != nil {
					t.Fatalf("block %+v: %v", b, err)
				}
				for _, r := range recs {
					got = append(got, string(r))
				}
			}
			if !sameMultiset(got, want) || len(got) != len(want) {
				t.Fatalf("served %d records, the reader finds %d (or they differ)", len(got), len(want))
			}
			// A part of the blocks in random order, records shuffled, is a
			// file of the format whose records are the same.
			rng := rand.New(rand.NewPCG(7, 7))
			rng.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
			part := c.f.AppendPrologue(nil, dataset, int64(len(got)))
			for _, r := range got {
				part = append(part, r...)
			}
			part = c.f.AppendEpilogue(part, dataset)
			pf := c.f
			if fx, ok := pf.(Fixed); ok {
				pf = Fixed{RecordSize: fx.RecordSize} // a part has no file header
			}
			recs, err := ReadAll(pf.NewReader(bytes.NewReader(part)))
			if err != nil {
				t.Fatalf("reading the part: %v", err)
			}
			var again []string
			for _, r := range recs {
				again = append(again, string(r))
			}
			if !sameMultiset(again, want) {
				t.Fatalf("the part reads back as %d records, want %d", len(again), len(want))
			}
		})
	}
}

func TestAFlippedByteInAnyFormatIsNeverServed(t *testing.T) {
	for _, c := range seamCases(t) {
		t.Run(c.f.Name(), func(t *testing.T) {
			_, heads, blocks := indexFiles(t, c.f, c.files, 100)
			for _, b := range blocks {
				for _, at := range []int64{0, b.len / 2, b.len - 1} {
					files := make([][]byte, len(c.files))
					copy(files, c.files)
					files[b.file] = bytes.Clone(files[b.file])
					files[b.file][b.off+at] ^= 0x20
					if recs, err := loadBlock(c.f, files, heads, b); err == nil {
						t.Fatalf("block %+v with byte %d flipped loaded %d records", b, at, len(recs))
					}
				}
			}
		})
	}
}
