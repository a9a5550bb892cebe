package index

import (
	"fmt"
	"io"
	"math"
	"path"
	"slices"
	"strings"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/zaccess"
)

// Compressed source files (gzip, zlib, zstd) are served without a
// decompressed copy: indexing decompresses each once, finds the records in
// the decompressed stream with the format's scanner, cuts blocks by the
// rule of every file (Cuts, on decompressed offsets: the blocks, and so
// every epoch, are those of the file's decompressed copy), and records
// for each block an access point (package zaccess): the last place at or
// before its start where decoding can restart. A File's offsets (Head,
// From, To, its blocks' and records') are offsets in its decompressed
// stream; loading a block decompresses from its access point and drops
// the bytes before the block's start (at most about one DEFLATE block; for
// zstd, the part of the frame before it).
// The one exception to Cuts: a zstd file of one frame, which has no place
// to restart but its start, is one block (see scanWith).

// Compression values of Options.Compression.
const (
	CompressionAuto = "auto" // by name (.gz, .zst, .zlib, .zz) and magic bytes
	CompressionNone = "none" // every file is read as stored
)

// Compressions lists the values Options.Compression takes.
func Compressions() []string {
	return []string{CompressionAuto, CompressionNone, "gzip", "zlib", "zstd"}
}

// compressedExts are the name endings of compressed files, and the kind of
// each.
var compressedExts = []struct {
	ext  string
	kind zaccess.Kind
}{{".gz", zaccess.Gzip}, {".gzip", zaccess.Gzip}, {".zst", zaccess.Zstd}, {".zstd", zaccess.Zstd}, {".zlib", zaccess.Zlib}, {".zz", zaccess.Zlib}}

// CheckCompression says whether c is a value Options.Compression takes.
func CheckCompression(c string) error {
	if c == "" || slices.Contains(Compressions(), c) {
		return nil
	}
	return fmt.Errorf("unknown {compression} %q; known: %s", c, strings.Join(Compressions(), ", "))
}

// compressedNames says whether files under compressed names are listed.
func (o Options) compressedNames() bool { return o.Compression != CompressionNone }

// withCompressed adds to include the patterns of its files compressed
// (*.tfrecord.gz for *.tfrecord).
func withCompressed(include []string) []string {
	out := slices.Clone(include)
	for _, p := range include {
		for _, e := range compressedExts {
			out = append(out, p+e.ext)
		}
	}
	return out
}

// trimCompressed returns name without its compressed extension.
func trimCompressed(name string) string {
	for _, e := range compressedExts {
		if s, ok := strings.CutSuffix(name, e.ext); ok && s != "" && !strings.HasSuffix(s, "/") {
			return s
		}
	}
	return name
}

// CompressedByName reports whether the files of ix may be compressed as
// far as their names and o.Compression tell, without reading them: an
// index that probes near offsets (d-probe's --index probe) cannot work on
// compressed bytes, and must be built in full then.
func (ix *Index) CompressedByName(o Options) bool {
	switch o.Compression {
	case CompressionNone:
		return false
	case "", CompressionAuto:
		return slices.ContainsFunc(ix.Files, func(f File) bool { return trimCompressed(f.Path) != f.Path })
	}
	return true
}

// compressionOf says how file name, starting with head, is compressed
// (0: not), by o.Compression: auto goes by the name's extension, then by
// magic bytes (gzip, zstd; a TFRecord file that is no TFRecord and starts
// with a zlib header is zlib, as TensorFlow writes with options="ZLIB").
func compressionOf(name string, head []byte, o Options, f formats.Format) (zaccess.Kind, error) {
	switch o.Compression {
	case CompressionNone:
		return 0, nil
	case "gzip":
		return zaccess.Gzip, nil
	case "zlib":
		return zaccess.Zlib, nil
	case "zstd":
		return zaccess.Zstd, nil
	}
	magic, sniffed := zaccess.Sniff(head)
	for _, e := range compressedExts {
		if strings.HasSuffix(name, e.ext) {
			if e.kind == zaccess.Zlib && !zaccess.IsZlibHeader(head) || e.kind != zaccess.Zlib && magic != e.kind {
				return 0, fmt.Errorf("%s is named %s but does not start as %s data (first bytes % x); pass {compression} none to read it as stored", name, e.ext, e.kind, head[:min(len(head), 4)])
			}
			return e.kind, nil
		}
	}
	if sniffed {
		return magic, nil
	}
	if _, ok := f.(formats.TFRecord); ok && formats.SniffCompressed(head) && zaccess.IsZlibHeader(head) {
		return zaccess.Zlib, nil
	}
	return 0, nil
}

