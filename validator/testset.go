package validator

// The test set: records of any format decoded into a dense matrix held
// in memory.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/corgifs/corgifs/formats"
)

// A TestSet is a set of decoded records held in memory as a dense matrix.
type TestSet struct {
	Dim    int       // features per record
	X      []float32 // Len() rows of Dim features, row after row
	Labels []int     // the label of each row
}

// Len returns the number of records.
func (ts *TestSet) Len() int { return len(ts.Labels) }

// Row returns the features of record i.
func (ts *TestSet) Row(i int) []float32 { return ts.X[i*ts.Dim : (i+1)*ts.Dim] }

// Classes returns one more than the largest label, the number of classes
// the records show.
func (ts *TestSet) Classes() int {
	n := 0
	for _, l := range ts.Labels {
		n = max(n, l+1)
	}
	return n
}

// LoadTestSet reads the files paths, of the Decoder's format, and decodes
// all their records with dec. Every record must have as many features as
// the first.
func LoadTestSet(dec Decoder, paths ...string) (*TestSet, error) {
	ts := &TestSet{}
	var br *bufio.Reader
	for _, path := range paths {
		if err := ts.load(&br, dec, path); err != nil {
			return nil, fmt.Errorf("validator: test set %s: %w", path, err)
		}
	}
	return ts, nil
}

func (ts *TestSet) load(br **bufio.Reader, dec Decoder, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rr := records(br, dec.Format(), f)
	for i := int64(0); ; i++ {
		rec, err := rr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("record %d: %w", i, rr.wrap(err))
		}
		if i == 0 {
			if err := dec.Begin(rr.Prologue()); err != nil {
				return err
			}
		}
		n := len(ts.X)
		label, x, err := dec.Decode(rec, i, ts.X)
		if err != nil {
			return err
		}
		if len(ts.Labels) == 0 {
			ts.Dim = len(x) - n
		}
		if len(x)-n != ts.Dim {
			return fmt.Errorf("record %d: %d features, the first record has %d", i, len(x)-n, ts.Dim)
		}
		ts.X = x
		ts.Labels = append(ts.Labels, label)
	}
}

// records returns a reader of the records of r in format f, through the
// read buffer *br, which it makes on first use.
func records(br **bufio.Reader, f formats.Format, r io.Reader) *recordReader {
	if *br == nil {
		*br = bufio.NewReaderSize(r, readBufSize)
	} else {
		(*br).Reset(r)
	}
	rr := &recordReader{br: *br}
	rr.RecordReader = f.NewReader(rr)
	return rr
}

// recordReader is the format's RecordReader over a buffered stream, which
// counts the bytes it consumed so that a read error can say where it
// happened.
type recordReader struct {
	formats.RecordReader
	br  *bufio.Reader
	off int64
}

func (r *recordReader) Read(p []byte) (int, error) {
	n, err := r.br.Read(p)
	r.off += int64(n)
	return n, err
}

// wrap adds the stream offset to a read error; the format's errors
// (*formats.CorruptError) already have theirs.
func (r *recordReader) wrap(err error) error {
	var ce *formats.CorruptError
	if errors.As(err, &ce) {
		return err
	}
	return fmt.Errorf("reading at offset %d: %w", r.off, err)
}
