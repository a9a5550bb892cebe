package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/sizing"
	"github.com/corgifs/corgifs/source/s3"
	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// sizeFlag is a byte size given as 8MiB, 512KB or 1048576.
type sizeFlag int64

func (s *sizeFlag) String() string {
	if *s == 0 { // not given: chosen (package sizing); help shows no default
		return ""
	}
	return humanize.IBytes(uint64(*s))
}
func (s *sizeFlag) Set(v string) error {
	n, err := humanize.ParseBytes(v)
	if err != nil || n == 0 || n > 1<<50 {
		return fmt.Errorf("want a size such as 8MiB")
	}
	*s = sizeFlag(n)
	return nil
}

// givenFlag is a flag that records that it was given.
type givenFlag struct {
	flag.Value
	given *bool
}

func (g givenFlag) String() string {
	if g.Value == nil { // the zero value flag.PrintDefaults makes
		return ""
	}
	return g.Value.String()
}

func (g givenFlag) Set(s string) error {
	*g.given = true
	return g.Value.Set(s)
}

// partitionFlag is --partition: how local and pls assign blocks to parts.
type partitionFlag string

func (p *partitionFlag) String() string { return string(*p) }
func (p *partitionFlag) Set(v string) error {
	if v != shuffler.PartitionRandom && v != shuffler.PartitionContiguous {
		return fmt.Errorf("want %s or %s", shuffler.PartitionRandom, shuffler.PartitionContiguous)
	}
	*p = partitionFlag(v)
	return nil
}

// fractionFlag is --exchange: a fraction Q with 0 ≤ Q ≤ 1.
type fractionFlag float64

func (f *fractionFlag) String() string { return strconv.FormatFloat(float64(*f), 'g', -1, 64) }
func (f *fractionFlag) Set(v string) error {
	q, err := strconv.ParseFloat(v, 64)
	if err != nil || !(q >= 0 && q <= 1) {
		return fmt.Errorf("want a fraction Q with 0 ≤ Q ≤ 1, such as 0.3")
	}
	*f = fractionFlag(q)
	return nil
}

type bufferFlag struct{ v shuffler.BufferSize }

func (b *bufferFlag) String() string {
	if b.v == (shuffler.BufferSize{}) { // not given: chosen (package sizing)
		return ""
	}
	return b.v.String()
}
func (b *bufferFlag) Set(s string) error {
	v, err := shuffler.ParseBufferSize(s)
	b.v = v
	return err
}

// listFlag is a comma separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	*l = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// datasetFlags are the flags that say which index and which order: shared by
// mount, order and index.
type datasetFlags struct {
	blockSize   sizeFlag
	include     listFlag
	includeSet  bool         // --include was given; else the format's patterns
	format      *formatFlags // nil: chosen from the file names
	follow      bool
	cacheDir    string
	cacheDirErr error // why there is no default --cache-dir
	skipCorrupt bool
	compression string
	index       string // --index: full, probe, or "" for the source's default (probeMode)
	// listsRecords is set by order, which lists every record of a part,
	// and validate, which trains with every strategy: their default index
	// is full.
	listsRecords bool
	directIO     bool
	strategy     string
	buffer       bufferFlag
	seed         string
	maxMemory    sizeFlag
	equalParts   bool
	// --partition and --exchange, of local and pls, and whether each
	// was given (they mean nothing to the other strategies).
	partition                     partitionFlag
	exchange                      fractionFlag
	partitionGiven, exchangeGiven bool
	debug                         bool
	s3                            s3Flags
	// source is SRC when it is s3://bucket/prefix, opened by openSource
	// for the commands that index without mounting (index, tune,
	// validate); mount and order get theirs from mount.Open.
	source *s3.Source

	// prefetch is --prefetch as LoaderOptions.Prefetch: 0 the default,
	// NoPrefetch none.
	prefetch int

	// blockSizeGiven and bufferGiven: --block-size and --buffer were on
	// the command line; the others are chosen by package sizing before
	// indexing (blocksize.go), which sizes says.
	blockSizeGiven, bufferGiven bool
	sizes                       *sizing.Choice
	// parts is the K the sizes are chosen for (--parts, validate's
	// --workers; 0 is 1).
	parts int

	// feedbackDim is --feedback-dim.
	feedbackDim int
	// balance are --balance-rule and --feedback-timeout (balance.go).
	balance balanceFlags
	// coordinate are --coordinate and --coordinate-rank (coordinate.go),
	// which only mount registers.
	coordinate coordinateFlags
}