// sniffCompression reads the first bytes of file fi and says how it is
// compressed.
func (ix *Index) sniffCompression(fi int32, r io.ReaderAt, o Options) (zaccess.Kind, error) {
	f := ix.Files[fi]
	head := make([]byte, min(f.Size, formats.HeaderLen))
	if n, err := r.ReadAt(head, 0); n < len(head) {
		return 0, fmt.Errorf("index: %s: read the first bytes: %w", ix.Path(fi), err)
	}
	kind, err := compressionOf(ix.Path(fi), head, o, o.Format)
	if err != nil {
		return 0, fmt.Errorf("index: %w", err)
	}
	return kind, nil
}

// scanCompressed is scanFile for a compressed file. Its blocks are cut by
// the rule of every other file (Cuts), on offsets in its decompressed
// stream, so that its epochs are those of its decompressed copy; the
// access point of each block is the last place at or before its start
// where decoding can restart (a DEFLATE block boundary, a gzip member or
// zstd frame start), so that loading it decodes little more than its own
// bytes. A gzip file under 4 GiB of one member (as TensorFlow writes
// them) says its decompressed length in its trailer: one decompression
// then records the access points while the format's scanner reads the
// output. Otherwise, or when that length turns out wrong (several
// members), a first pass finds the length, and a second the records and
// the access points.
func (ix *Index) scanCompressed(fi int32, o Options, r io.ReaderAt, kind zaccess.Kind, progress func(int64)) (fileScan, error) {
	f := ix.Files[fi]
	path := ix.Path(fi)
	if _, paged := r.(source.PageCached); !paged {
		// Each ReadAt of a remote file is a request: read large pieces.
		r = &BufferedAt{R: r, Size: f.Size, Piece: 1 << 20}
	}
	if guess, ok := zaccess.GzipSize(r, f.Size); ok && kind == zaccess.Gzip {
		x := zaccess.NewCutIndexer(r, f.Size, kind, ix.BlockSize, progress)
		out, err := ix.scanStream(fi, o, x, guess, false, x.Cut, func(int64) {})
		zi, ferr := x.Finish()
		if ferr != nil {
			return out, fmt.Errorf("index: %s (%s): %w", path, kind, ferr)
		}
		if zi.Size == guess {
			out.access = zi
			return out, err
		}
		// Several members: scan again with the real length.
		o.Logger.Debug("gzip trailer's length is not the stream's; scanning again", "file", path, "isize", guess, "bytes", zi.Size)
		progress(f.Size / 2)
		return ix.scanDeflate(fi, o, r, kind, zi.Size, func(n int64) { progress(f.Size/2 + n/2) })
	}
	if kind == zaccess.Zstd {
		// The frames' headers say their sizes (the zstd tool writes
		// them): the scan is then the one decompression, which checks
		// every frame, to the end. Every frame start is a candidate
		// access point; those no block starts from are dropped after.
		zi, err := zaccess.ZstdFrames(r, f.Size, 1, func(in int64) { progress(in / 2) })
		if err != nil {
			return fileScan{}, fmt.Errorf("index: %s (%s): %w", path, kind, err)
		}
		return ix.scanWith(fi, o, r, zi, func(n int64) { progress(f.Size/2 + n/2) })
	}
	zi, err := zaccess.Build(r, f.Size, kind, ix.BlockSize, func(in int64) { progress(in / 2) })
	if err != nil {
		return fileScan{}, fmt.Errorf("index: %s (%s): %w", path, kind, err)
	}
	return ix.scanDeflate(fi, o, r, kind, zi.Size, func(n int64) { progress(f.Size/2 + n/2) })
}

// scanDeflate finds the records and access points of gzip or zlib file
// fi, whose decompressed length is size, in one more decompression.
func (ix *Index) scanDeflate(fi int32, o Options, r io.ReaderAt, kind zaccess.Kind, size int64, progress func(int64)) (fileScan, error) {
	f := ix.Files[fi]
	x := zaccess.NewCutIndexer(r, f.Size, kind, ix.BlockSize, progress)
	out, err := ix.scanStream(fi, o, x, size, false, x.Cut, func(int64) {})
	zi, ferr := x.Finish()
	if ferr != nil {
		return out, fmt.Errorf("index: %s (%s): %w", ix.Path(fi), kind, ferr)
	}
	if err == nil && zi.Size != size {
		err = fmt.Errorf("index: %s (%s): %d bytes decompressed, %d the first time (changed while indexed?)", ix.Path(fi), kind, zi.Size, size)
	}
	out.access = zi
	return out, err
}

