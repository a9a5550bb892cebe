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
	"iter"
	"log/slog"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/source/local"
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
	Root      string // absolute path of the source directory
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

	// src is where the files are read from: Options.Source, or the
	// local directory Root (source/local).
	src source.Source

	recOnce  sync.Once
	recOff   []int64 // file offset of every record, from Frames
	blockRec []int64 // index of the first record of every block, and the total

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
	// FollowSymlinks follows symbolic links to files and directories when
	// listing the source, which may then lead outside it.
	FollowSymlinks bool
	CacheDir       string // where sidecars go; empty disables the cache
	// Source, if set, is where the files are (an S3 bucket): the root
	// passed to Build and Open is then ignored.
	Source source.Source
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

// listSource lists the files of a source whose base names match include.
func listSource(ctx context.Context, src source.Source, include []string) ([]File, error) {
	for _, p := range include {
		if _, err := filepath.Match(p, ""); err != nil {
			return nil, fmt.Errorf("bad --include pattern %q: %w", p, err)
		}
	}
	objs, err := src.List(ctx, func(name string) bool {
		return slices.ContainsFunc(include, func(p string) bool {
			ok, _ := filepath.Match(p, name)
			return ok
		})
	})
	if err != nil {
		return nil, err
	}
	files := make([]File, len(objs))
	for i, o := range objs {
		files[i] = File{Path: o.Path, Size: o.Size, Mtime: o.Mtime, Version: o.Version}
	}
	return files, nil
}

// rootOf returns the Root of an index of root built with o: the remote
// source's name, or the local directory resolved.
func rootOf(root string, o Options) (string, error) {
	if o.Source != nil {
		return o.Source.String(), nil
	}
	return local.Resolve(root)
}

// sourceOf returns where the files of an index of root built with o are
// read from: o.Source, or the local directory root.
func sourceOf(root string, o Options) source.Source {
	if o.Source != nil {
		return o.Source
	}
	// Without the logger, which only listing uses (selectFiles gives
	// it): an index holds no logger.
	return local.New(root, o.FollowSymlinks, nil)
}

// IsLocal reports whether src is a local directory (nil: an Index made by
// hand, of Root).
func IsLocal(src source.Source) bool {
	_, ok := src.(*local.Source)
	return src == nil || ok
}

// Source returns where the files are read from.
func (ix *Index) Source() source.Source {
	if ix.src != nil {
		return ix.src
	}
	return local.New(ix.Root, ix.FollowSymlinks, nil)
}

// Build scans every source file under root and cuts it into blocks.
func Build(ctx context.Context, root string, o Options) (*Index, error) {
	o.fill()
	root, err := rootOf(root, o)
	if err != nil {
		return nil, err
	}
	if o.Source == nil {
		if fi, err := os.Stat(root); err != nil {
			return nil, fmt.Errorf("source: %w", err)
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("source %s is not a directory", root)
		}
	}
	src := sourceOf(root, o)
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
			return nil, errors.New("--skip-corrupt needs a full index, which finds the damage: use --index full")
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

// selectFiles lists the files of the dataset under root and the format
// they are read in: o.Format, or the one their names say (formats.Detect,
// over the names of every format's files when o.Include is empty). Build
// and the check of a cached index select files the same way.
func selectFiles(ctx context.Context, src source.Source, o Options) ([]File, formats.Format, error) {
	root := src.String()
	include := o.Include
	switch {
	case len(include) > 0:
	case o.Format != nil:
		include = compressedInclude(o.Format.Include(), o)
	default:
		include = compressedInclude(formats.AllIncludes(), o)
	}
	if ls, ok := src.(*local.Source); ok {
		src = ls.WithLogger(o.Logger)
	}
	files, err := listSource(ctx, src, include)
	if err != nil {
		return nil, nil, err
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("no files matching %s under %s (set --include to choose other names, --format to say the format)", strings.Join(include, " or "), root)
	}
	f := o.Format
	if f == nil {
		names := make([]string, len(files))
		for i, fl := range files {
			names[i] = detectName(fl.Path, o)
		}
		f, err = formats.Detect(names, o.FormatOptions)
		switch {
		case errors.Is(err, formats.ErrNoFormat) && len(o.Include) > 0:
			// Files picked by --include under names of no format
			// (data.rec) are TFRecord, as before formats were detected:
			// a file that is not fails its frame check when indexed.
			f = formats.TFRecord{}
		case err != nil:
			return nil, nil, fmt.Errorf("source %s: %w", root, err)
		}
		if len(o.Include) == 0 {
			// Detect passed over names of no format and a README.txt
			// beside the data: keep the chosen format's files only.
			include = compressedInclude(f.Include(), o)
			files = slices.DeleteFunc(files, func(fl File) bool {
				return !slices.ContainsFunc(include, func(p string) bool {
					ok, _ := filepath.Match(p, path.Base(fl.Path))
					return ok
				})
			})
		}
	}
	return files, f, nil
}

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
			return fmt.Errorf("index: %s: %w (pass --skip-corrupt to leave damaged records out)", name, err)
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
	sc := format.Scan(rd, h, h.Start, h.End)
	if err := c.scan(sc, o, f.Path, path, progress); err != nil {
		return out, err
	}
	c.finish(h.End)
	if ks, ok := sc.(keyScanner); ok {
		out.keys = ks.Keys()
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