func (d *datasetFlags) register(fs *flag.FlagSet, order bool) {
	d.include = listFlag(formats.TFRecord{}.Include())
	d.maxMemory = 1 << 30
	fs.Var(givenFlag{&d.blockSize, &d.blockSizeGiven}, "block-size", "`size` of a block, the unit of disk reads: a block ends at the first record boundary at\nor after each multiple of it in its file (so it is this size plus at most one record),\nor after 65,536 records averaging under 32 bytes (--index full)\n(default: chosen from the dataset's size before indexing, so that a buffer holds at least\n256 blocks: a power of two from 4 KiB (1 MiB for s3://) to 8 MiB; see .corgifs/config.json)")
	fs.Var(includeVar{d}, "include", "comma separated `globs` of source file names to index (default: the format's,\nsuch as *.tfrecord,*.tfrecords or *.csv)")
	fs.BoolVar(&d.follow, "follow-symlinks", false, "follow symbolic links to files and directories inside SRC (they may lead\noutside it; a directory reached twice, as in a loop, is listed once)")
	d.registerCacheDir(fs)
	d.s3.register(fs)
	fs.StringVar(&d.index, "index", "", "how SRC is indexed: `full` reads every byte; probe reads a small window at each\nmultiple of --block-size to find the record boundary there (a mount of any size in\nseconds; record counts are learned as blocks load, so --strategy full, window, once\nand --equal-parts need full; a CSV file whose quoting a probe cannot settle is read\nwhole). Default: probe for s3://\nsources (unless --strategy or --equal-parts needs full), full for local ones")
	fs.BoolVar(&d.skipCorrupt, "skip-corrupt", false, "leave damaged records out of the index instead of failing (they are listed in .corgifs/config.json)")
	fs.StringVar(&d.compression, "compression", index.CompressionAuto, "how source files are compressed: auto (by the name's .gz, .zst, .zlib or .zz,\nthen by magic bytes: gzip, zstd, and zlib for TFRecord files), none, gzip, zlib or zstd;\ncompressed files are served decompressed, from access points, with no decompressed copy")
	fs.BoolVar(&d.directIO, "direct-io", true, "read source data that is not in the page cache with O_DIRECT: at the disk's speed,\nfor little CPU, without filling the page cache (falls back to the page cache\nwhere the file system refuses; blocks under 1 MiB are always read through it)")
	fs.BoolVar(&d.debug, "debug", false, "log debug messages")
	if !order {
		return
	}
	fs.StringVar(&d.strategy, "strategy", "corgipile", "order `strategy`, one of:"+strategyHelp())
	fs.Var(givenFlag{&d.buffer, &d.bufferGiven}, "buffer", "shuffle buffer: a `size` (64MiB) or a percentage of a part (5%);\nlowered so that two buffers fit in --max-memory (default: 100% when all --parts fit,\ntwo buffers each, in half of --max-memory: an exact shuffle of each part; else a\n1/K share of that room, at least 256 blocks of the smallest block; 5% for window and mrs)")
	fs.StringVar(&d.seed, "seed", "", "`seed` of all random choices (default: chosen at random and logged)")
	fs.Var(&d.maxMemory, "max-memory", "memory `budget` for loaded blocks, shared by all open parts")
	d.partition, d.exchange = shuffler.PartitionRandom, 0.3
	fs.Var(givenFlag{&d.partition, &d.partitionGiven}, "partition", "`how` --strategy local, pls, grab and cdgrab assign blocks to parts in epoch 0 (each part then\nkeeps its set): random (a seeded assignment, balanced by bytes) or contiguous\n(part i gets a contiguous run of the source: the worst case on clustered data)")
	fs.Var(givenFlag{&d.exchange, &d.exchangeGiven}, "exchange", "fraction `Q` (0 ≤ Q ≤ 1) of its blocks each part of --strategy pls sends to the\nother parts before every epoch, receiving as many; 0 is local, 1 moves every block")
	d.registerFeedback(fs)
	d.balance.register(fs)
	fs.BoolVar(&d.equalParts, "equal-parts", false, "make all K parts of an epoch hold the same number of records (for lock-step\ndistributed training such as DDP): the shorter parts end with repeats of small records\n(no larger than the average record; their own first, then the next parts'), drawn from the\nseed; the count is in .corgifs/config.json")
}

// resolveFormat checks --compression and the format flags, if registered.
func (d *datasetFlags) resolveFormat() error {
	if err := index.CheckCompression(d.compression); err != nil {
		return err
	}
	if d.format == nil {
		return nil
	}
	return d.format.resolve()
}

