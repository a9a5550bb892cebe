package zaccess

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/dustin/go-humanize"
	"github.com/klauspost/compress/zstd"
)

// zstd frames are found by their structure (RFC 8878 section 3.1): a
// frame header, then blocks whose headers give their sizes, then an
// optional checksum; skippable frames (the seekable format's seek table)
// say their size. Each frame is then decompressed by klauspost/compress to
// learn, and check, its output.

const (
	zstdMagic     = 0xFD2FB528
	skippableMask = 0xFFFFFFF0
	skippableBase = 0x184D2A50
)

// zstdFrame is one frame found in a file.
type zstdFrame struct {
	off, n    int64
	skippable bool
	content   int64 // Frame_Content_Size, -1 when the header leaves it out
}

// nextZstdFrame reads the frame at off from br (positioned there) and
// returns it, or io.EOF at the end of the file.
func nextZstdFrame(br *bufio.Reader, off int64) (zstdFrame, error) {
	f := zstdFrame{off: off, content: -1}
	var h [4]byte
	n, err := io.ReadFull(br, h[:])
	if n == 0 && err == io.EOF {
		return f, io.EOF
	}
	bad := func(reason string) error { return &FormatError{Offset: off + f.n, Reason: reason} }
	short := func() error {
		return fmt.Errorf("zstd frame at byte %d ends at byte %d, before its end (truncated file?): %w", off, off+f.n, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return f, bad("trailing bytes after the last zstd frame")
	}
	f.n = 4
	magic := binary.LittleEndian.Uint32(h[:])
	if magic&skippableMask == skippableBase {
		if _, err := io.ReadFull(br, h[:]); err != nil {
			return f, short()
		}
		size := int64(binary.LittleEndian.Uint32(h[:]))
		f.n += 4
		if k, _ := br.Discard(int(size)); int64(k) < size {
			f.n += int64(k)
			return f, short()
		}
		f.n += size
		f.skippable = true
		return f, nil
	}
	if magic != zstdMagic {
		if off == 0 {
			return f, bad("not a zstd frame")
		}
		return f, bad("trailing bytes after the last zstd frame")
	}
	fhd, err := br.ReadByte()
	if err != nil {
		return f, short()
	}
	f.n++
	if fhd&0x08 != 0 {
		return f, bad("reserved bit of a zstd frame header set")
	}
	if fhd&0x20 == 0 {
		// The window descriptor (RFC 8878 section 3.1.1.1.2), checked
		// here so that a frame no decoder here may decode is refused
		// with the reason, at indexing, even where its output is not
		// decoded then (ZstdFrames).
		wd, err := br.ReadByte()
		if err != nil {
			return f, short()
		}
		f.n++
		log := 10 + int(wd>>3)
		base := int64(1) << log
		if w := base + base/8*int64(wd&7); w > MaxZstdWindow {
			return f, &WindowError{Offset: off, Window: w, Log: log}
		}
	}
	skip := [4]int{0, 1, 2, 4}[fhd&3] // dictionary ID
	if k, _ := br.Discard(skip); k < skip {
		f.n += int64(k)
		return f, short()
	}
	f.n += int64(skip)
	fcsLen := 0
	switch fcs := fhd >> 6; {
	case fcs == 0 && fhd&0x20 != 0:
		fcsLen = 1
	case fcs > 0:
		fcsLen = 1 << fcs
	}
	if fcsLen > 0 {
		var b [8]byte
		if _, err := io.ReadFull(br, b[:fcsLen]); err != nil {
			return f, short()
		}
		f.n += int64(fcsLen)
		f.content = int64(binary.LittleEndian.Uint64(b[:]))
		if fcsLen == 2 {
			f.content += 256
		}
		if f.content < 0 {
			return f, bad("zstd frame content size over 2^63")
		}
	}
	for {
		var b [3]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return f, short()
		}
		f.n += 3
		bh := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
		size := int(bh >> 3)
		switch bh >> 1 & 3 {
		case 1: // RLE: one byte repeated
			size = 1
		case 3:
			return f, bad("reserved zstd block type")
		}
		if k, _ := br.Discard(size); k < size {
			f.n += int64(k)
			return f, short()
		}
		f.n += int64(size)
		if bh&1 != 0 {
			break
		}
	}
	if fhd&0x04 != 0 {
		if k, _ := br.Discard(4); k < 4 {
			f.n += int64(k)
			return f, short()
		}
		f.n += 4
	}
	return f, nil
}