// scanWith finds the records of zstd file fi, whose frames zi are known,
// decompressing from them, and keeps as access points the frames its
// blocks start in. A file of one frame larger than a block is one block:
// cut like its decompressed copy, each of its blocks would decode from the
// file's start at every load (a 1 GiB file at 8 MiB blocks: 64 GiB
// decoded per epoch), so it is the one exception to the rule of Cuts.
func (ix *Index) scanWith(fi int32, o Options, r io.ReaderAt, zi *zaccess.Index, progress func(int64)) (fileScan, error) {
	f := ix.Files[fi]
	whole := zi.Kind == zaccess.Zstd && len(zi.Points) == 1 && zi.Size > ix.BlockSize
	if whole {
		o.Logger.Warn("zstd file of one frame: served as one block of all its bytes, so an epoch loads it whole into memory and places it as one unit, never cut into blocks spread over the epoch; compress it as many frames (pzstd, or t2sz for the zstd seekable format) so that it is cut into blocks", "file", ix.Path(fi), "bytes", zi.Size)
	}
	ra := zaccess.NewReaderAt(zi, r, f.Size)
	defer ra.Close()
	var starts []int64
	out, err := ix.scanStream(fi, o, ra, zi.Size, whole, func(off int64) { starts = append(starts, off) }, func(off int64) {
		progress(int64(float64(f.Size) * float64(off) / float64(max(1, zi.Size))))
	})
	if err == nil {
		if err = ra.CheckEnd(); err != nil {
			err = fmt.Errorf("index: %s (%s): %w", ix.Path(fi), zi.Kind, err)
		}
	}
	zi.Points = zi.PointsFor(starts)
	out.access = zi
	return out, err
}

// scanStream cuts the decompressed stream ra of file fi, size bytes long,
// into blocks by the rule of every file (Cuts and CapCuts), or, if
// whole, only where a block would hold more than math.MaxInt32 records or damaged bytes are
// skipped, calling cut with the offset of each block's start as it is
// found (to choose its access point) and progress with the offset scanned
// now and then.
func (ix *Index) scanStream(fi int32, o Options, ra io.ReaderAt, size int64, whole bool, cut func(int64), progress func(int64)) (fileScan, error) {
	var out fileScan
	f := ix.Files[fi]
	path := ix.Path(fi)
	format := o.Format
	h, err := format.Head(ra, size)
	if err != nil {
		return out, fmt.Errorf("index: %s (decompressed): %w", path, err)
	}
	out.head, out.from, out.to = h, h.Start, h.Start
	c := newBlockCutter(&out, fi, ix.BlockSize, true)
	c.whole, c.started = whole, cut
	c.records = !format.Checksummed()
	var chunk []byte
	c.sum = func(rec formats.Record, block *uint32) (uint32, error) {
		return sumReadAt(ra, &chunk, rec, block, c.records, "decompressed offset")
	}
	if err := c.cut(format, ra, h, o, f.Path, path, progress); err != nil {
		return out, err
	}
	return out, nil
}

// sumReadAt is sumRecord for bytes that must be read again, into chunk
// (made when first needed), from r: a file or a decompressed stream, as at
// names its offsets; the record's own CRC is computed only if record.
func sumReadAt(r io.ReaderAt, chunk *[]byte, rec formats.Record, block *uint32, record bool, at string) (uint32, error) {
	if *chunk == nil {
		*chunk = make([]byte, 256<<10)
	}
	var crc uint32
	for off, n := rec.Offset, rec.Len; n > 0; {
		b := (*chunk)[:min(n, int64(len(*chunk)))]
		k, err := r.ReadAt(b, off)
		if k < len(b) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("checksum the record at %s %d: %w", at, rec.Offset, err)
		}
		if record {
			crc = formats.UpdateChecksum(crc, b)
		}
		*block = formats.UpdateChecksum(*block, b)
		off += int64(k)
		n -= int64(k)
	}
	return crc, nil
}

// dataSize returns the length of f's stored stream: decompressed for a
// compressed file.
func (f *File) dataSize() int64 {
	if f.Access != nil {
		return f.Access.Size
	}
	return f.Size
}

// checkAccess says how the access points of a decoded compressed file are
// not what Build makes.
func (f *File) checkAccess() error {
	a := f.Access
	if a == nil {
		return nil
	}
	if a.Kind != zaccess.Gzip && a.Kind != zaccess.Zlib && a.Kind != zaccess.Zstd {
		return fmt.Errorf("%s: unknown compression %d", f.Path, a.Kind)
	}
	if len(a.Points) == 0 || a.Points[0].Out != 0 || a.Points[0].In != 0 || a.Size < 0 {
		return fmt.Errorf("%s: its access points do not start the file", f.Path)
	}
	for i, p := range a.Points {
		if p.Out > a.Size || p.In < 0 || p.In > f.Size*8 || (i > 0 && (p.Out < a.Points[i-1].Out || p.In <= a.Points[i-1].In)) ||
			(p.Member != (p.Window == nil)) || (p.Member && p.In%8 != 0) {
			return fmt.Errorf("%s: access point %d (output %d, bit %d) is out of place", f.Path, i, p.Out, p.In)
		}
	}
	return nil
}

