package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/sizing"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/tune"
	"github.com/dustin/go-humanize"
)

const tuneAbout = `Tells which --block-size and --buffer SRC needs, with the evidence.

Storage: reads SRC's files at random 4 KiB-aligned offsets with O_DIRECT,
--in-flight reads at a time, at each block size from --min-block to
--max-block, and recommends the smallest block within 10% of the fastest
(the CorgiPile paper's advice) among those of at least 1 MiB, which a mount
reads with O_DIRECT too (smaller ones go through the page cache). The source must be cold (not in the page
cache) for the figures to be the storage's; tune says when they are not.

An s3://bucket/prefix SRC (with the --s3-* flags of mount) is probed with
ranged GETs at random offsets of its objects, --s3-concurrency at a time
(fewer for large blocks: their buffers are bounded to 256 MiB), at 64 KiB,
1 MiB, 8 MiB and 32 MiB (or --min-block to --max-block), and then at the
recommended size with 1/16 and 1/4 as many GETs in flight: the mount line
gets the smallest block within 10% of the fastest and the fewest GETs in
flight within 10% of the most.

Data (with --label): cuts SRC into blocks as a mount would (the index, at
the recommended or the given --block-size) and measures how clustered the
source order is: the mean total variation distance between each block's
label distribution and the global one, and the CorgiPile paper's block
heterogeneity h_D of a softmax regression at its initial (zero) weights,
with --features as the input vector (only the label's bias gradient
without it). h_D is about 1 for a random order and up to the records per
block when every block is as unlike the rest as one record is.

Buffer (with --label): two rules, shown side by side per buffer size.
  - The label mix, which chooses the buffer of the mount line: the smallest
    buffer, of at least 16 blocks, whose expected label TV distance to all
    records is at most --mix-tv, for n blocks drawn at random without
    replacement from the N blocks as a buffer is (a seeded estimate over the
    blocks' label histograms). The default 0.1 is from Fashion-MNIST sorted
    by label, in 32 KiB blocks (VALIDATION.md): it asks for 128 blocks
    (--buffer 8.4%), between the 2% (TV 0.21) and 10% (TV 0.094) buffers with
    which corgipile matched a full shuffle's final accuracy within a point.
    It looks at the label only.
  - The paper's bound (1-alpha)*h_D <= 1, alpha = (n-1)/(N-1): the buffer's
    mean gradient is then no noisier than that of as many records drawn
    uniformly, for any clustering h_D sees. It is a conservative guarantee:
    on that Fashion-MNIST (h_D 28) it asks for 1529 of 1584 blocks, a
    buffer of 100%. --mix-tv 0 makes it choose the mount line's buffer.
--buffer is a share of a part (--parts), which a mount cuts into buffers
of equal size; the percent printed is one whose buffers hold the blocks
asked for.

It also shows the label mix of the buffer a mount chooses itself at that block
size when given no --buffer (package sizing: a whole part when it fits in
memory). Last, it prints a 'corgifs mount' line with the block size, and with
--buffer only when the mount's own buffer mixes less than the rule asks.`

