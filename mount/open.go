package mount

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/diskcache"
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/index"
	hint "github.com/corgifs/corgifs/option"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/sizing"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/source/local"
	"github.com/corgifs/corgifs/source/s3"
	"github.com/dustin/go-humanize"
)

// Dataset is an opened mount: its source, index and planner, and the
// share of MaxMemory each part of the process takes. Serve wires them
// into a file system.
type Dataset struct {
	// Config is the Config opened, with BlockSize, Buffer and Seed as
	// chosen.
	Config Config
	// Source is the S3 source of an s3:// Config.Source, nil for a
	// local one.
	Source *s3.Source
	Index  *index.Index
	// Cached: the index was loaded from its sidecar.
	Cached  bool
	Planner *shuffler.Planner
	// Sizes is package sizing's choice of BlockSize and Buffer.
	Sizes sizing.Choice
	// SeedChosen: no seed was given, Config.Seed was drawn at random.
	SeedChosen bool
	// SlabBudget is the loader's share of MaxMemory, HeapLimit the Go
	// heap's soft limit (MemorySplit, less the feedback vectors).
	SlabBudget, HeapLimit int64
	// Feedback is the store of a feedback strategy, nil for the others;
	// Coordinator its coordination with other nodes, nil without
	// Config.Coordinate.
	Feedback    *feedback.Store
	Coordinator *feedback.Coordinator

	blockSizeGiven, bufferGiven bool
	log                         *slog.Logger
	// proofs are the record-chain proofs of a probed index and the
	// record counts its loads learned, kept across mounts in the cache
	// directory (index/counts.go).
	proofs    *index.ProofLog
	diskCache *diskcache.Cache
}

// Open checks cfg, opens its source, chooses the block size and the
// buffer, builds or loads the index, divides MaxMemory and makes the
// planner (and the feedback store of a feedback strategy).
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Dataset, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	d := &Dataset{Config: cfg, log: log, blockSizeGiven: cfg.BlockSize != 0, bufferGiven: cfg.Buffer != (shuffler.BufferSize{})}
	c := &d.Config
	if !c.SeedGiven {
		var b [8]byte
		rand.Read(b[:])
		c.Seed, c.SeedGiven, d.SeedChosen = binary.LittleEndian.Uint64(b[:])>>1, true, true
	}
	LimitIndexHeap(c.MaxMemory)
	if err := d.index(ctx); err != nil {
		return nil, err
	}
	ix := d.Index
	log.Info("index ready", "source", ix.Root, "index", api.IndexMode(ix), "files", len(ix.Files), "records", RecordsText(ix),
		"bytes", humanize.IBytes(uint64(ix.Bytes)), "blocks", len(ix.Blocks), "cached", d.Cached)
	d.warnIndex()
	if err := d.plan(); err != nil {
		return nil, err
	}
	return d, nil
}

// warnIndex logs what is amiss with serving d's index in d's order: the
// bytes it left out, and a strategy that decompresses a compressed file
// record by record.
func (d *Dataset) warnIndex() {
	c, ix, log := &d.Config, d.Index, d.log
	if len(ix.Damaged) > 0 {
		log.Warn("damaged bytes left out of the index", "ranges", len(ix.Damaged))
	}
	if comp := ix.Compressed(); shuffler.ReadsRecords(c.Strategy) && comp.Files > 0 {
		log.Warn("this strategy reads records one at a time, and each record of a compressed file is decompressed from the access point before it (up to a block of output per record): slow; a block strategy (corgipile, block, local, pls) decompresses each block once",
			"strategy", c.Strategy, "compressed_files", comp.Files)
	}
}

// plan divides MaxMemory, checks that the largest block fits, opens the
// feedback store of a feedback strategy and makes the planner, for the
// index d holds.
func (d *Dataset) plan() error {
	c, ix, log := &d.Config, d.Index, d.log
	recordStrategy := shuffler.ReadsRecords(c.Strategy)
	d.SlabBudget, d.HeapLimit = MemorySplit(ix, c.MaxMemory, recordStrategy)
	// The planner wants room for the largest block with every strategy.
	need := max(blockcache.MinMemory(ix, c.LoaderOptions(d.Source, d.SlabBudget, log), recordStrategy), ix.MaxBlock())
	if d.SlabBudget < need {
		// The smallest workable value in bytes, by the loader's own measure:
		// a rounded size such as "65 KiB" could be just below the block.
		return optionErrorf("max-memory", "{max-memory} %s is smaller than the largest block needs (%s, counting the whole pages of direct reads): use at least {max-memory} %d",
			humanize.IBytes(uint64(c.MaxMemory)), humanize.IBytes(uint64(need)), MinMaxMemory(ix, need, recordStrategy))
	}
	if err := d.openFeedback(need); err != nil {
		return err
	}
	log.Debug("memory", "slabs", humanize.IBytes(uint64(d.SlabBudget)), "heap_limit", humanize.IBytes(uint64(d.HeapLimit)))
	var err error
	timeout := c.FeedbackTimeout
	if timeout == 0 {
		timeout = shuffler.DefaultFeedbackTimeout
	}
	d.Planner, err = shuffler.NewPlanner(ix, shuffler.Params{
		Strategy: c.Strategy, Seed: c.Seed, Buffer: c.Buffer, MaxMemory: d.SlabBudget, EqualParts: c.EqualParts,
		Partition: c.partition(), Exchange: c.exchange(),
		Feedback: d.feedbackSource(), FeedbackTimeout: timeout, BalanceRule: c.BalanceRule, Logger: log,
	})
	if err != nil {
		d.Close()
		return err
	}
	return nil
}

