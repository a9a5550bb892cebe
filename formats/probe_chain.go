package formats

import (
	"fmt"
	"io"
)

// Chainer is implemented by the formats whose probe can be fooled by a
// payload that embeds valid records of the same format: TFRecord (a record
// whose data is itself a TFRecord stream) and WebDataset tar (a member
// that is itself a tar archive). Their records are length-prefixed, so
// where a record starts is decided by every length before it, and no
// window of bytes near an offset can tell "a record starts here" from "an
// embedded record starts here, inside a record that began megabytes
// before": the same bytes occur in both files. The only proof of a
// boundary is the record chain from one already proven, the first being
// the start of the file's records, which is certain.
//
// The line formats and CSV need no chain: a newline outside quotes ends a
// row wherever it is, so their probes are exact (see Probe of CSV for why
// its rule finds the true boundary in a valid file). Fixed and npy are
// arithmetic.
type Chainer interface {
	// ChainFrom walks the file's records from from, a record boundary
	// known to be true (Head.Start, or a boundary ChainFrom returned), and
	// returns the first boundary at or after off, the end of the records
	// counting as one. It reads headers only where the format allows
	// (TFRecord lengths, tar member headers), not payloads. A broken chain
	// (a length or header checksum that fails) is a *CorruptError.
	ChainFrom(r io.ReaderAt, h Head, from, off int64) (int64, error)
	// TilingProvesEnd reports whether a block whose records tile it from
	// a true start also ends on a true boundary. It does for TFRecord (the
	// frames from a true start are the file's frames); not for tar, where
	// a member boundary is a sample boundary only when the key changes
	// there, which the block's own split does not see.
	TilingProvesEnd() bool
}

// What a chain walk reads at a time. Where records are small the walk
// reads the file sequentially: a window of chainWindow, doubling while the
// walk keeps moving on by little, up to chainWindowMax (fewer, larger GETs
// of a remote object). At its first header and past a large record it
// makes a small read of chainJumpRead.
const (
	// ChainWindow is what a walk reads at a time where records are small:
	// records shorter than it are read whole by a walk, payloads and all.
	ChainWindow    = chainWindow
	chainWindow    = 256 << 10
	chainWindowMax = 2 << 20
	chainJumpRead  = 4 << 10
)

// walkReader is an io.ReaderAt for a chain walk (see chainWindow). It
// never reads past end (an object store fails a range past the end).
type walkReader struct {
	r   io.ReaderAt
	end int64
	buf []byte
	off int64 // of buf[0]
	win int64 // the next sequential window
}

func newWalkReader(r io.ReaderAt, end int64) *walkReader {
	return &walkReader{r: r, end: end, off: -1, win: chainWindow}
}

// Held is bytes of a file held in memory: Data is the file from offset
// Off on. A chain walk over it reads them where they are, with no window
// of its own (a walk over blocks already fetched whole).
type Held struct {
	Data []byte
	Off  int64
}

// ReadAt reads from the held bytes; a read of bytes not held is short,
// with io.ErrUnexpectedEOF.
func (h Held) ReadAt(p []byte, off int64) (int, error) {
	if off < h.Off || off > h.Off+int64(len(h.Data)) {
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, h.Data[off-h.Off:])
	if n < len(p) {
		return n, io.ErrUnexpectedEOF
	}
	return n, nil
}

func (w *walkReader) ReadAt(p []byte, off int64) (int, error) {
	if h, ok := w.r.(Held); ok {
		if off+int64(len(p)) > w.end {
			return 0, io.ErrUnexpectedEOF
		}
		return h.ReadAt(p, off)
	}
	if w.off >= 0 && off >= w.off && off+int64(len(p)) <= w.off+int64(len(w.buf)) {
		return copy(p, w.buf[off-w.off:]), nil
	}
	if off+int64(len(p)) > w.end {
		return 0, io.ErrUnexpectedEOF
	}
	want := int64(chainJumpRead)
	if w.off >= 0 && off <= w.off+int64(len(w.buf))+chainWindow {
		want = w.win
		if int64(len(w.buf)) >= w.win {
			w.win = min(2*w.win, chainWindowMax)
		}
	} else {
		w.win = chainWindow
	}
	want = min(max(want, int64(len(p))), w.end-off)
	if int64(cap(w.buf)) < want {
		w.buf = make([]byte, want)
	}
	w.buf = w.buf[:want]
	k, err := w.r.ReadAt(w.buf, off)
	if int64(k) < want {
		w.buf, w.off = w.buf[:0], -1
		if err == nil || err == io.EOF {
			err = fmt.Errorf("short read at offset %d: file shorter than expected: %w", off+int64(k), io.ErrUnexpectedEOF)
		}
		return 0, err
	}
	w.off = off
	return copy(p, w.buf), nil
}

// ChainFrom follows the frame lengths from from: each length whose CRC
// checks says where the next frame starts. Data CRCs are not read (a block
// checks them when it is loaded); the boundaries depend on the lengths only.
func (TFRecord) ChainFrom(r io.ReaderAt, h Head, from, off int64) (int64, error) {
	w := newWalkReader(r, h.End)
	var hdr [HeaderLen]byte
	p := from
	for p < off && p < h.End {
		rest := h.End - p
		if rest < FrameExtra {
			return 0, &CorruptError{p, fmt.Sprintf("truncated frame: %d bytes left, need at least %d", rest, FrameExtra)}
		}
		if _, err := w.ReadAt(hdr[:], p); err != nil {
			return 0, fmt.Errorf("record chain at offset %d: %w", p, err)
		}
		n, err := checkHeader(hdr[:], p, rest)
		if err != nil {
			return 0, err
		}
		p += n + FrameExtra
	}
	return p, nil
}

func (TFRecord) TilingProvesEnd() bool { return true }

// ChainFrom walks the member headers from from as the scanner does, from a
// sample start: its first keyed member starts a sample (at the start of
// the shard, members without a key before it belong to none), and then
// every change of key. Past the last sample, the end of the records is the
// end-of-archive marker.
func (WDS) ChainFrom(r io.ReaderAt, h Head, from, off int64) (int64, error) {
	src := &readerAtSrc{r: newWalkReader(r, h.End), end: h.End}
	w := sampleWalker{off: from, start: from}
	for {
		had := w.has
		m, cut, _, err := w.step(src)
		if err != nil {
			return 0, err
		}
		if m.eoa {
			return m.start, nil
		}
		if (cut || !had && w.has) && m.start >= off {
			return m.start, nil
		}
	}
}

func (WDS) TilingProvesEnd() bool { return false }