func runTune(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("tune", "SRC", tuneAbout, stderr)
	var d datasetFlags
	d.register(fset, mount.CmdTune)
	label := fset.String("label", "", "int64 `feature` holding the class of a record; without it, only the storage is measured")
	features := fset.String("features", "", "`feature` holding the input vector (a float_list, or a bytes_list of one uint8 string\nsuch as image pixels, scaled to [0, 1]); without it h_D is the label's alone")
	probe := fset.Bool("probe", true, "measure the storage (false: skip it)")
	probeBytes := sizeFlag(256 << 20)
	fset.Var(&probeBytes, "probe-bytes", "`bytes` read per block size at most (a smaller dataset is read once per size)")
	probeTime := fset.Duration("probe-time", 10*time.Second, "time spent per block size at most")
	inFlight := fset.Int("in-flight", 8, "reads in flight at once during the probe")
	rounds := fset.Int("rounds", 3, "passes over all block sizes, each reading a share of --probe-bytes; a size's\nfigure is the median of its passes (steadier on a shared machine)")
	minBlock, maxBlock := sizeFlag(64<<10), sizeFlag(32<<20)
	fset.Var(&minBlock, "min-block", "smallest block `size` probed")
	fset.Var(&maxBlock, "max-block", "largest block `size` probed (sizes double from --min-block)")
	dataBytes := sizeFlag(1 << 30)
	fset.Var(&dataBytes, "data-bytes", "`bytes` of records read for the data analysis at most; a larger dataset is\nanalysed on a random sample of its blocks")
	seed := fset.Uint64("seed", 1, "`seed` of the probe's offsets, the block sample and the random-order baseline")
	mixTV := fset.Float64("mix-tv", 0.1, "the label mix rule: the mount line's buffer is the smallest (of at least 16 blocks)\nwhose expected label TV distance to all records is at most this; 0: the buffer\nof the paper's bound (1-alpha)*h_D <= 1 instead")
	asJSON := fset.Bool("json", false, "print one JSON object instead of the tables")
	pos, err := d.parse(fset, args, 1)
	if err != nil {
		return err
	}
	parts := d.c.Parts
	blockGiven := false
	fset.Visit(func(f *flag.Flag) { blockGiven = blockGiven || f.Name == "block-size" })
	if *features != "" && *label == "" {
		return fmt.Errorf("--features needs --label: h_D is the gradient of a classifier")
	}
	if !*probe && *label == "" {
		return fmt.Errorf("nothing to measure: --probe=false and no --label")
	}
	if minBlock > maxBlock {
		return fmt.Errorf("--min-block %s is larger than --max-block %s", minBlock.String(), maxBlock.String())
	}
	if parts < 1 {
		return fmt.Errorf("--parts %d: want at least 1", parts)
	}
	if *mixTV < 0 || *mixTV >= 1 {
		return fmt.Errorf("--mix-tv %g: want at least 0 (0: use the bound) and under 1 (a TV distance is at most 1)", *mixTV)
	}
	if *inFlight < 1 || *rounds < 1 {
		return fmt.Errorf("--in-flight %d, --rounds %d: want at least 1", *inFlight, *rounds)
	}
	src := pos[0]
	log := newLogger(stderr, d.debug)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var out tuneOutput
	out.Source = src
	// An s3:// SRC is checked (endpoint, credentials, bucket) before
	// anything is measured, as mount does.
	if err := d.openSource(ctx, src, log); err != nil {
		return err
	}
	switch {
	case *probe && d.source != nil:
		given := map[string]bool{}
		fset.Visit(func(f *flag.Flag) { given[f.Name] = true })
		o := tune.ProbeOptions{Bytes: int64(probeBytes), Time: *probeTime, InFlight: d.c.S3.Concurrency, Rounds: *rounds, Seed: *seed,
			Progress: progressFunc(stderr, "probing")}
		if given["in-flight"] {
			o.InFlight = *inFlight
		}
		if given["min-block"] || given["max-block"] {
			for n := int64(minBlock); n <= int64(maxBlock); n *= 2 {
				o.Sizes = append(o.Sizes, n)
			}
		}
		rep, err := probeRemote(ctx, d.source, d.include(), o)
		if err != nil {
			return err
		}
		out.Storage = &rep
	case *probe:
		files, err := probeFiles(src, d.include(), d.c.FollowSymlinks)
		if err != nil {
			return err
		}
		// A mount reads blocks under MinDirectBlock through the page cache,
		// whose cold reads cost CPU and fall behind the device, so the
		// block it is told to use is one it reads directly.
		var floor int64
		if d.c.DirectIO {
			floor = index.MinDirectBlock
		}
		var sizes []int64
		for n := int64(minBlock); n <= int64(maxBlock); n *= 2 {
			sizes = append(sizes, n)
		}
		rep, err := tune.Probe(ctx, files, tune.ProbeOptions{
			Sizes: sizes, Bytes: int64(probeBytes), Time: *probeTime, InFlight: *inFlight, Rounds: *rounds, Seed: *seed, Floor: floor,
			Progress: progressFunc(stderr, "probing"),
		})
		if err != nil {
			return err
		}
		out.Storage = &rep
	}
	block := d.c.BlockSize
	if !blockGiven {
		// Without a recommendation from the storage, the block the mount
		// would choose (package sizing).
		block = d.chooseSizes(ctx, src, false, log).BlockSize
	}
	switch {
	case blockGiven:
	case out.Storage != nil && out.Storage.Recommended > 0:
		block = out.Storage.Recommended
	}
	out.BlockSize = block

	if *label != "" {
		if err := d.checkCacheDir(); err != nil {
			return err
		}
		d.c.BlockSize = block
		ix, err := d.openIndex(ctx, src, log, stderr)
		if err != nil {
			return err
		}
		do := tune.DataOptions{MaxBytes: int64(dataBytes), Seed: *seed, Progress: progressFunc(stderr, "reading")}
		if d.source != nil {
			do.Source = d.source
		}
		rep, err := tune.Data(ctx, ix, tune.TFExample{Label: *label, Features: *features}, do)
		if err != nil {
			return err
		}
		out.Data = &rep
		out.Label, out.Features = *label, *features
		if out.Buffer, err = bufferAdvice(rep, ix, parts, *mixTV); err != nil {
			return err
		}
		out.Defaults = defaultsAdvice(&d, rep, ix, block, parts, *mixTV, out.Buffer)
	}
	buf := out.Buffer
	if out.Defaults != nil && out.Defaults.Enough {
		buf = nil // the mount's own buffer mixes enough: no --buffer
	}
	out.Mount = mountLine(src, block, parts, buf)
	if out.Storage != nil && out.Storage.Remote {
		out.Mount += fmt.Sprintf(" --s3-concurrency %d", out.Storage.Concurrency)
	}
	if d.source != nil && d.c.S3.Endpoint != "" {
		out.Mount += " --s3-endpoint " + shellQuote(d.c.S3.Endpoint)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printTune(stdout, out)
	return nil
}

// tuneOutput is what tune prints, and its --json form.
type tuneOutput struct {
	Source    string              `json:"source"`
	Storage   *tune.StorageReport `json:"storage,omitempty"`
	BlockSize int64               `json:"block_size"`
	Label     string              `json:"label,omitempty"`
	Features  string              `json:"features,omitempty"`
	Data      *tune.DataReport    `json:"data,omitempty"`
	Buffer    *bufferChoice       `json:"buffer,omitempty"`
	Defaults  *defaultsMix        `json:"defaults,omitempty"`
	Mount     string              `json:"mount"`
}

// defaultsMix is the label mix of the buffer a mount chooses when given
// the mount line's --block-size and no --buffer (package sizing).
type defaultsMix struct {
	Buffer    string `json:"buffer"`
	Blocks    int    `json:"blocks"` // blocks of a buffer
	WholePart bool   `json:"buffer_is_whole_part"`
	// MixTV is the expected label TV of such a buffer, from the measured
	// label mix; Enough says it meets --mix-tv (or the bound's blocks,
	// with --mix-tv 0), or that a buffer is a whole part: the mount line
	// then has no --buffer.
	MixTV  float64 `json:"mix_tv"`
	Enough bool    `json:"enough"`
	Reason string  `json:"reason"`
}

// defaultsAdvice measures the mix of the buffer the mount would choose for
// blocks of block bytes.
func defaultsAdvice(d *datasetFlags, rep tune.DataReport, ix *index.Index, block int64, parts int, maxTV float64, advice *bufferChoice) *defaultsMix {
	c := sizing.Choose(sizing.Input{DatasetBytes: ix.Bytes, Parts: parts, ObjectStore: d.source != nil,
		MaxMemory: d.c.MaxMemory, BlockSize: block})
	blocks := len(ix.Blocks) / max(1, parts)
	if !c.WholePart && len(ix.Blocks) > 0 {
		blocks = int(c.BufferBytes / max(1, ix.Bytes/int64(len(ix.Blocks))))
	}
	m := &defaultsMix{Buffer: c.Buffer.String(), Blocks: blocks, WholePart: c.WholePart, Reason: c.Reason}
	if rep.Mix != nil {
		m.MixTV = rep.Mix.ExpectedTV(blocks)
	}
	switch {
	case c.WholePart:
		m.Enough = true
	case maxTV > 0 && rep.Mix != nil:
		m.Enough = m.MixTV <= maxTV
	case advice != nil:
		m.Enough = blocks >= advice.Blocks
	}
	return m
}

// bufferChoice is the buffer of the mount line, what each rule asks
// for, and both rules' figures at a few common buffer sizes.
type bufferChoice struct {
	// Criterion is the rule that chose the mount line's buffer: "mix"
	// (the label mix, --mix-tv) or "bound" ((1-alpha)*h_D <= 1).
	Criterion string `json:"criterion"`
	Blocks    int    `json:"blocks"` // n: blocks per buffer the criterion asks for
	Of        int    `json:"of"`     // N: blocks of the dataset
	Part      int    `json:"part"`   // blocks of a part: N/K
	// Percent is the --buffer of the mount line, in percent of a part:
	// one whose balanced buffers hold at least Blocks blocks, and at
	// least minBufferBlocks (see bufferPercent).
	Percent float64 `json:"percent"`
	Bytes   int64   `json:"bytes"`  // of a buffer of Percent, with --parts 1
	Bound   float64 `json:"bound"`  // (1-alpha)*h_D at Blocks
	MixTV   float64 `json:"mix_tv"` // expected buffer label TV at Blocks
	// MaxTV is --mix-tv, MixBlocks the fewest blocks (at least
	// minBufferBlocks) whose expected buffer TV is at most MaxTV.
	MaxTV     float64 `json:"mix_tv_max"`
	MixBlocks int     `json:"mix_blocks"`
	// BoundBlocks is the fewest blocks meeting the bound, BoundPercent
	// the --buffer that asks for them.
	BoundBlocks  int          `json:"bound_blocks"`
	BoundPercent float64      `json:"bound_percent"`
	At           []boundPoint `json:"at"`
}

// minBufferBlocks is the fewest blocks a buffer should hold whatever the
// rules say: fewer hardly shuffle, and a mount lowers the block size (or
// warns) below it.
const minBufferBlocks = 16

type boundPoint struct {
	Percent float64 `json:"percent"`
	Blocks  int     `json:"blocks"`
	Bound   float64 `json:"bound"`
	MixTV   float64 `json:"mix_tv"`
}

// bufferAdvice applies the label mix rule (maxTV > 0) or the bound (maxTV
// 0) to the dataset of ix served in parts parts.
func bufferAdvice(rep tune.DataReport, ix *index.Index, parts int, maxTV float64) (*bufferChoice, error) {
	all := rep.BlocksInAll
	// A buffer is drawn from a part's blocks. A part of corgipile's is a
	// random share of them, so n of its blocks mix the labels as n blocks
	// of the dataset do: the mix rule asks for n blocks whatever the parts.
	// The bound's alpha is about drawing without replacement from what a
	// buffer is drawn from: a part.
	part := max(1, all/max(parts, 1))
	c := &bufferChoice{Of: all, Part: part, MaxTV: maxTV, BoundBlocks: tune.NeededBlocks(rep.HD, part)}
	var err error
	if c.BoundPercent, err = bufferPercent(ix, parts, c.BoundBlocks); err != nil {
		return nil, err
	}
	c.Criterion, c.Blocks, c.Percent = "bound", c.BoundBlocks, c.BoundPercent
	if maxTV > 0 && rep.Mix != nil {
		c.MixBlocks = rep.Mix.NeededBlocks(maxTV, minBufferBlocks)
		c.Criterion, c.Blocks = "mix", c.MixBlocks
		if c.Percent, err = bufferPercent(ix, parts, c.MixBlocks); err != nil {
			return nil, err
		}
	}
	c.Bound = tune.BoundAt(rep.HD, c.Blocks, part)
	if rep.Mix != nil {
		c.MixTV = rep.Mix.ExpectedTV(c.Blocks)
	}
	c.Bytes = int64(float64(ix.Bytes) / float64(max(parts, 1)) * c.Percent / 100)
	for _, p := range []float64{1, 2, 5, 10, 25, 50, 100} {
		k, _, err := plannedBuffer(ix, parts, p)
		if err != nil {
			return nil, err
		}
		bp := boundPoint{Percent: p, Blocks: k, Bound: tune.BoundAt(rep.HD, k, part)}
		if rep.Mix != nil {
			bp.MixTV = rep.Mix.ExpectedTV(k)
		}
		c.At = append(c.At, bp)
	}
	return c, nil
}

// bufferPercent returns the smallest --buffer, in tenths of a percent of a
// part, whose buffers all hold at least n blocks (and at least
// minBufferBlocks) in the plan a mount makes. A mount cuts a part into
// buffers of about equal bytes and closes one early when the next block
// would pass the target, so p% can hold fewer than p% of the blocks: 10%
// of 1584 blocks of 32 KiB gives 11 buffers of 144.
func bufferPercent(ix *index.Index, parts, n int) (float64, error) {
	part := max(1, len(ix.Blocks)/max(parts, 1))
	n = max(n, min(minBufferBlocks, part))
	for t := max(1, int(math.Floor(1000*float64(n)/float64(part)))); t < 1000; t++ {
		p := float64(t) / 10
		_, fewest, err := plannedBuffer(ix, parts, p)
		if err != nil {
			return 0, err
		}
		if fewest >= n {
			return p, nil
		}
	}
	return 100, nil
}

// plannedBuffer returns the mean and the fewest blocks of the buffers of
// part 0 of epoch 0 with --buffer p%, as a corgipile mount plans them.
func plannedBuffer(ix *index.Index, parts int, p float64) (mean, fewest int, err error) {
	pl, err := shuffler.NewPlanner(ix, shuffler.Params{Strategy: "corgipile", Seed: 1,
		Buffer: shuffler.BufferSize{Percent: p}, MaxMemory: math.MaxInt64 / 4})
	if err != nil {
		return 0, 0, fmt.Errorf("plan the buffers of --buffer %g%%: %w", p, err)
	}
	plan, err := pl.Plan(0, 0, parts)
	if err != nil {
		return 0, 0, fmt.Errorf("plan the buffers of --buffer %g%%: %w", p, err)
	}
	if len(plan.Buffers) == 0 {
		return 0, 0, nil
	}
	fewest = math.MaxInt
	var total int
	for _, b := range plan.Buffers {
		total += len(b.Blocks)
		fewest = min(fewest, len(b.Blocks))
	}
	return int(math.Round(float64(total) / float64(len(plan.Buffers)))), fewest, nil
}

func mountLine(src string, block int64, parts int, buf *bufferChoice) string {
	s := fmt.Sprintf("corgifs mount %s MNT --block-size %s", shellQuote(src), flagSize(block))
	if parts > 1 {
		s += fmt.Sprintf(" --parts %d", parts)
	}
	if buf != nil {
		s += fmt.Sprintf(" --buffer %g%%", buf.Percent)
		// Two buffers (the one served and the next) must fit in --max-memory.
		if need := 2 * buf.Bytes; need > 1<<30 {
			s += " --max-memory " + flagSize(need+need/8)
		}
	}
	return s
}

// flagSize writes n as a size flag takes it: 32KiB, 4MiB, or, when not a
// whole number of them, rounded up to a whole MiB.
func flagSize(n int64) string {
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n < 1<<20 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	case n < 1<<20:
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%dMiB", (n+1<<20-1)>>20)
}

func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '+' || r == ':' || r == '@' ||
			r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func printTune(w io.Writer, o tuneOutput) {
	if s := o.Storage; s != nil && s.Remote {
		printRemote(w, o.Source, s)
	} else if s != nil {
		how := "direct I/O (O_DIRECT)"
		if !s.Direct {
			how = "through the page cache (the file system refused O_DIRECT)"
		}
		fmt.Fprintf(w, "Storage: random reads of %s, %s\n", o.Source, how)
		switch {
		case s.Cached < 0:
			fmt.Fprintf(w, "  (could not tell how much of the data is in the page cache)\n")
		case s.Warm:
			fmt.Fprintf(w, "  WARM: %.0f%% of the data was in the page cache, so these are the page cache's\n  figures, not the storage's (drop the cache, or run on data not read lately)\n", 100*s.Cached)
		case s.Cached > 0.05:
			fmt.Fprintf(w, "  %.0f%% of the data is in the page cache; direct reads bypass it, so the figures are\n  the storage's, but a mount serves those blocks from memory\n", 100*s.Cached)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "  block size\tMB/s\treads\t\n")
		for _, t := range s.Sizes {
			if t.Skipped != "" {
				fmt.Fprintf(tw, "  %s\t-\t-\t  %s\n", humanize.IBytes(uint64(t.BlockSize)), t.Skipped)
				continue
			}
			note := ""
			if t.BlockSize == s.Smallest {
				note = "  smallest within 10% of the best"
			}
			if t.BlockSize == s.Best {
				note += "  (best)"
			}
			if t.BlockSize == s.Recommended {
				note += "  <- recommended"
			}
			fmt.Fprintf(tw, "  %s\t%.0f\t%d\t%s\n", humanize.IBytes(uint64(t.BlockSize)), t.MBps, t.Reads, note)
		}
		tw.Flush()
		if s.Recommended != s.Smallest {
			fmt.Fprintf(w, "  recommended %s: a mount reads blocks under %s through the page cache, where cold reads\n  cost CPU and fall behind the device (--direct-io=false removes this floor)\n",
				humanize.IBytes(uint64(s.Recommended)), humanize.IBytes(index.MinDirectBlock))
		}
		fmt.Fprintln(w)
	}
	if dr := o.Data; dr != nil {
		sample := ""
		if dr.Blocks < dr.BlocksInAll {
			sample = fmt.Sprintf(" (a random sample of %d)", dr.Blocks)
		}
		feat := "none (h_D of the bias gradient, from the label alone)"
		if o.Features != "" {
			feat = fmt.Sprintf("%q, %d values", o.Features, dr.Features)
		}
		fmt.Fprintf(w, "Data: %d blocks of %s%s, %.1f records each, %d records, %d classes\n  label %q, features %s\n",
			dr.BlocksInAll, humanize.IBytes(uint64(o.BlockSize)), sample, dr.BlockRecords, dr.Records, dr.Classes, o.Label, feat)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  label TV distance, block vs all\t%.3f\t(a random order of these blocks: %.3f; every block one label: %.3f)\n", dr.LabelTV, dr.LabelTVShuf, dr.LabelTVMax)
		fmt.Fprintf(tw, "  block heterogeneity h_D\t%.2f\t(a random order: about 1; at most about %.0f, the records per block)\n", dr.HD, dr.BlockRecords)
		tw.Flush()
		if b := o.Buffer; b != nil {
			printBuffer(w, b)
		}
		if m := o.Defaults; m != nil {
			verdict := "more is needed: the mount line gives --buffer"
			if m.Enough {
				verdict = "enough: the mount line leaves --buffer to the mount"
			}
			what := fmt.Sprintf("%d blocks", m.Blocks)
			if m.WholePart {
				what = fmt.Sprintf("a whole part (%d blocks), an exact shuffle of it", m.Blocks)
			}
			fmt.Fprintf(w, "  the mount's default buffer (%s): %s, expected buffer label TV %.3f; %s\n", m.Buffer, what, m.MixTV, verdict)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%s\n", o.Mount)
}

func printBuffer(w io.Writer, b *bufferChoice) {
	fmt.Fprintf(w, "\n  buffer   blocks   (1-alpha)*h_D   buffer label TV\n")
	for _, p := range b.At {
		bound, mix := "", ""
		if p.Bound <= 1 {
			bound = " <= 1"
		}
		if b.MaxTV > 0 && p.MixTV <= b.MaxTV {
			mix = fmt.Sprintf(" <= %g", b.MaxTV)
		}
		fmt.Fprintf(w, "  %5g%%  %7d   %12.2f%-5s   %7.3f%s\n", p.Percent, p.Blocks, p.Bound, bound, p.MixTV, mix)
	}
	of := fmt.Sprintf("%d blocks", b.Part)
	if b.Part < b.Of {
		of = fmt.Sprintf("%d blocks of a part", b.Part)
	}
	if b.MaxTV > 0 {
		fmt.Fprintf(w, "  %-42s %7d of %s per buffer, --buffer %g%%\n",
			fmt.Sprintf("label mix, buffer TV <= %g (--mix-tv):", b.MaxTV), b.MixBlocks, of, b.Percent)
	}
	fmt.Fprintf(w, "  %-42s %7d of %s per buffer, --buffer %g%%\n", "bound, (1-alpha)*h_D <= 1, the guarantee:", b.BoundBlocks, of, b.BoundPercent)
	if b.Criterion == "bound" && b.BoundBlocks < minBufferBlocks && b.Part > b.BoundBlocks {
		fmt.Fprintf(w, "  (the mount line asks for %d blocks at least: fewer hardly shuffle)\n", min(minBufferBlocks, b.Part))
	}
	rule := fmt.Sprintf("the label mix (expected buffer TV %.3f <= %g)", b.MixTV, b.MaxTV)
	if b.Criterion == "bound" {
		rule = fmt.Sprintf("the bound ((1-alpha)*h_D %.2f <= 1; --mix-tv 0)", b.Bound)
	}
	fmt.Fprintf(w, "  buffer asked for: --buffer %g%%, chosen by %s:\n    %s a buffer, %s of memory for two\n",
		b.Percent, rule, humanize.IBytes(uint64(b.Bytes)), humanize.IBytes(2*uint64(b.Bytes)))
	if b.Criterion == "mix" && b.BoundPercent > b.Percent {
		fmt.Fprintf(w, "  The bound asks for more (--buffer %g%%): the labels of a buffer are mixed, but the\n"+
			"  blocks' gradients vary more than a random order's (h_D). The bound is sufficient,\n"+
			"  not necessary; corgifs validate checks a model on the smaller buffer.\n", b.BoundPercent)
	}
	if b.Criterion == "bound" && b.Percent > 50 {
		fmt.Fprintf(w, "  The bound asks for more than half of the data in a buffer: the source order is\n"+
			"  clustered at this block size, and only a shuffle of nearly everything is sure to\n"+
			"  be as good as a random order. The bound is sufficient, not necessary; smaller\n"+
			"  buffers often do as well in practice (corgifs validate checks a model on them).\n")
	}
}

// probeRemote lists the objects of src that a mount would index and
// measures ranged GETs of them.
func probeRemote(ctx context.Context, src source.Source, include []string, o tune.ProbeOptions) (tune.StorageReport, error) {
	if len(include) == 0 {
		include = formats.TFRecord{}.Include()
	}
	objs, err := src.List(ctx, func(base string) bool {
		return slices.ContainsFunc(include, func(p string) bool { ok, _ := path.Match(p, base); return ok })
	})
	if err != nil {
		return tune.StorageReport{}, err
	}
	var files []tune.RemoteFile
	for _, ob := range objs {
		if ob.Size == 0 {
			continue
		}
		f, err := src.Open(ob.Path, ob.Version)
		if err != nil {
			return tune.StorageReport{}, err
		}
		defer f.Close()
		files = append(files, tune.RemoteFile{Name: f.Name(), Size: ob.Size, R: f})
	}
	if len(files) == 0 {
		return tune.StorageReport{}, fmt.Errorf("no objects under %s match --include %s", src, strings.Join(include, ","))
	}
	return tune.ProbeRemote(ctx, files, o)
}

// printRemote prints the probe of an object store: GET throughput per
// block size, then per requests in flight at the recommended size.
func printRemote(w io.Writer, src string, s *tune.StorageReport) {
	fmt.Fprintf(w, "Storage: ranged GETs at random offsets of the objects of %s\n", src)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  block size\tin flight\tMB/s\tGETs\t\n")
	for _, t := range s.Sizes {
		if t.Skipped != "" {
			fmt.Fprintf(tw, "  %s\t-\t-\t-\t  %s\n", humanize.IBytes(uint64(t.BlockSize)), t.Skipped)
			continue
		}
		note := ""
		if t.BlockSize == s.Best {
			note = "  (best)"
		}
		if t.BlockSize == s.Recommended {
			note += "  <- recommended: smallest within 10% of the best"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%.0f\t%d\t%s\n", humanize.IBytes(uint64(t.BlockSize)), t.InFlight, t.MBps, t.Reads, note)
	}
	for _, t := range s.InFlight[:max(0, len(s.InFlight)-1)] {
		fmt.Fprintf(tw, "  %s\t%d\t%.0f\t%d\t\n", humanize.IBytes(uint64(t.BlockSize)), t.InFlight, t.MBps, t.Reads)
	}
	tw.Flush()
	fmt.Fprintf(w, "  --s3-concurrency %d: the fewest GETs in flight within 10%% of the best at %s\n  (reads of 8 MiB and more are measured with fewer in flight: their buffers are bounded to 256 MiB)\n\n",
		s.Concurrency, humanize.IBytes(uint64(s.Recommended)))
}

// probeFiles lists the files of src that a mount would index.
func probeFiles(src string, include []string, follow bool) ([]tune.ProbeFile, error) {
	if len(include) == 0 {
		include = formats.TFRecord{}.Include()
	}
	var files []tune.ProbeFile
	err := filepath.WalkDir(src, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("list %s: %w", path, err)
		}
		if de.IsDir() || !slices.ContainsFunc(include, func(p string) bool { ok, _ := filepath.Match(p, de.Name()); return ok }) {
			return nil
		}
		fi, err := de.Info()
		if de.Type()&fs.ModeSymlink != 0 && follow {
			fi, err = os.Stat(path)
		}
		if err != nil {
			return fmt.Errorf("stat %s: %w", path, err)
		}
		if fi.Mode().IsRegular() && fi.Size() > 0 {
			files = append(files, tune.ProbeFile{Path: path, Size: fi.Size()})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no files under %s match --include %s", src, strings.Join(include, ","))
	}
	return files, nil
}