// registerFormat adds the flags of the records' format (--format and its
// options) to fs.
func (d *datasetFlags) registerFormat(fs *flag.FlagSet) {
	d.format = &formatFlags{}
	d.format.register(fs)
}

// registerPrefetch adds --prefetch, of the commands that read parts.
func (d *datasetFlags) registerPrefetch(fs *flag.FlagSet) {
	fs.Func("prefetch", fmt.Sprintf("`buffers` each part loads ahead of the one being read, across the end of an epoch\n"+
		"(0: none, a buffer is loaded when the reader reaches it; prefetches only use memory\n"+
		"that is free within --max-memory) (default %d)", blockcache.DefaultPrefetch), func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 1000 {
			return fmt.Errorf("want a number of buffers from 0 to 1000")
		}
		d.prefetch = n
		if n == 0 {
			d.prefetch = blockcache.NoPrefetch
		}
		return nil
	})
}

// prefetchFlag returns the --prefetch value that gives the same depth.
func (d *datasetFlags) prefetchFlag() string {
	switch {
	case d.prefetch == 0:
		return fmt.Sprint(blockcache.DefaultPrefetch)
	case d.prefetch < 0:
		return "0"
	}
	return fmt.Sprint(d.prefetch)
}

// parseSeed returns the seed, choosing one when none was given.
func (d *datasetFlags) parseSeed() (seed uint64, chosen bool, err error) {
	if d.seed == "" {
		var b [8]byte
		rand.Read(b[:])
		return binary.LittleEndian.Uint64(b[:]) >> 1, true, nil
	}
	seed, err = strconv.ParseUint(d.seed, 0, 64)
	if err != nil {
		return 0, false, fmt.Errorf("--seed %q: want an unsigned integer", d.seed)
	}
	return seed, false, nil
}

// open checks the flags, then opens the dataset at src (mount.Open):
// its source, index and planner.
func (d *datasetFlags) open(ctx context.Context, src string, log *slog.Logger, stderr io.Writer) (*mount.Dataset, error) {
	c, err := d.mountConfig(src)
	if err != nil {
		return nil, err
	}
	c.Progress = progressFunc(stderr, "indexing")
	return d.openConfig(ctx, c, log)
}

// openConfig opens the dataset of c, checked by mountConfig.
func (d *datasetFlags) openConfig(ctx context.Context, c mount.Config, log *slog.Logger) (*mount.Dataset, error) {
	ds, err := mount.Open(ctx, c, log)
	if err != nil {
		return nil, flagError(err)
	}
	if ds.SeedChosen {
		log.Info("no --seed given; chose one (pass it to reproduce this order)", "seed", ds.Config.Seed)
	}
	d.source = ds.Source
	return ds, nil
}

// progressFunc returns a progress callback that draws a bar on w when w is a
// terminal, and nil otherwise (nothing is printed on a pipe).
func progressFunc(w io.Writer, what string) func(done, total int64) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	var bar *progressbar.ProgressBar
	return func(done, total int64) {
		if bar == nil {
			bar = progressbar.NewOptions64(total,
				progressbar.OptionSetWriter(w),
				progressbar.OptionSetDescription(what),
				progressbar.OptionShowBytes(true),
				progressbar.OptionShowTotalBytes(true),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionThrottle(100_000_000),
				progressbar.OptionClearOnFinish(),
			)
		}
		bar.Set64(done)
		if done >= total {
			bar.Finish()
		}
	}
}

// newFlagSet returns a flag set whose usage lists every flag with its default.
func newFlagSet(name, args, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Bool("version", false, "print the version of corgifs and exit") // answered in run, before parsing
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: corgifs %s [flags] %s\n\n%s\n\nFlags:\n", name, args, about)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags that may come before or after the positional arguments.
func parse(fs *flag.FlagSet, args []string, want int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return nil, err
			}
			return nil, errUsage
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != want {
		fmt.Fprintf(fs.Output(), "want %d argument(s), got %d\n", want, len(pos))
		fs.Usage()
		return nil, errUsage
	}
	return pos, nil
}

func strategyHelp() string {
	var b strings.Builder
	w := 0
	for _, n := range shuffler.Strategies() {
		w = max(w, len(n))
	}
	for _, n := range shuffler.Strategies() {
		fmt.Fprintf(&b, "\n  %-*s %s", w, n, shuffler.Description(n))
	}
	return b.String()
}

// recordsPhrase is "N records", or that they are not known yet.
func recordsPhrase(ix *index.Index) string {
	if ix.CountsUnknown {
		return "records not known yet (probed index)"
	}
	return strconv.FormatInt(ix.Records, 10) + " records"
}
