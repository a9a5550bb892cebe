// Package index is the physical map of a dataset: its source files cut
// into blocks at record boundaries (full or probed, with the compressed
// files' access points), saved in a sidecar in the cache directory so the
// next mount is instant, and the record of probe outcomes (ProofLog, the
// probe-whole list). The loader that reads the blocks is in blockcache.
package index

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/zaccess"
)

// File is one source file as it was when indexed.
type File struct {
	Path  string // relative to the index root, slash separated
	Size  int64
	Mtime int64 // modification time, Unix nanoseconds
	// Version is the source's version of the file, which every read is
	// pinned to: the ETag of an object; for a local file its size, Mtime,
	// device, inode and change time (source/local/version.go).
	Version string
	Records int64
	// Head is what the format read from the file's header: where its
	// records lie, and the Tail its last record is served with.
	Head formats.Head
	// From and To delimit the bytes the scan covered with records and
	// damaged ranges: a file header before From (a CSV header row, a .npy
	// header) and a tar shard's end-of-archive marker after To are never
	// served.
	From, To int64
	// Access is set for a compressed file: its access points, and the
	// length of its decompressed stream, which its offsets are in (see
	// compressed.go).
	Access *zaccess.Index `json:",omitempty"`
}

// Block is a byte range of one source file that starts and ends at record
// boundaries and holds only intact records.
type Block struct {
	File    int32
	Records int32
	Offset  int64
	Len     int64 // stored bytes; see Index.BlockBytes for the served ones
	// CRC is the CRC32C of the block's stored bytes (of the decompressed
	// stream, for a compressed file), in every full index: the loader
	// checks it for formats whose records carry no checksum of their own
	// (formats.Format.Checksummed false), and the disk cache checks every
	// entry it serves against it, for every format. 0 in a probed index,
	// which never reads every byte.
	CRC uint32
}

// Damage is a byte range left out of the index because it did not hold
// intact records (only with Options.SkipCorrupt).
type Damage struct {
	File   string `json:"file"`
	From   int64  `json:"from"`
	To     int64  `json:"to"`
	Reason string `json:"reason"`
}

// Index lists the source files of a dataset and the blocks they are cut into.
// It never changes once built.
type Index struct {
	Root      string // the source's String: its directory's absolute path, or its URL
	BlockSize int64
	// FollowSymlinks is set when the files were listed following symbolic
	// links: the loader then opens them by path, else only beneath Root.
	FollowSymlinks bool
	Files          []File
	Blocks         []Block
	Damaged        []Damage
	// Frames holds the served length of every indexed record, in block
	// order, for strategies that read records one at a time: its stored
	// length, plus the file's Head.Tail for the last record of a file.
	Frames []uint32
	// RecordCRCs holds the CRC32C of every record's stored bytes, in block
	// order, for formats without checksums of their own: strategies that
	// read records one at a time (full, window, once, and the padding of
	// --equal-parts) load single records, which the block CRC cannot
	// check. 4 bytes a record, like Frames. nil for checksummed formats.
	RecordCRCs []uint32

	// Format is the name of the records' format and FormatOptions its
	// settings (formats.Lookup); Head is the dataset's head, which the
	// prologue of every served part is built from (the first file's with
	// a Key; formats.Agree checked the others against it).
	Format        string
	FormatOptions formats.Options
	Head          formats.Head
	format        formats.Format

	// src is where the files are read from, as Build or Open was given
	// it; nil in an Index made by hand.
	src source.Source

	recOnce  sync.Once
	recOff   []int64 // file offset of every record, from Frames
	blockRec []int64 // index of the first record of every block, and the total

	fileOnce  sync.Once
	fileStart []int32 // the first block of every file, and the block count (FileBlocks)
	// countsKept is how many files' record counts FillCounts took from
	// an earlier mount, keptRecords the records they hold (not in the
	// sidecar: gob skips them).
	countsKept  int
	keptRecords int64

	// Probed is set for an index built by probing (see probe.go): it has
	// no Frames nor RecordCRCs, and its blocks no CRC.
	Probed bool
	// CountsUnknown is set when blocks of a probed index have Records 0:
	// their counts are learned as they are loaded.
	CountsUnknown bool

	Records int64 // intact records in all blocks (those known, if CountsUnknown)
	Bytes   int64 // bytes of all blocks: what one epoch serves
	// Sizes of record payloads, in bytes.
	RecordMin, RecordMedian, RecordMax int64
}

