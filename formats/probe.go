package formats

import (
	"bytes"
	"fmt"
	"io"
)

// Prober is implemented by formats where a record boundary can be found
// from any offset without reading the file from its start, so that one
// large file can be indexed in parallel ranges. CSV cannot (whether a
// newline ends a row depends on every quote before it), nor can
// TFRecord or tar without trusting data that may look like a header.
type Prober interface {
	// Probe returns the first record boundary at or after off in a file
	// whose Head is h: off itself if a record starts there, h.End if
	// none does.
	Probe(r io.ReaderAt, h Head, off int64) (int64, error)
}

func (Lines) Probe(r io.ReaderAt, h Head, off int64) (int64, error)  { return probeLine(r, h, off) }
func (JSONL) Probe(r io.ReaderAt, h Head, off int64) (int64, error)  { return probeLine(r, h, off) }
func (LibSVM) Probe(r io.ReaderAt, h Head, off int64) (int64, error) { return probeLine(r, h, off) }

func (f Fixed) Probe(r io.ReaderAt, h Head, off int64) (int64, error) {
	return probeFixed(f.RecordSize, h, off), nil
}

func (NPY) Probe(r io.ReaderAt, h Head, off int64) (int64, error) {
	return probeFixed(npyRowLen(h.Key), h, off), nil
}

func probeFixed(size int64, h Head, off int64) int64 {
	if off <= h.Start || size <= 0 {
		return h.Start
	}
	return min(h.End, h.Start+(off-h.Start+size-1)/size*size)
}

// probeLine finds the first line start at or after off: just after the
// first "\n" at or after off-1.
func probeLine(r io.ReaderAt, h Head, off int64) (int64, error) {
	if off <= h.Start {
		return h.Start, nil
	}
	buf := make([]byte, 64<<10)
	for at := off - 1; at < h.End; {
		n := min(int64(len(buf)), h.End-at)
		k, err := r.ReadAt(buf[:n], at)
		if int64(k) < n {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("probe at offset %d: %w", at, err)
		}
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			return at + int64(i) + 1, nil
		}
		at += n
	}
	return h.End, nil
}
