// Package formats knows how records are framed inside source files: how to
// find record boundaries in a byte range, how to check that a record is intact,
// and how to write records. It does no I/O policy and knows nothing of FUSE;
// the index and the loader in blockcache call it.
//
// Only TFRecord is implemented so far. A TFRecord file is a sequence of frames:
//
//	uint64 length (little endian)
//	uint32 masked CRC32C of the 8 length bytes
//	byte   data[length]
//	uint32 masked CRC32C of data
//
// where CRC32C uses the Castagnoli polynomial and
// mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 in uint32 arithmetic.
package formats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// TFRecord frame overhead: 8 length bytes, 4 length CRC bytes, 4 data CRC bytes.
const (
	HeaderLen  = 12
	FooterLen  = 4
	FrameExtra = HeaderLen + FooterLen
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC returns the masked CRC32C of b, as stored in TFRecord frames.
func MaskedCRC(b []byte) uint32 {
	return mask(crc32.Checksum(b, castagnoli))
}

func mask(c uint32) uint32 { return ((c >> 15) | (c << 17)) + 0xa282ead8 }

// CorruptError describes a damaged record. Offset is the byte offset of the
// frame in the file (or in the buffer handed to Split, plus its base).
type CorruptError struct {
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("corrupt record at offset %d: %s", e.Offset, e.Reason)
}

// ErrCompressed is returned (wrapped) when a file read as stored looks like
// compressed TFRecord data.
var ErrCompressed = errors.New("compressed data where stored TFRecord frames were expected: corgifs reads gzip and zlib files with {compression} auto (the default) or gzip or zlib, and a full index")

// checkHeader validates a 12-byte frame header found at off and returns the
// data length. limit is the number of bytes from off to the end of the range,
// so that a length claiming more than the range holds is reported before any
// allocation could be sized from it.
func checkHeader(h []byte, off, limit int64) (int64, error) {
	n := binary.LittleEndian.Uint64(h[:8])
	if MaskedCRC(h[:8]) != binary.LittleEndian.Uint32(h[8:12]) {
		return 0, &CorruptError{off, "length CRC mismatch"}
	}
	if n > uint64(limit) || int64(n) > limit-FrameExtra {
		return 0, &CorruptError{off, fmt.Sprintf("length field %d runs past the end (%d bytes left)", n, limit)}
	}
	return int64(n), nil
}

// Split validates the frames packed back to back in buf, whose first byte is
// at offset base of its file, and appends the start of every frame (relative
// to buf) to starts. It is used on loaded blocks, so it checks both CRCs of
// every record: a source changed after indexing is caught here.
func Split(buf []byte, base int64, starts []int64) ([]int64, error) {
	starts, _, err := SplitFilled(buf, int64(len(buf)), 0, base, starts)
	return starts, err
}

// SplitFilled is Split for a buffer that is being filled: only buf[:filled]
// holds data yet. It validates the frames from offset from on that lie
// whole in buf[:filled], appends their starts, and returns the offset of
// the first frame it left for a later call. Lengths are checked against
// all of buf, and once filled reaches len(buf) every frame must be whole,
// as in Split. Checking each part of a block as soon as it is read finds
// its bytes still in the CPU's cache.
func SplitFilled(buf []byte, filled, from, base int64, starts []int64) ([]int64, int64, error) {
	off := from
	end := int64(len(buf))
	for off < filled {
		rest := end - off
		if rest < FrameExtra {
			return starts, off, &CorruptError{base + off, fmt.Sprintf("truncated frame: %d bytes left, need at least %d", rest, FrameExtra)}
		}
		if off+HeaderLen > filled {
			break
		}
		n, err := checkHeader(buf[off:off+HeaderLen], base+off, rest)
		if err != nil {
			return starts, off, err
		}
		if off+n+FrameExtra > filled {
			break
		}
		data := buf[off+HeaderLen : off+HeaderLen+n]
		if MaskedCRC(data) != binary.LittleEndian.Uint32(buf[off+HeaderLen+n:]) {
			return starts, off, &CorruptError{base + off, "data CRC mismatch"}
		}
		starts = append(starts, off)
		off += n + FrameExtra
	}
	return starts, off, nil
}

// SniffCompressed reports whether the first bytes of a file look like a GZIP
// or ZLIB stream rather than a TFRecord frame header.
func SniffCompressed(head []byte) bool {
	if len(head) >= HeaderLen {
		if _, err := checkHeader(head[:HeaderLen], 0, 1<<62); err == nil {
			return false
		}
	}
	if len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b {
		return true // gzip magic
	}
	// zlib (RFC 1950): CMF with method 8 and a window of at most 32 KiB
	// (CINFO <= 7), and FCHECK making CMF*256+FLG a multiple of 31.
	return len(head) >= 2 && head[0]&0x0f == 8 && head[0]>>4 <= 7 && (uint16(head[0])<<8|uint16(head[1]))%31 == 0
}

// Writer writes TFRecord frames.
type Writer struct {
	w   io.Writer
	hdr [HeaderLen]byte
	ftr [FooterLen]byte
	n   int64
}

// NewWriter returns a Writer that frames records onto w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes data as one record.
func (w *Writer) Write(data []byte) error {
	binary.LittleEndian.PutUint64(w.hdr[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(w.hdr[8:], MaskedCRC(w.hdr[:8]))
	binary.LittleEndian.PutUint32(w.ftr[:], MaskedCRC(data))
	for _, b := range [][]byte{w.hdr[:], data, w.ftr[:]} {
		if _, err := w.w.Write(b); err != nil {
			return err
		}
	}
	w.n += int64(len(data)) + FrameExtra
	return nil
}

// Written returns the number of bytes written so far.
func (w *Writer) Written() int64 { return w.n }

// AppendFrame appends data framed as one TFRecord to dst.
func AppendFrame(dst, data []byte) []byte {
	var hdr [HeaderLen]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(hdr[8:], MaskedCRC(hdr[:8]))
	dst = append(dst, hdr[:]...)
	dst = append(dst, data...)
	return binary.LittleEndian.AppendUint32(dst, MaskedCRC(data))
}

// Payload returns the data of the frame at the start of frame, without
// checking it. frame must hold a whole frame (as served or as split).
func Payload(frame []byte) []byte {
	n := binary.LittleEndian.Uint64(frame[:8])
	return frame[HeaderLen : HeaderLen+int(n)]
}
