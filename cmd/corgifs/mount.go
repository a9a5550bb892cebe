package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/fs"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/source/s3"
	"github.com/dustin/go-humanize"
)

// info is served as .corgifs/config.json.
type info struct {
	Version    int    `json:"version"`
	Source     string `json:"source"`
	Strategy   string `json:"strategy"`
	Seed       uint64 `json:"seed"`
	BlockSize  int64  `json:"block_size"`
	Buffer     string `json:"buffer"`
	BufferPart int64  `json:"buffer_bytes_per_part"` // for --parts parts
	Capped     bool   `json:"buffer_capped_by_max_memory"`
	MaxMemory  int64  `json:"max_memory"`
	Epochs     int    `json:"epochs"`
	Parts      int    `json:"parts"`
	EqualParts bool   `json:"equal_parts"`
	// Records repeated by --equal-parts in epoch 0 over the --parts parts.
	Padded int `json:"equal_parts_padding_epoch0"`
	// --partition and --exchange, for local and pls only.
	Partition string   `json:"partition,omitempty"`
	Exchange  *float64 `json:"exchange,omitempty"`
	// BalanceRule and FeedbackTimeout are the feedback strategies'
	// (grab, cdgrab, corgipile-balance).
	BalanceRule     string      `json:"balance_rule,omitempty"`
	FeedbackTimeout float64     `json:"feedback_timeout_seconds,omitempty"`
	Dataset         datasetInfo `json:"dataset"`
	// The records' format and what a reader of the served parts needs:
	// the parts' extension, whether they start with a CSV header row,
	// the size of fixed records. Parts of fixed records have no file
	// header (header_bytes 0); the sources' is source_header_bytes.
	Format            string `json:"format"`
	Extension         string `json:"extension"`
	Header            *bool  `json:"header,omitempty"`
	RecordSize        int64  `json:"record_size,omitempty"`
	HeaderBytes       *int64 `json:"header_bytes,omitempty"`
	SourceHeaderBytes int64  `json:"source_header_bytes,omitempty"`

	// The default block size, when it was lowered for this dataset
	// (blocksize.go); block_size is the one used.
	BlockSizeFrom int64 `json:"block_size_lowered_from,omitempty"`
	// Prefetch is --prefetch: the buffers each part loads ahead.
	Prefetch int `json:"prefetch"`
}

type datasetInfo struct {
	Files int `json:"files"`
	// Records is null when a probed index does not know it (Unknown).
	Records    *int64           `json:"records"`
	Bytes      int64            `json:"bytes"`
	Blocks     int              `json:"blocks"`
	RecordSize map[string]int64 `json:"record_size"`
	Skipped    skippedInfo      `json:"skipped_corrupt"`
	// Index is how the index was built: full or probe. A probed index
	// lists in Unknown the figures it does not know (null above):
	// "records" (learned as blocks load, never known to the planner) and
	// "record_size", but for formats of fixed-size records.
	Index   string   `json:"index"`
	Unknown []string `json:"unknown,omitempty"`
}

type skippedInfo struct {
	Count  int                 `json:"count"`
	Bytes  int64               `json:"bytes"`
	Ranges []blockcache.Damage `json:"ranges"`
}

