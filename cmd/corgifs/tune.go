package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/corgifs/corgifs/mount"

	"github.com/corgifs/corgifs/index"
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
--max-memory, which tune takes as a mount does). Last, it prints a 'corgifs
mount' line with the block size, a --max-memory given, and --buffer only
when the mount's own buffer mixes less than the rule asks.`

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
	src := pos[0]
	given := map[string]bool{}
	fset.Visit(func(f *flag.Flag) { given[f.Name] = true })
	c := tune.Config{Mount: d.config(src), Label: *label, Features: *features,
		Probe: *probe, ProbeBytes: int64(probeBytes), ProbeTime: *probeTime, InFlight: *inFlight, Rounds: *rounds,
		InFlightGiven: given["in-flight"], SizesGiven: given["min-block"] || given["max-block"],
		MinBlock: int64(minBlock), MaxBlock: int64(maxBlock), DataBytes: int64(dataBytes), Seed: *seed, Parts: d.c.Parts, MixTV: *mixTV,
		ProbeProgress: progressFunc(stderr, "probing"), ReadProgress: progressFunc(stderr, "reading")}
	c.Mount.Progress = progressFunc(stderr, "indexing")
	if err := c.Check(); err != nil {
		return flagError(err)
	}
	if *label != "" {
		// The data analysis indexes SRC into the cache directory.
		if err := d.checkCacheDir(); err != nil {
			return err
		}
	}
	log := newLogger(stderr, d.debug)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out, err := tune.Advise(ctx, c, log)
	if err != nil {
		return flagError(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printTune(stdout, out)
	return nil
}

func printTune(w io.Writer, o tune.Advice) {
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

func printBuffer(w io.Writer, b *tune.BufferChoice) {
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
	if b.Criterion == "bound" && b.BoundBlocks < tune.MinBufferBlocks && b.Part > b.BoundBlocks {
		fmt.Fprintf(w, "  (the mount line asks for %d blocks at least: fewer hardly shuffle)\n", min(tune.MinBufferBlocks, b.Part))
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