// OpenIndex opens the source of cfg, chooses the block size and the
// buffer that cfg leaves zero, and builds or loads the index, as Open
// does, for a caller that indexes without serving (corgifs index,
// validate): the index is the one a mount of cfg finds in the cache. It
// checks the index options only; the Dataset has no planner.
func OpenIndex(ctx context.Context, cfg Config, log *slog.Logger) (*Dataset, error) {
	return OpenIndexFrom(ctx, cfg, nil, log)
}

// OpenIndexFrom is OpenIndex over src, the S3 source of cfg.Source that
// the caller opened already (nil: OpenIndex opens it), so that it is not
// opened twice: validate opens it to copy the data files before it knows
// their format.
func OpenIndexFrom(ctx context.Context, cfg Config, src *s3.Source, log *slog.Logger) (*Dataset, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.CheckIndex(); err != nil {
		return nil, err
	}
	d := &Dataset{Config: cfg, Source: src, log: log, blockSizeGiven: cfg.BlockSize != 0, bufferGiven: cfg.Buffer != (shuffler.BufferSize{})}
	if err := d.index(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// index opens the source, chooses the sizes and builds or loads the
// index (Open logs it; OpenIndex's callers print their own summary).
func (d *Dataset) index(ctx context.Context) error {
	c, log := &d.Config, d.log
	var err error
	if d.Source == nil {
		if d.Source, err = OpenSource(ctx, *c, log); err != nil {
			return err
		}
	}
	d.Sizes = c.ChooseSizes(ctx, d.Source, shuffler.ReadsRecords(c.Strategy), log)
	c.BlockSize, c.Buffer = d.Sizes.BlockSize, d.Sizes.Buffer
	src, err := c.DataSource(d.Source)
	if err != nil {
		return err
	}
	o := c.IndexOptions(log)
	o.Progress = c.Progress
	ix, cached, err := index.Open(ctx, src, o)
	if err != nil {
		return err
	}
	d.Index, d.Cached = ix, cached
	if ix.Probed {
		// Files proven by an earlier mount are not walked again, and
		// the record counts it learned are known before planning: the
		// buffers are then served as they load (index/counts.go).
		if d.proofs, err = index.OpenProofLog(src, o); err != nil {
			log.Warn("could not read the record-chain proofs and record counts of earlier mounts; every probed file is walked again and its counts learned again", "err", err)
		}
		if n := d.proofs.FillCounts(ix, log); n > 0 {
			log.Info("probe index: record counts known from an earlier mount", "files", n, "of", len(ix.Files), "all_known", !ix.CountsUnknown)
		}
	}
	return nil
}

// OpenSource makes the S3 source of an s3:// cfg.Source, checking that
// the endpoint, the credentials and the bucket are good; nil for a local
// source.
func OpenSource(ctx context.Context, cfg Config, log *slog.Logger) (*s3.Source, error) {
	if !s3.IsURL(cfg.Source) {
		return nil, nil
	}
	sc := cfg.S3
	sc.Logger = log
	return s3.New(ctx, cfg.Source, sc)
}

// DataSource is where the files of c are, for the index and the loader:
// src, the S3 source of an s3:// c.Source (OpenSource), or else the local
// directory c.Source, resolved and checked to be a directory.
func (c *Config) DataSource(src *s3.Source) (source.Source, error) {
	if src != nil {
		return src, nil
	}
	return local.OpenDir(c.Source, c.FollowSymlinks, nil)
}

// IndexOptions are the options the index of c is built with.
func (c *Config) IndexOptions(log *slog.Logger) index.Options {
	o := index.Options{
		BlockSize: c.BlockSize, Include: c.Include, SkipCorrupt: c.SkipCorrupt, FollowSymlinks: c.FollowSymlinks,
		CacheDir: c.CacheDir, Logger: log, Buffered: !c.DirectIO,
		Compression: c.Compression,
		Probe:       c.ProbeMode() == index.IndexProbe,
		MaxTables:   index.TableBudget(c.MaxMemory),
		MaxRecord:   index.RecordBudget(c.MaxMemory),
		Format:      c.format(), FormatOptions: c.FormatOptions,
	}
	return o
}

// LoaderOptions are the options of a loader of c's blocks from src (nil:
// local files) within slabs bytes.
func (c *Config) LoaderOptions(src *s3.Source, slabs int64, log *slog.Logger) blockcache.LoaderOptions {
	o := blockcache.LoaderOptions{MaxMemory: slabs, Logger: log, Buffered: !c.DirectIO, Prefetch: c.Prefetch}
	if src != nil {
		// Every GET waits for the network: as many in flight as the
		// S3 concurrency allows.
		o.InFlight = c.S3.Concurrency
	}
	return o
}

// ChooseSizes chooses the block size and the buffer that c leaves zero by
// package sizing's rule, from the bytes a listing of the source finds,
// before anything is indexed: the index is built once, at the size it is
// served at. The rule's reason is logged and kept for config.json; its
// warning, when memory cannot hold enough blocks a buffer, is logged as
// one. c is not changed.
func (c *Config) ChooseSizes(ctx context.Context, src *s3.Source, recordStrategy bool, log *slog.Logger) sizing.Choice {
	var bytes int64
	ds, err := c.DataSource(src)
	if err == nil {
		bytes, err = index.SourceBytes(ctx, ds, c.IndexOptions(log))
	}
	if err != nil {
		// Indexing says what is wrong with the source, as it always did.
		log.Debug("could not list the source to choose the block size", "err", err)
	}
	in := sizing.Input{DatasetBytes: bytes, Parts: max(1, c.Parts), ObjectStore: src != nil,
		MaxMemory: c.MaxMemory, RecordStrategy: recordStrategy, BlockSize: c.BlockSize, Buffer: c.Buffer}
	ch := sizing.Choose(in)
	log.Info("block size and buffer", "block_size", humanize.IBytes(uint64(ch.BlockSize)), "buffer", ch.Buffer.String(),
		"source_bytes", humanize.IBytes(uint64(bytes)), "parts", in.Parts, "blocks_per_buffer", ch.BlocksPerBuffer, "why", ch.Reason)
	warnSizes(log, ch)
	return ch
}

// warnSizes logs the rule's warning of ch, if it has one: memory cannot
// hold enough blocks a buffer.
func warnSizes(log *slog.Logger, ch sizing.Choice) {
	if ch.Warning != "" {
		log.Warn("too few blocks per buffer for a good shuffle: "+ch.Warning,
			"block_size", humanize.IBytes(uint64(ch.BlockSize)), "blocks_per_buffer", ch.BlocksPerBuffer,
			"buffer", humanize.IBytes(uint64(ch.BufferBytes)), "expected_label_tv", strconv.FormatFloat(ch.ExpectedTV, 'f', 3, 64))
	}
}

// SizingInfo is config.json's account of the block size and the buffer.
// Its texts name options as the flags of corgifs mount, whose settings
// config.json records: {max-memory} as --max-memory.
func (d *Dataset) SizingInfo() *api.Sizing {
	c := d.Sizes
	return &api.Sizing{BlockSizeGiven: d.blockSizeGiven, BufferGiven: d.bufferGiven, BlocksPerBuffer: c.BlocksPerBuffer,
		WholePart: c.WholePart, ExpectedTV: c.ExpectedTV, Reason: hint.Render(c.Reason, "--"), Warning: hint.Render(c.Warning, "--")}
}

// openFeedback opens the feedback store of a feedback strategy, and
// takes its memory from the slabs' share of MaxMemory. Its directory in
// the cache directory is keyed by everything an order depends on, so
// that a remount with the same options finds its orders and any other
// finds none.
func (d *Dataset) openFeedback(need int64) error {
	c, ix, log := &d.Config, d.Index, d.log
	if !shuffler.IsFeedback(c.Strategy) {
		return nil
	}
	bound := feedback.Bound(ix.Records, c.FeedbackDim)
	if d.SlabBudget-bound < need {
		return optionErrorf("max-memory", "{max-memory} %s does not hold the feedback vectors (%d records × (4 × %d + 12) bytes = %s) beside the blocks (%s): raise {max-memory} by %s or lower {feedback-dim}",
			humanize.IBytes(uint64(c.MaxMemory)), ix.Records, c.FeedbackDim, humanize.IBytes(uint64(bound)),
			humanize.IBytes(uint64(need)), humanize.IBytes(uint64(bound+need-d.SlabBudget)))
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00%+v\x00", ix.Root, ix.BlockSize, ix.Format, ix.FormatOptions)
	for _, f := range ix.Files {
		v := f.Version
		if d.Source == nil {
			// A local file's version is its size and mtime, hashed
			// already: feedback saved before local files had versions
			// keeps its directory.
			v = ""
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%s\x00%d\x00", f.Path, f.Size, f.Mtime, v, f.Records)
	}
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00%v\x00%s\x00%v", c.Strategy, c.Seed, c.Buffer.String(), c.EqualParts, c.partition(), c.exchange())
	root := ix.Root
	if d.Source != nil {
		root = ""
	}
	dir := filepath.Join(c.CacheDir, "feedback-"+hex.EncodeToString(h.Sum(nil)[:12]))
	// Only corgipile-balance reads the latest vectors; grab and cdgrab
	// read an epoch's from disk, within the same bound.
	epochsOnly := c.Strategy == "grab" || c.Strategy == "cdgrab"
	st, err := feedback.Open(feedback.Options{Dir: dir, Root: root, MaxBytes: bound, Dim: c.FeedbackDim, Records: ix.Records, EpochsOnly: epochsOnly, Logger: log})
	if err != nil {
		return err
	}
	d.Feedback = st
	d.SlabBudget -= bound
	d.HeapLimit += bound
	log.Debug("feedback files taken", "dir", dir, "max_dim", c.FeedbackDim, "memory", humanize.IBytes(uint64(bound)))
	return d.openCoordinate()
}

// openCoordinate makes the feedback store coordinate with the other
// nodes of Config.Coordinate, when it is set.
func (d *Dataset) openCoordinate() error {
	c, log := &d.Config, d.log
	if c.Coordinate == "" || d.Feedback == nil {
		return nil
	}
	var sh feedback.Shared
	var err error
	if s3.IsURL(c.Coordinate) {
		// The S3 options and the AWS settings, as for an s3:// source.
		sc := c.S3
		sc.Logger = log
		sh, err = s3.NewShared(context.Background(), c.Coordinate, sc)
	} else {
		sh, err = feedback.OpenDirShared(c.Coordinate)
	}
	if err != nil {
		return &OptionError{Option: "coordinate", Reason: fmt.Sprintf("{coordinate} %s: %v", c.Coordinate, err), Err: err}
	}
	if d.Coordinator, err = d.Feedback.Coordinate(feedback.CoordinateOptions{Shared: sh, Rank: c.CoordinateRank}); err != nil {
		return err
	}
	role := "follower: serves the decisions of rank 0"
	if c.CoordinateRank == 0 {
		role = "order server: decides each epoch's orders for all nodes"
	}
	log.Info("coordinating feedback strategy epochs", "coordinate", sh.String(), "rank", c.CoordinateRank, "role", role)
	return nil
}

// feedbackSource is the store the planner reads, nil without one (a nil
// *feedback.Store in the interface would not be nil). A caller that only
// prints orders reads it through savedOrdersOnly.
func (d *Dataset) feedbackSource() shuffler.Feedback {
	if d.Feedback == nil {
		return nil
	}
	if d.Config.OrdersOnly {
		return savedOrdersOnly{d.Feedback}
	}
	if d.Coordinator != nil {
		return d.Coordinator
	}
	return d.Feedback
}

// savedOrdersOnly is the store as a command that prints orders sees it:
// the orders a mount saved, and nothing else. Its process receives no
// feedback, so it must neither wait for some nor save the random order
// it falls back to: a mount planning that epoch later would load it.
type savedOrdersOnly struct{ shuffler.Feedback }

func (savedOrdersOnly) Complete(epoch, parts int) bool { return false }
func (savedOrdersOnly) WaitEpoch(context.Context, int, int, time.Duration) bool {
	return false
}
func (savedOrdersOnly) SaveOrder(string, []int32) error { return nil }
func (savedOrdersOnly) CountFallback()                  {}

// Close releases what Open and Serve opened and the file system does
// not own: the disk cache and the feedback store. Call it once the
// server has ended.
func (d *Dataset) Close() error {
	var err error
	if d.diskCache != nil {
		err = d.diskCache.Close()
		d.diskCache = nil
	}
	if d.Feedback != nil {
		d.Feedback.Close()
		d.Feedback = nil
	}
	if d.proofs != nil {
		d.proofs.Close()
		d.proofs = nil
	}
	return err
}

// RecordsText is the record count of ix for people: a number, or that it
// is not known yet (a probed index learns it as blocks load).
func RecordsText(ix *index.Index) string {
	switch {
	case ix.CountsUnknown && ix.CountsKept() > 0:
		return fmt.Sprintf("not known yet (probed index: learned as blocks load; those of %d of %d files known from an earlier mount)", ix.CountsKept(), len(ix.Files))
	case ix.CountsUnknown:
		return "not known yet (probed index: learned as blocks load)"
	case ix.CountsKept() > 0:
		return strconv.FormatInt(ix.Records, 10) + " (probed index: counts known from an earlier mount)"
	}
	return strconv.FormatInt(ix.Records, 10)
}