func newInfo(ix *blockcache.Index, pl *shuffler.Planner, epochs, parts int) info {
	p := pl.Params()
	target, capped := pl.BufferTarget(ix.Bytes / int64(parts))
	in := info{
		Version: 1, Source: ix.Root, Strategy: p.Strategy, Seed: p.Seed, BlockSize: ix.BlockSize,
		Buffer: p.Buffer.String(), BufferPart: target, Capped: capped, MaxMemory: p.MaxMemory,
		Epochs: epochs, Parts: parts, EqualParts: p.EqualParts,
		Dataset: datasetInfo{
			Files: len(ix.Files), Records: &ix.Records, Bytes: ix.Bytes, Blocks: len(ix.Blocks), Index: indexMode(ix),
			RecordSize: map[string]int64{"min": ix.RecordMin, "median": ix.RecordMedian, "max": ix.RecordMax},
			Skipped:    skippedInfo{Count: len(ix.Damaged), Ranges: ix.Damaged},
		},
	}
	if ix.Probed {
		if ix.CountsUnknown {
			in.Dataset.Records = nil
			in.Dataset.Unknown = append(in.Dataset.Unknown, "records")
		}
		if ix.RecordMax == 0 {
			in.Dataset.RecordSize = nil
			in.Dataset.Unknown = append(in.Dataset.Unknown, "record_size")
		}
	}
	if shuffler.IsFeedback(p.Strategy) {
		in.BalanceRule, in.FeedbackTimeout = p.BalanceRule.String(), p.FeedbackTimeout.Seconds()
	}
	if shuffler.Partitioned(p.Strategy) {
		in.Partition, in.Exchange = p.Partition, &p.Exchange
		if in.Partition == "" {
			in.Partition = shuffler.PartitionRandom
		}
	}
	f := ix.Fmt()
	in.Format, in.Extension = f.Name(), f.Ext()
	switch f := f.(type) {
	case formats.CSV:
		in.Header = &f.Header
	case formats.Fixed:
		in.RecordSize, in.HeaderBytes, in.SourceHeaderBytes = f.RecordSize, new(int64), f.HeaderBytes
	}
	if in.Dataset.Skipped.Ranges == nil {
		in.Dataset.Skipped.Ranges = []blockcache.Damage{}
	}
	for _, d := range ix.Damaged {
		in.Dataset.Skipped.Bytes += d.To - d.From
	}
	if p.EqualParts {
		for i := range parts {
			if plan, err := pl.Plan(0, i, parts); err == nil {
				in.Padded += plan.Padding
			}
		}
	}
	return in
}