// MaxZstdWindow is the largest zstd window decoded: zstd --long's
// default (27), which every decoder may hold in memory besides the
// loader's budget. A file written with a larger one (--long=31) is refused
// at indexing with a WindowError.
const MaxZstdWindow = 1 << maxZstdWindowLog

// WindowError refuses a zstd frame whose window is larger than
// MaxZstdWindow.
type WindowError struct {
	Offset int64 // of the frame
	Window int64 // bytes
	Log    int   // the window log, what zstd --long=N sets
}

func (e *WindowError) Error() string {
	return fmt.Sprintf("zstd frame at byte %d needs a window of %s (window log %d, as zstd --long=%d writes), more than the %s (window log %d, zstd --long's default) corgifs decodes, so that each decoder fits beside {max-memory}: recompress the file without --long, or with --long=%d or less",
		e.Offset, humanize.IBytes(uint64(e.Window)), e.Log, e.Log, humanize.IBytes(MaxZstdWindow), maxZstdWindowLog, maxZstdWindowLog)
}

// maxZstdWindowLog is log2(MaxZstdWindow).
const maxZstdWindowLog = 27

func newZstdReader() (*zstd.Decoder, error) {
	// One goroutine: the loader runs one decoder per block already.
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(MaxZstdWindow))
}

// buildZstd finds the frames of src and the output of each, from its
// header (Frame_Content_Size, which the zstd tool writes for files) or, if
// the header leaves it out, by decompressing it: an access point starts a
// frame at least span bytes of output after the last one. When every
// frame says its size (checked reports false), nothing has been
// decompressed: the caller's scan of the output checks the frames
// (klauspost/compress checks each frame's size and checksum).
func buildZstd(src io.ReaderAt, size int64, span int64, progress func(int64)) (*Index, error) {
	ix, _, err := scanZstd(src, size, span, progress, false)
	return ix, err
}

// scanZstd is buildZstd, without decompressing the frames whose headers
// say their size (trust set), for a caller who decompresses all of the
// output next anyway.
func scanZstd(src io.ReaderAt, size int64, span int64, progress func(int64), trust bool) (*Index, bool, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(src, 0, size), 1<<20)
	dec, err := newZstdReader()
	if err != nil {
		return nil, false, err
	}
	defer dec.Close()
	ix := &Index{Kind: Zstd}
	var off int64
	decoded := false
	for {
		f, err := nextZstdFrame(br, off)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false, err
		}
		off += f.n
		if f.skippable {
			continue
		}
		if n := len(ix.Points); n == 0 || ix.Size-ix.Points[n-1].Out >= span {
			ix.Points = append(ix.Points, Point{Out: ix.Size, In: f.off * 8, Member: true})
		}
		if trust && f.content >= 0 {
			ix.Size += f.content
			continue
		}
		decoded = true
		if err := dec.Reset(io.NewSectionReader(src, f.off, f.n)); err != nil {
			return nil, false, err
		}
		n, err := io.Copy(io.Discard, dec)
		ix.Size += n
		if err != nil {
			return nil, false, fmt.Errorf("zstd frame at byte %d: %w", f.off, err)
		}
		if progress != nil {
			progress(off)
		}
	}
	if len(ix.Points) == 0 {
		return nil, false, errors.New("no zstd frame")
	}
	return ix, decoded, nil
}

// ZstdFrames returns the access points of the zstd file src, decompressing
// only the frames whose headers do not say their size: the output of the
// others is not checked, which the caller must do by decompressing it all
// (as indexing does, to find its records).
func ZstdFrames(src io.ReaderAt, size int64, span int64, progress func(int64)) (*Index, error) {
	ix, _, err := scanZstd(src, size, span, progress, true)
	return ix, err
}

// zstdDecoder decodes from a frame start to the end of the file (the
// decoder goes on through the frames that follow).
type zstdDecoder struct {
	dec *zstd.Decoder
}

func (z *zstdDecoder) open(src io.ReaderAt, size, off int64) (io.Reader, error) {
	if z.dec == nil {
		dec, err := newZstdReader()
		if err != nil {
			return nil, err
		}
		z.dec = dec
	}
	if err := z.dec.Reset(bufio.NewReaderSize(io.NewSectionReader(src, off, size-off), 64<<10)); err != nil {
		return nil, err
	}
	return z.dec, nil
}

// Close frees the decoder's resources.
func (dc *Decoder) Close() {
	if dc.zst != nil && dc.zst.dec != nil {
		dc.zst.dec.Close()
	}
}