// Path returns the absolute path of source file i, or for a remote source
// its URL (s3://bucket/prefix/path).
func (ix *Index) Path(i int32) string {
	if !IsLocal(ix.src) {
		return ix.Root + "/" + ix.Files[i].Path
	}
	return filepath.Join(ix.Root, filepath.FromSlash(ix.Files[i].Path))
}

// Fmt returns the format of the index's records (TFRecord for an index
// made by hand without one).
func (ix *Index) Fmt() formats.Format {
	if ix.format == nil {
		return formats.TFRecord{}
	}
	return ix.format
}

// setFormat looks the format of a decoded index up by its name.
func (ix *Index) setFormat() error {
	if ix.Format == "" {
		ix.format = formats.TFRecord{}
		return nil
	}
	f, err := formats.Lookup(ix.Format, ix.FormatOptions)
	ix.format = f
	return err
}

// Tail returns the bytes served after block b's stored bytes: its file's
// Head.Tail when b ends the file's records, else nothing.
func (ix *Index) Tail(b Block) []byte {
	f := &ix.Files[b.File]
	if len(f.Head.Tail) > 0 && b.Offset+b.Len == f.Head.End {
		return f.Head.Tail
	}
	return nil
}

// BlockBytes returns the bytes block b serves: its stored bytes and its
// tail.
func (ix *Index) BlockBytes(b int32) int64 {
	blk := ix.Blocks[b]
	return blk.Len + int64(len(ix.Tail(blk)))
}

// MaxBlock returns the length of the largest block.
func (ix *Index) MaxBlock() int64 {
	var m int64
	for _, b := range ix.Blocks {
		m = max(m, b.Len)
	}
	return m
}

// Options control how an index is built and where it is cached.
type Options struct {
	BlockSize int64    // blocks end at the first record boundary at or after each multiple of it (Cuts)
	Include   []string // glob patterns matched against base names; default: the format's
	// Format is the records' format; nil chooses it from the names of the
	// files (formats.Detect), made with FormatOptions.
	Format        formats.Format
	FormatOptions formats.Options
	SkipCorrupt   bool // leave damaged records out instead of failing
	// FollowSymlinks says that the source follows symbolic links to files
	// and directories when listing, which may then lead outside it (the
	// caller opened it so: local.New's follow); it keys the sidecar.
	FollowSymlinks bool
	CacheDir       string // where sidecars go; empty disables the cache
	// Buffered reads the files through the page cache. By default they
	// are read with O_DIRECT where the file system allows it.
	Buffered bool
	Logger   *slog.Logger
	// Compression says how files are compressed: one of Compressions;
	// empty is CompressionAuto.
	Compression string
	// Progress, if set, is called as bytes are scanned.
	Progress func(done, total int64)
	// Probe indexes by probing near every multiple of BlockSize instead
	// of reading every byte (--index probe; see probe.go).
	Probe bool
	// MaxTables, if positive, is the most memory a full index's
	// per-record tables (Frames, and RecordCRCs for formats without
	// checksums: 4 or 8 bytes a record) may take. The scan refuses the
	// record past it, so that a file of many tiny records (a
	// decompression bomb of empty records) is refused before memory
	// grows, not after (see recordcap.go).
	MaxTables int64
	// MaxRecord, if positive, is the longest record a scan that must
	// hold a whole record to find its end (a text line) holds: a longer
	// one is refused once that much is read, not once the format's own
	// limit (256 MiB) is (RecordBudget).
	MaxRecord int64

	// counted counts the records scanned by every file of one Build
	// (set by Build; shared by the copies of o its scanners get).
	counted *atomic.Int64
}