func serveMount(args []string, stdout, stderr io.Writer, rd *readiness) error {
	fset := newFlagSet("mount", "SRC MNT", `Mounts SRC, a directory of record files (TFRecord, CSV, JSONL, LIBSVM, text
lines, WebDataset tar, .npy or fixed-size records; see --format) or s3://BUCKET/PREFIX,
read-only at MNT and serves it in the foreground until SIGINT, SIGTERM or SIGHUP
(--background: in a daemon, returning once the mount serves).
MNT/epoch-NNNN/part-IIIII-of-KKKKK.EXT holds part I of K of epoch N, a file of
the source's format with its extension (.tfrecord, .csv, .tar, .npy, ...): the K
parts of an epoch hold every record once (mrs: once in the epoch it scans it or
the next).`, stderr)
	var d datasetFlags
	d.register(fset, true)
	d.registerFormat(fset)
	d.registerPrefetch(fset)
	epochs := fset.Int("epochs", 100, "epoch directories listed in MNT (any epoch-NNNN resolves)")
	parts := fset.Int("parts", 1, "parts listed in each epoch directory (part-i-of-K with another K also resolves)")
	allowOther := fset.Bool("allow-other", false, "let other users read the mount (FUSE allow_other; needs user_allow_other in /etc/fuse.conf\nwhen not root; any local user can then read the dataset)")
	nonempty := fset.Bool("nonempty", false, "allow mounting over a non-empty directory (its files are hidden while mounted)")
	cpuprofile := fset.String("cpuprofile", "", "write a CPU profile to `file` until unmount")
	var dc diskCacheFlags
	dc.register(fset)
	var sys sysFlags
	sys.register(fset)
	pos, err := parse(fset, args, 2)
	if err != nil {
		return err
	}
	src, mnt := pos[0], pos[1]
	if *epochs < 0 {
		return fmt.Errorf("--epochs must be >= 0")
	}
	if err := checkParts(*parts); err != nil {
		return err
	}
	if err := checkMountpoint(src, mnt, *nonempty); err != nil {
		return err
	}
	if err := dc.check(mnt); err != nil {
		return err
	}
	if bg, err := sys.start(rd, args, d.cacheDir, mnt, stdout, &stderr); bg || err != nil {
		return err
	}
	// A reader of stderr that goes away (`corgifs mount … 2>&1 | head`, a
	// dead tee) must not kill the daemon and leave a dead mount: with SIGPIPE
	// ignored a failed log write is an error that slog drops.
	signal.Ignore(syscall.SIGPIPE)
	log := newLogger(stderr, d.debug)
	raiseOpenFileLimit(log)
	ctx, again, stop := notifyShutdown()
	defer stop()
	indexed := make(chan struct{})
	go exitIfStuck(ctx, again, indexed, log)

	ix, pl, seed, err := d.open(ctx, src, log, stderr)
	close(indexed)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s while indexing %s: nothing mounted: %w", signalOf(ctx), src, err)
		}
		return err
	}
	if ix, pl, err = d.fitBlocks(ctx, src, ix, pl, seed, *parts, log, stderr); err != nil {
		return err
	}
	if target, capped := pl.BufferTarget(ix.Bytes / int64(*parts)); capped {
		log.Info("buffer lowered so that a part's double buffer fits in --max-memory",
			"buffer", humanize.IBytes(uint64(target)), "max_memory", humanize.IBytes(uint64(d.maxMemory)))
	}
	// Without a soft limit the heap could double between collections.
	debug.SetMemoryLimit(d.heapLimit)
	lo := d.loaderOptions(log)
	lo.OnDamage = func(reason string) {
		if err := blockcache.MarkStale(ix.Root, d.indexOptions(log, nil), reason); err != nil {
			log.Warn("could not mark the index sidecar stale", "err", err)
			return
		}
		log.Warn("index sidecar marked stale: the next mount rebuilds the index")
	}
	lo.OnProbeWrong = func(file blockcache.File, reason string) {
		if err := blockcache.MarkProbeWrong(ix.Root, d.indexOptions(log, nil), file, reason); err != nil {
			log.Warn("could not record the file whose probe was wrong; the next mount probes it again", "file", file.Path, "err", err)
			return
		}
		log.Warn("index sidecar marked stale: the next mount rebuilds the index, scanning this file whole", "file", file.Path)
	}
	if ix.Probed {
		// Files proven by an earlier mount are not walked again.
		if lo.Proofs, err = blockcache.OpenProofLog(ix.Root, d.indexOptions(log, nil)); err != nil {
			log.Warn("could not read the record-chain proofs of earlier mounts; every probed file is walked again", "err", err)
		}
		defer lo.Proofs.Close()
	}
	if lo.DiskCache, err = dc.open(ix, pl, d.slabBudget, log); err != nil {
		return err
	}
	defer lo.DiskCache.Close()
	ld := blockcache.NewLoader(ix, lo)
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	in := newInfo(ix, pl, *epochs, *parts)
	in.BlockSizeFrom = d.blockSizeFrom
	in.Prefetch = ld.PrefetchDepth()
	srv, err := fs.Mount(context.Background(), fs.Config{
		Mountpoint: mnt, Planner: pl, Loader: ld, Epochs: *epochs, Parts: *parts,
		Info: in, AllowOther: *allowOther, Logger: log, Feedback: d.feedback,
		// Test hook: the end-to-end tests make a lookup panic on purpose.
		PanicOnLookup: os.Getenv("CORGIFS_TEST_PANIC_LOOKUP"),
		SourceStats:   d.sourceStats(),
	})
	if err != nil {
		return err
	}
	log.Info("mounted", "mountpoint", mnt, "strategy", d.strategy, "seed", seed, "parts", *parts,
		"buffer", d.buffer.v.String(), "block_size", humanize.IBytes(uint64(d.blockSize)),
		"max_memory", humanize.IBytes(uint64(d.maxMemory)))
	rd.ready(stdout, stderr, mnt, fmt.Sprintf("corgifs: mounted %s at %s (%s, %d parts, seed %d)", src, mnt, recordsPhrase(ix), *parts, seed))
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	select {
	case <-done:
		log.Info("unmounted from outside", "mountpoint", mnt)
		return nil
	case <-ctx.Done():
	}
	rd.stopping()
	pl.Close() // an open waiting for feedback gives up now, not at --feedback-timeout
	log.Info("signal received, unmounting", "signal", signalOf(ctx), "mountpoint", mnt)
	return shutdown(srv, mnt, done, again, log)
}

// checkParts refuses a K whose part names would not resolve.
func checkParts(parts int) error {
	if parts < 1 || parts > fs.MaxParts {
		return fmt.Errorf("--parts %d: want 1 to %d (%d parts at most: larger part names do not resolve)", parts, fs.MaxParts, fs.MaxParts)
	}
	return nil
}

