package index

// The scan of one file: its records read in order and cut into blocks at
// the first record boundary at or after each multiple of the block size
// (Cuts), with their frames and checksums, leaving damaged bytes out where
// allowed.

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"strings"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/zaccess"
)

// fileScan is what indexing found in one file.
type fileScan struct {
	blocks   []Block
	frames   []uint32
	crcs     []uint32
	damaged  []Damage
	records  int64
	head     formats.Head
	from, to int64
	keys     iter.Seq[string] // WebDataset sample keys, for formats.KeySet
	access   *zaccess.Index   // of a compressed file
}

// blockCutter turns the records of one file, in order, into its blocks,
// frames and CRCs. The scan of a plain file and of a decompressed stream
// both use it, so the two cut blocks and account records identically.
type blockCutter struct {
	out       *fileScan
	fi        int32
	blockSize int64
	// whole keeps the file one block: it is cut only where a block would
	// hold more records than a Block counts (a one-frame zstd file: each
	// block of it would decode from the file's start, so neither Cuts nor
	// CapCuts cuts it).
	whole bool
	tail  int64 // len(Head.Tail), served with the file's last record
	// decompressed: the records are offsets of a compressed file's
	// decompressed stream, as errors and the log say.
	decompressed bool
	// sum checksums rec, adding it to the block's CRC, and returns its
	// own CRC when records is set (a format without checksums of its own).
	sum     func(rec formats.Record, block *uint32) (uint32, error)
	records bool
	// started, if set, is told the offset of each block's first record.
	started func(off int64)

	cur   Block
	prev  int64 // the start of the record before, the boundary before the next
	first bool  // nothing found yet: From is where the first record or damage starts
}

func newBlockCutter(out *fileScan, fi int32, blockSize int64, decompressed bool) *blockCutter {
	return &blockCutter{
		out: out, fi: fi, blockSize: blockSize, tail: int64(len(out.head.Tail)), decompressed: decompressed,
		cur: Block{File: fi, Offset: -1}, prev: -1, first: true,
	}
}

// add puts rec, the next record of the file, into the current block, or
// into a new one where the block is cut before it.
func (c *blockCutter) add(rec formats.Record) error {
	if c.first {
		c.out.from, c.first = rec.Offset, false
	}
	if c.cur.Records > 0 && (!c.whole && (Cuts(c.blockSize, c.prev, rec.Offset) || CapCuts(int64(c.cur.Records), c.cur.Len)) || c.cur.Records == math.MaxInt32) {
		c.flush()
	}
	c.prev = rec.Offset
	if c.cur.Offset < 0 {
		c.cur.Offset = rec.Offset
		if c.started != nil {
			c.started(rec.Offset)
		}
	}
	c.cur.Len += rec.Len
	c.cur.Records++
	c.out.records++
	if rec.Len+c.tail > math.MaxUint32 {
		at := "offset"
		if c.decompressed {
			at = "decompressed offset"
		}
		return fmt.Errorf("record of %d bytes at %s %d: records over 4 GiB are not supported", rec.Len, at, rec.Offset)
	}
	c.out.frames = append(c.out.frames, uint32(rec.Len))
	if c.sum != nil {
		rc, err := c.sum(rec, &c.cur.CRC)
		if err != nil {
			return err
		}
		if c.records {
			c.out.crcs = append(c.out.crcs, rc)
		}
	}
	c.out.to = rec.Offset + rec.Len
	return nil
}

// cut cuts the records format scans in r, from h.Start to h.End, into
// blocks (scan, then finish), and keeps the keys of a format whose records
// have them.
func (c *blockCutter) cut(format formats.Format, r io.ReaderAt, h formats.Head, o Options, file, path string, progress func(int64)) error {
	sc := format.Scan(r, h, h.Start, h.End)
	if err := c.scan(sc, o, file, path, progress); err != nil {
		return err
	}
	c.finish(h.End)
	if ks, ok := sc.(keyScanner); ok {
		c.out.keys = ks.Keys()
	}
	return nil
}

// scan cuts the records of sc, of the file at path (file as listed),
// into blocks, leaving damaged bytes out where o.SkipCorrupt allows, and
// calls progress with the offset scanned now and then.
func (c *blockCutter) scan(sc formats.RecordScanner, o Options, file, path string, progress func(int64)) error {
	name, from, to := path, "from", "to"
	if c.decompressed {
		name, from, to = path+" (decompressed)", "decompressed_from", "decompressed_to"
	}
	var last int64
	limit := maxRecords(o)
	if rl, ok := sc.(formats.RecordLimiter); ok && o.MaxRecord > 0 {
		rl.LimitRecord(o.MaxRecord)
	}
	for {
		for sc.Next() {
			if err := c.add(sc.Record()); err != nil {
				return fmt.Errorf("index: %s: %w", path, err)
			}
			if limit > 0 && o.counted.Add(1) > limit {
				return tooManyRecords(o, name, limit, sc.Record())
			}
			if sc.Offset()-last >= 4<<20 {
				last = sc.Offset()
				progress(last)
			}
		}
		err := sc.Err()
		if err == nil {
			return nil
		}
		if le := (*formats.LongRecordError)(nil); errors.As(err, &le) && o.MaxRecord > 0 {
			return recordTooLong(name, le)
		}
		var ce *formats.CorruptError
		rs, ok := sc.(formats.Resyncer)
		if !errors.As(err, &ce) || !ok {
			return fmt.Errorf("index: %s: %w", name, err)
		}
		if !o.SkipCorrupt {
			return fmt.Errorf("index: %s: %w (pass {skip-corrupt} to leave damaged records out)", name, err)
		}
		dfrom, dto, rerr := rs.Resync()
		if rerr != nil {
			return fmt.Errorf("index: %s: %w", name, rerr)
		}
		c.skip(dfrom, dto)
		c.out.damaged = append(c.out.damaged, Damage{File: file, From: dfrom, To: dto, Reason: ce.Reason})
		o.Logger.Warn("skipping damaged bytes", "file", path, from, dfrom, to, dto, "reason", ce.Reason)
	}
}