// compressedInclude returns include with the names of its files
// compressed, when o lists compressed files.
func compressedInclude(include []string, o Options) []string {
	if !o.compressedNames() {
		return include
	}
	return withCompressed(include)
}

// detectName is the name a file's format is detected by: without its
// compressed extension.
func detectName(name string, o Options) string {
	if !o.compressedNames() {
		return name
	}
	return path.Join(path.Dir(name), trimCompressed(path.Base(name)))
}

// BufferedAt reads a remote file, where each ReadAt is a request, in
// large pieces for a reader that asks for small ones, going forward: the
// first piece is first bytes long (the stretch the caller expects to
// need), the next ones piece bytes.
type BufferedAt struct {
	R            io.ReaderAt
	Size         int64 // of the file
	First, Piece int64
	buf          []byte
	off          int64 // of buf[0]
}

func (b *BufferedAt) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		at := off + int64(n)
		if at >= b.Size {
			return n, io.EOF
		}
		if at < b.off || at >= b.off+int64(len(b.buf)) {
			want := b.Piece
			if b.First > 0 {
				want, b.First = b.First, 0
			}
			want = min(max(want, int64(len(p)-n)), b.Size-at)
			if int64(cap(b.buf)) < want {
				b.buf = make([]byte, want)
			}
			k, err := b.R.ReadAt(b.buf[:want], at)
			b.buf, b.off = b.buf[:k], at
			if k == 0 {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return n, err
			}
		}
		n += copy(p[n:], b.buf[at-b.off:])
	}
	return n, nil
}

// CompressedStats sums up the compressed files of an index.
type CompressedStats struct {
	Files  int
	Stored int64 // compressed bytes of those files
	Points int   // access points
	// PointBytes is what the access points take in the sidecar: their
	// compressed windows and offsets (17 bytes each).
	PointBytes int64
}

// Compressed returns the sums of the index's compressed files.
func (ix *Index) Compressed() CompressedStats {
	var s CompressedStats
	for _, f := range ix.Files {
		if f.Access == nil {
			continue
		}
		s.Files++
		s.Stored += f.Size
		s.Points += len(f.Access.Points)
		for _, p := range f.Access.Points {
			s.PointBytes += 17 + int64(len(p.Window))
		}
	}
	return s
}

// checkCompressedCuts says how the blocks of the compressed files of a
// decoded (and tiled) index are not cut by Cuts, as those of every file
// are: a sidecar written before compressed files were cut so (at access
// points) is rebuilt, and its epochs become those of the decompressed
// copies. A zstd file of one access point may be one block, as scanWith
// serves a file of one frame (its index does not tell a file of one frame
// from one whose blocks all start in its first frame, so both cuts pass).
// A block of MaxBlockRecords records or more may also end where CapCuts
// says.
func (ix *Index) checkCompressedCuts() error {
	if ix.Probed || ix.BlockSize <= 0 {
		return nil
	}
	r := 0
	prevFile, prev, prevEnd := int32(-1), int64(-1), int64(-1)
	for b, blk := range ix.Blocks {
		n := int(blk.Records)
		acc := ix.Files[blk.File].Access
		if acc == nil || r+n > len(ix.Frames) {
			r += n
			prevFile = -1
			continue
		}
		if blk.File == prevFile && blk.Offset == prevEnd && ix.Blocks[b-1].Records < MaxBlockRecords && !Cuts(ix.BlockSize, prev, blk.Offset) {
			return fmt.Errorf("block %d (%s at decompressed offset %d) does not start at a cut of block size %d", b, ix.Files[blk.File].Path, blk.Offset, ix.BlockSize)
		}
		whole := acc.Kind == zaccess.Zstd && len(acc.Points) == 1
		off := blk.Offset
		for k, fr := range ix.Frames[r : r+n] {
			if k > 0 && !whole && Cuts(ix.BlockSize, prev, off) && blk.Records != math.MaxInt32 {
				return fmt.Errorf("block %d (%s at decompressed offset %d) runs over the cut at %d of block size %d", b, ix.Files[blk.File].Path, blk.Offset, off, ix.BlockSize)
			}
			prev = off
			off += int64(fr)
		}
		r += n
		prevFile, prevEnd = blk.File, blk.Offset+blk.Len
	}
	return nil
}