// checkMountpoint refuses mount points that would surprise: inside the
// source, not a directory, not empty, or a dead FUSE mount.
func checkMountpoint(src, mnt string, nonempty bool) error {
	absSrc := ""
	if !s3.IsURL(src) {
		var err error
		if absSrc, err = realPath(src); err != nil {
			return err
		}
	}
	absMnt, err := realPath(mnt)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(absSrc, absMnt); err == nil && absSrc != "" && (rel == "." || !strings.HasPrefix(rel, "..")) {
		return fmt.Errorf("mount point %s is inside the source %s; choose a mount point outside it", mnt, src)
	}
	// A dead mount can still answer stat from the kernel's attribute cache:
	// listing it is what fails.
	check := func(err error) error {
		if errors.Is(err, syscall.ENOTCONN) {
			return fmt.Errorf("%s is a dead FUSE mount (its daemon was killed): run 'corgifs unmount %s' first", mnt, mnt)
		}
		return fmt.Errorf("mount point: %w", err)
	}
	if err := refuseLiveMount(mnt); err != nil {
		return err
	}
	fi, err := os.Stat(mnt)
	if err != nil {
		return check(err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("mount point %s is not a directory", mnt)
	}
	f, err := os.Open(mnt)
	if err != nil {
		return check(err)
	}
	names, err := f.Readdirnames(1)
	f.Close()
	if err != nil && err != io.EOF {
		return check(err)
	}
	if len(names) > 0 && !nonempty {
		return fmt.Errorf("mount point %s is not empty (pass --nonempty to mount over it anyway)", mnt)
	}
	return nil
}

func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r, nil
	}
	return abs, nil
}

func runUnmount(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("unmount", "MNT", `Unmounts a corgifs mount lazily: also one that is busy or whose daemon was
killed. Any other mount at MNT is refused unless --force.`, stderr)
	force := fset.Bool("force", false, "detach the mount at MNT even if it is not a corgifs mount")
	pos, err := parse(fset, args, 1)
	if err != nil {
		return err
	}
	mnt := pos[0]
	typ, err := fs.MountType(mnt)
	if err != nil {
		return notMountedError(mnt, err)
	}
	if typ != fs.MountTypeName && !*force {
		return fmt.Errorf("%s is a %s mount, not a corgifs one (%s); pass --force to detach it anyway", mnt, typ, fs.MountTypeName)
	}
	return fs.LazyUnmount(mnt)
}

func runIndex(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("index", "SRC", "Builds (or, if a source file changed, rebuilds) the index of SRC in --cache-dir and prints a summary.", stderr)
	var d datasetFlags
	d.register(fset, false)
	d.registerFormat(fset)
	pos, err := parse(fset, args, 1)
	if err != nil {
		return err
	}
	if err := d.checkCacheDir(); err != nil {
		return err
	}
	if err := d.resolveFormat(); err != nil {
		return err
	}
	if err := d.checkIndex(); err != nil {
		return err
	}
	log := newLogger(stderr, d.debug)
	raiseOpenFileLimit(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := d.openSource(ctx, pos[0], log); err != nil {
		return err
	}
	ix, cached, err := blockcache.Open(ctx, pos[0], d.indexOptions(log, stderr))
	if err != nil {
		return err
	}
	sizes := fmt.Sprintf("min %d, median %d, max %d bytes", ix.RecordMin, ix.RecordMedian, ix.RecordMax)
	if ix.Probed {
		sizes = "not known (probed index)"
	}
	fmt.Fprintf(stdout, "source      %s\nindex       %s\nformat      %s\nfiles       %d\nrecords     %s\nbytes       %s (%d)\nblocks      %d of about %s\nrecord size %s\nskipped     %d damaged ranges\nfrom cache  %v\n",
		ix.Root, indexMode(ix), ix.Format, len(ix.Files), recordsText(ix), humanize.IBytes(uint64(ix.Bytes)), ix.Bytes, len(ix.Blocks),
		humanize.IBytes(uint64(ix.BlockSize)), sizes, len(ix.Damaged), cached)
	if c := ix.Compressed(); c.Files > 0 {
		fmt.Fprintf(stdout, "compressed  %d files, %s stored; %d access points, %s (%.2f%% of the compressed bytes)\n",
			c.Files, humanize.IBytes(uint64(c.Stored)), c.Points, humanize.IBytes(uint64(c.PointBytes)), 100*float64(c.PointBytes)/float64(max(1, c.Stored)))
	}
	return nil
}