// skip records damaged bytes [from, to) skipped: a block never spans damage.
func (c *blockCutter) skip(from, to int64) {
	c.flush()
	if c.first {
		c.out.from, c.first = from, false
	}
	c.out.to = to
}

// finish ends the last block; end is Head.End.
func (c *blockCutter) finish(end int64) {
	c.flush()
	if n := len(c.out.frames); n > 0 && len(c.out.blocks) > 0 && c.out.to == end {
		// The file's last record is served with the tail (a text file's
		// missing line end).
		c.out.frames[n-1] += uint32(c.tail)
	}
}

func (c *blockCutter) flush() {
	if c.cur.Records > 0 {
		c.out.blocks = append(c.out.blocks, c.cur)
	}
	c.cur = Block{File: c.fi, Offset: -1}
}

// keyScanner is the scanner of a format whose records have keys that must
// be unique across files (WebDataset samples).
type keyScanner interface {
	Keys() iter.Seq[string]
}

// scanFile cuts file fi into blocks, reading it through rd. It calls
// progress with the bytes scanned so far now and then.
func (ix *Index) scanFile(fi int32, o Options, rd *aheadReader, progress func(int64)) (fileScan, error) {
	var out fileScan
	f := ix.Files[fi]
	path := ix.Path(fi)
	format := o.Format
	// A local file is opened without blocking, and only if it is a
	// regular file: a named pipe put in place of a listed file would hang
	// indexing.
	r, err := ix.Source().Open(f.Path, f.Version)
	if err != nil {
		return out, fmt.Errorf("index: %s: %w", path, err)
	}
	defer r.Close()
	if kind, err := ix.sniffCompression(fi, r, o); err != nil {
		return out, err
	} else if kind != 0 {
		return ix.scanCompressed(fi, o, r, kind, progress)
	}
	// Without direct reads the chunks are read through the page cache,
	// still one ahead.
	direct, _ := r.(source.DirectReader)
	if o.Buffered {
		direct = nil
	}
	rd.reset(r, direct, f.Size)
	defer rd.wait()
	if strings.HasSuffix(path, ".gz") || strings.HasSuffix(path, ".zz") {
		return out, fmt.Errorf("index: %s: %w", path, formats.ErrCompressed)
	}
	// The head is read from the file itself, in the few small reads it
	// takes: through rd, a format that reads the file's end first (the
	// text formats' tail) would fetch the last chunk and then leave the
	// scan of the first chunks to per-record reads as "behind" it.
	h, err := format.Head(r, f.Size)
	if err != nil {
		return out, fmt.Errorf("index: %s: %w", path, err)
	}
	out.head, out.from, out.to = h, h.Start, h.Start
	// Every block gets a CRC32C, and formats without checksums one per
	// record too, summed from the bytes the scanner has just read (still
	// in rd's chunks), so the file is read once.
	c := newBlockCutter(&out, fi, ix.BlockSize, false)
	c.records = !format.Checksummed()
	var chunk []byte // for bytes rd no longer holds; made when first needed
	c.sum = func(rec formats.Record, block *uint32) (uint32, error) {
		return sumRecord(rd, &chunk, rec, block, c.records)
	}
	if err := c.cut(format, rd, h, o, f.Path, path, progress); err != nil {
		return out, err
	}
	return out, nil
}

// Cuts reports whether a block ends at the record boundary at, the one
// after the boundary prev: the rule that cuts blocks, in both index modes,
// is that a block ends at the first record boundary at or after each
// multiple of the block size, counted in bytes from the start of its file.
// So at is a cut when a multiple lies in (prev, at]. A block is then at
// least the block size (but the first and last of a file) and at most the
// block size plus one record, and where its edges fall depends only on the
// bytes of the file near multiples of the block size: a probe that reads a
// little at each multiple finds the same cuts as a scan of every byte.
func Cuts(blockSize, prev, at int64) bool {
	return prev >= 0 && at/blockSize > prev/blockSize
}

// sumRecord adds the stored bytes of rec to the CRC32C of its block and,
// if record, returns their own CRC32C: in place in r's chunk when it holds
// them all, else read a piece at a time into *chunk.
func sumRecord(r *aheadReader, chunk *[]byte, rec formats.Record, block *uint32, record bool) (uint32, error) {
	if b, ok := r.view(rec.Offset, rec.Len); ok {
		// The bytes the scanner has just read, still in r's chunk.
		*block = formats.UpdateChecksum(*block, b)
		if !record {
			return 0, nil
		}
		return formats.UpdateChecksum(0, b), nil
	}
	return sumReadAt(r, chunk, rec, block, record, "offset")
}
