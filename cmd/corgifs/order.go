package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/shuffler"
)

func runOrder(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("order", "SRC", `Prints the records of one part, in the order a mount serves them, one
'file offset length' line each: the file relative to SRC, and the offset and
length of the record's bytes in it (a whole TFRecord frame, a line with its
line end, a CSV row, a tar sample with its headers, an array row). It walks
the plan over the index and reads no data. For a compressed source file
(gzip, zlib, zstd) the offset is in its decompressed stream.

With --output dali it prints the part's index for NVIDIA DALI's
readers.tfrecord (index_path) instead, TFRecord only: one 'offset size' line
per record, the offset of its frame within the served part file and the
frame's size.`, stderr)
	var d datasetFlags
	d.register(fset, mount.CmdOrder)
	d.c.ListsRecords = true
	d.c.OrdersOnly = true // feedback strategies: the orders a mount saved
	epoch := fset.Int("epoch", 0, "epoch")
	part := fset.Int("part", 0, "part index i, 0 <= i < K")
	output := fset.String("output", "file", "what to print: file ('file offset length' in the source) or dali\n('offset size' in the served part, DALI's TFRecord index); --format file and\n--format dali say the same, as before --output existed")
	pos, err := d.parse(fset, args, 1)
	if err != nil {
		return err
	}
	parts := d.c.Parts
	if err := checkParts(parts); err != nil {
		return err
	}
	// --format named the output before the records' format had a flag:
	// the two sets of values do not overlap.
	if f := d.c.FormatName; f == "file" || f == "dali" {
		*output, d.c.FormatName = f, ""
	}
	if *output != "file" && *output != "dali" {
		return fmt.Errorf("--output %q: want file or dali", *output)
	}
	if !d.c.SeedGiven {
		return fmt.Errorf("--seed is required: an order is only meaningful for a given seed")
	}
	log := newLogger(stderr, d.debug)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ds, err := d.open(ctx, pos[0], log, stderr)
	if err != nil {
		return err
	}
	ix, pl := ds.Index, ds.Planner
	d.warnParts(ix, pl, parts, log)
	if *output == "dali" && ix.Format != "tfrecord" {
		return fmt.Errorf("--output dali: the DALI index is for TFRecord; %s is %s (use --output file)", ix.Root, ix.Format)
	}
	plan, err := pl.Plan(*epoch, *part, parts)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(stdout, 1<<16)
	at := int64(len(plan.Prologue)) // dali: offset of the next frame in the served part
	err = pl.Walk(ctx, plan, func(r shuffler.RecordRef) error {
		if *output == "dali" {
			_, err := fmt.Fprintf(w, "%d %d\n", at, r.Len)
			at += r.Len
			return err
		}
		_, err := fmt.Fprintf(w, "%s %d %d\n", ix.Files[r.File].Path, r.Offset, r.Stored)
		return err
	})
	if err != nil {
		return err
	}
	return w.Flush()
}
