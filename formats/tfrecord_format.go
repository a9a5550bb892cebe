package formats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// TFRecord is the Format of TFRecord files. It wraps the Scanner and
// SplitFilled of tfrecord.go and scanner.go, which stay the one place
// where a frame is checked.
type TFRecord struct{}

func (TFRecord) Name() string      { return "tfrecord" }
func (TFRecord) Include() []string { return []string{"*.tfrecord", "*.tfrecords"} }
func (TFRecord) Ext() string       { return ".tfrecord" }
func (TFRecord) Checksummed() bool { return true }

// FrameOverhead is the length field, its CRC and the data CRC.
func (TFRecord) FrameOverhead() int64 { return FrameExtra }

// Head refuses a compressed file, which a frame scan would report as a
// meaningless CRC error at offset 0.
func (TFRecord) Head(r io.ReaderAt, size int64) (Head, error) {
	head := make([]byte, min(size, HeaderLen))
	n, err := r.ReadAt(head, 0)
	if n < len(head) {
		return Head{}, fmt.Errorf("read the first bytes: %w", err)
	}
	if SniffCompressed(head) {
		return Head{}, ErrCompressed
	}
	return Head{Start: 0, End: size}, nil
}

func (TFRecord) Scan(r io.ReaderAt, h Head, start, end int64) RecordScanner {
	return NewScanner(r, start, end)
}

func (TFRecord) SplitFilled(h Head, buf []byte, filled, from, base int64, starts []int64) ([]int64, int64, error) {
	return SplitFilled(buf, filled, from, base, starts)
}

func (TFRecord) AppendPrologue(dst []byte, h Head, records int64) []byte { return dst }
func (TFRecord) AppendEpilogue(dst []byte, h Head) []byte                { return dst }

func (TFRecord) NewReader(r io.Reader) RecordReader { return &frameReader{r: r} }

// maxFrameData bounds the record a frameReader allocates for, so that a
// damaged length field cannot ask for terabytes.
const maxFrameData = 1 << 32

// frameReader reads TFRecord frames from a stream, checking both CRCs.
type frameReader struct {
	r   io.Reader
	buf []byte
	off int64
}

func (f *frameReader) Prologue() []byte { return nil }

func (f *frameReader) Next() ([]byte, error) {
	if cap(f.buf) < HeaderLen {
		f.buf = make([]byte, HeaderLen, 64<<10)
	}
	f.buf = f.buf[:HeaderLen]
	if _, err := io.ReadFull(f.r, f.buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, &CorruptError{Offset: f.off, Reason: "truncated frame header"}
		}
		return nil, err // io.EOF at a frame boundary is the end
	}
	n, err := checkHeader(f.buf, f.off, maxFrameData+FrameExtra)
	if err != nil {
		return nil, err
	}
	total := HeaderLen + int(n) + FooterLen
	if cap(f.buf) < total {
		f.buf = append(f.buf, make([]byte, total-HeaderLen)...)
	}
	f.buf = f.buf[:total]
	if _, err := io.ReadFull(f.r, f.buf[HeaderLen:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, &CorruptError{Offset: f.off, Reason: "truncated frame"}
		}
		return nil, err
	}
	if MaskedCRC(f.buf[HeaderLen:HeaderLen+n]) != binary.LittleEndian.Uint32(f.buf[HeaderLen+n:]) {
		return nil, &CorruptError{Offset: f.off, Reason: "data CRC mismatch"}
	}
	f.off += int64(total)
	return f.buf, nil
}