func (o *Options) fill() {
	if o.Format != nil {
		o.FormatOptions = formats.OptionsOf(o.Format)
	}
	if o.BlockSize <= 0 {
		o.BlockSize = 8 << 20
	}
	if o.Compression == CompressionAuto {
		o.Compression = "" // the default, as in sidecars written before it
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// IsLocal reports whether src is a local directory (source.Local; nil:
// an Index made by hand, of Root).
func IsLocal(src source.Source) bool {
	_, ok := src.(source.Local)
	return src == nil || ok
}

// Source returns where the files are read from: the source Build or Open
// was given, nil for an Index made by hand.
func (ix *Index) Source() source.Source { return ix.src }

// Build scans every file of src and cuts it into blocks. The caller opens
// src (for a local directory, local.OpenDir with o.FollowSymlinks).
func Build(ctx context.Context, src source.Source, o Options) (*Index, error) {
	o.fill()
	root := src.String()
	files, f, err := selectFiles(ctx, src, o)
	if err != nil {
		return nil, err
	}
	ix := &Index{Root: root, src: src, BlockSize: o.BlockSize, Files: files, FollowSymlinks: o.FollowSymlinks,
		Format: f.Name(), FormatOptions: formats.OptionsOf(f), format: f}
	o.Format = f
	o.counted = new(atomic.Int64)
	var total int64
	for _, f := range files {
		total += f.Size
	}
	scans := make([]fileScan, len(files))
	errs := make([]error, len(files))
	var done atomic.Int64
	scanned := false // every file scanned whole by the probe index's fallback
	if _, ok := f.(formats.Prober); o.Probe && !ok {
		o.Logger.Info("probe index: the format has no probe, so every file is scanned whole", "format", f.Name())
		for i := range files {
			o.Logger.Debug("probe index: scanning the whole file", "file", ix.Path(int32(i)))
		}
		o.Probe = false
	}
	if o.Probe && ix.CompressedByName(o) {
		o.Logger.Info("probe index: compressed files are indexed in full (their access points need a decompressing pass)")
		o.Probe = false
	}
	if o.Probe {
		if o.SkipCorrupt {
			return nil, errors.New("{skip-corrupt} needs a full index, which finds the damage: use {index} full")
		}
		ix.Probed = true
		var whole []bool
		scans, whole, err = ix.buildProbed(ctx, o, func(n int64) {
			if o.Progress != nil {
				o.Progress(min(done.Add(n), total), total)
			}
		})
		if errors.Is(err, formats.ErrCompressed) && (o.Compression == "" || o.Compression == CompressionAuto) {
			// A compressed file its name did not give away (TensorFlow's
			// GZIP .tfrecord): only a decompressing pass finds its access
			// points.
			o.Logger.Info("probe index: a file is compressed; indexing in full (access points need a decompressing pass)", "err", err)
			ix.Probed, o.Probe = false, false
			scans, errs = make([]fileScan, len(files)), make([]error, len(files))
			done.Store(0)
		} else if err != nil {
			return nil, err
		}
		if o.Probe && !slices.Contains(whole, false) {
			// Every file was scanned whole (CSV without quotes to settle
			// a probe): that is a full index, and keeps what one knows.
			o.Logger.Info("probe index: every file was scanned whole; the index is a full one")
			ix.Probed, o.Probe, scanned = false, false, true
		} else if o.Probe {
			for i := range scans {
				if whole[i] {
					stripScan(&scans[i])
				}
			}
		}
	}
	switch {
	case o.Probe:
		ix.CountsUnknown = !countsKnown(scans)
	case !scanned:
		ix.scanAll(ctx, o, scans, errs, total, nil)
	}
	return ix.assemble(f, scans, errs, total, o)
}

// scanAll scans every file into scans, a few at once; or, when only is
// not nil, the files it lists (a probed index's files scanned whole).
func (ix *Index) scanAll(ctx context.Context, o Options, scans []fileScan, errs []error, total int64, only []int) {
	// A few files at once: the scan checks every CRC, which takes about
	// as long as reading the bytes directly does, so one file at a time
	// leaves either the disk or the CPU idle.
	files := ix.Files
	if only == nil {
		only = make([]int, len(files))
		for i := range only {
			only[i] = i
		}
	}
	var next, done atomic.Int64
	var failed atomic.Bool
	var progressMu sync.Mutex
	var reported int64
	var wg sync.WaitGroup
	for range min(len(only), max(2, runtime.GOMAXPROCS(0)), 8) {
		wg.Go(func() {
			var rd aheadReader
			defer rd.free()
			for k := int(next.Add(1) - 1); k < len(only) && !failed.Load(); k = int(next.Add(1) - 1) {
				i := only[k]
				var last int64
				progress := func(n int64) {
					d := done.Add(n - last)
					last = n
					// Progress is called by one worker at a time, and
					// never with fewer bytes than before.
					progressMu.Lock()
					defer progressMu.Unlock()
					if o.Progress != nil && d > reported {
						reported = d
						o.Progress(d, total)
					}
				}
				if errs[i] = ctx.Err(); errs[i] == nil {
					scans[i], errs[i] = ix.scanFile(int32(i), o, &rd, progress)
				}
				if errs[i] != nil {
					failed.Store(true)
					continue
				}
				progress(files[i].Size)
			}
		})
	}
	wg.Wait()
}

// assemble puts the scans of the files together into the index.
func (ix *Index) assemble(f formats.Format, scans []fileScan, errs []error, total int64, o Options) (*Index, error) {
	head := -1 // the first file with a Key
	for i, sc := range scans {
		if errs[i] != nil {
			return nil, errs[i]
		}
		fl := &ix.Files[i]
		fl.Records, fl.Head, fl.From, fl.To, fl.Access = sc.records, sc.head, sc.from, sc.to, sc.access
		if head < 0 && sc.head.Key != nil {
			head = i
		}
		if head >= 0 {
			if err := formats.Agree(f, ix.Path(int32(head)), ix.Files[head].Head, ix.Path(int32(i)), sc.head); err != nil {
				return nil, fmt.Errorf("index: %w", err)
			}
		}
		ix.Blocks = append(ix.Blocks, sc.blocks...)
		ix.Damaged = append(ix.Damaged, sc.damaged...)
		for _, b := range sc.blocks {
			ix.Records += int64(b.Records)
			ix.Bytes += b.Len + int64(len(ix.Tail(b)))
		}
	}
	if head >= 0 {
		ix.Head = ix.Files[head].Head
	}
	// The per-record tables are joined in place of the files' own, which
	// are dropped as they are copied: a dataset of many records never
	// holds them twice over (see recordcap.go).
	ix.Frames = joinTables(scans, func(sc *fileScan) *[]uint32 { return &sc.frames })
	ix.RecordCRCs = joinTables(scans, func(sc *fileScan) *[]uint32 { return &sc.crcs })
	if _, ok := f.(formats.WDS); ok && !ix.Probed {
		// A WebDataset key in two shards (a sample split across them)
		// would be merged by a reader when the two samples meet in a
		// part. In file order, so that the error names the same two shards
		// every time.
		ks := formats.NewKeySet()
		for i, sc := range scans {
			if err := ks.Add(ix.Path(int32(i)), sc.keys); err != nil {
				return nil, fmt.Errorf("index: %w", err)
			}
		}
	}
	if o.Progress != nil {
		o.Progress(total, total)
	}
	if sz, ok := f.(formats.Sizer); ok && ix.Probed && ix.Records > 0 {
		// Records of one length: a probe knows their size too.
		ix.RecordMin = sz.RecordLen(ix.Head)
		ix.RecordMedian, ix.RecordMax = ix.RecordMin, ix.RecordMin
	}
	if len(ix.Frames) > 0 {
		lo, median, hi := frameStats(ix.Frames)
		ix.RecordMin = formats.PayloadLen(f, int64(lo))
		ix.RecordMedian = formats.PayloadLen(f, int64(median))
		ix.RecordMax = formats.PayloadLen(f, int64(hi))
	}
	return ix, nil
}

// records computes the record tables on first use: they are derived from
// Frames, so the sidecar does not need to store them.
func (ix *Index) records() {
	ix.recOnce.Do(func() {
		ix.recOff = make([]int64, len(ix.Frames))
		ix.blockRec = make([]int64, len(ix.Blocks)+1)
		r := 0
		for b, blk := range ix.Blocks {
			ix.blockRec[b] = int64(r)
			off := blk.Offset
			for range blk.Records {
				ix.recOff[r] = off
				off += int64(ix.Frames[r])
				r++
			}
		}
		ix.blockRec[len(ix.Blocks)] = int64(r)
	})
}

// Record returns the file, offset and frame length of record r, counting
// records in block order.
func (ix *Index) Record(r int32) (file int32, off, n int64) {
	ix.records()
	b, found := slices.BinarySearch(ix.blockRec, int64(r))
	if !found {
		b--
	}
	return ix.Blocks[b].File, ix.recOff[r], int64(ix.Frames[r])
}

// BlockRecords returns the index of the first record of block b.
func (ix *Index) BlockRecords(b int32) int64 {
	ix.records()
	return ix.blockRec[b]
}
