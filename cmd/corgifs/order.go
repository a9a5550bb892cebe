package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/shuffler"
)

func runOrder(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("order", "SRC", `Prints the records of one part, in the order a mount serves them, one
'file offset length' line each (file relative to SRC, offset and length of
the whole TFRecord frame), without mounting.

With --format dali it prints the part's index for NVIDIA DALI's
readers.tfrecord (index_path) instead: one 'offset size' line per record,
the offset of its frame within the served part file and the frame's size.`, stderr)
	var d datasetFlags
	d.register(fset, true)
	fset.Lookup("seed").Usage = "`seed` of the order (required: the same seed as the mount's gives its order)"
	epoch := fset.Int("epoch", 0, "epoch")
	part := fset.Int("part", 0, "part index i, 0 <= i < K")
	parts := fset.Int("parts", 1, "number of parts K")
	format := fset.String("format", "file", "output `format`: file ('file offset length' in the source) or dali\n('offset size' in the served part, DALI's TFRecord index)")
	pos, err := parse(fset, args, 1)
	if err != nil {
		return err
	}
	if err := checkParts(*parts); err != nil {
		return err
	}
	if *format != "file" && *format != "dali" {
		return fmt.Errorf("--format %q: want file or dali", *format)
	}
	if d.seed == "" {
		return fmt.Errorf("--seed is required: an order is only meaningful for a given seed")
	}
	log := newLogger(stderr, d.debug)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ix, pl, seed, err := d.open(ctx, pos[0], log, stderr)
	if err != nil {
		return err
	}
	if ix, pl, err = d.fitBlocks(ctx, pos[0], ix, pl, seed, *parts, log, stderr); err != nil {
		return err
	}
	plan, err := pl.Plan(*epoch, *part, *parts)
	if err != nil {
		return err
	}
	ld := blockcache.NewLoader(ix, d.loaderOptions(log))
	s := shuffler.NewStream(pl, ld, plan)
	defer s.Close()
	w := bufio.NewWriterSize(stdout, 1<<16)
	var at int64 // dali: offset of the next frame in the served part
	err = s.Walk(ctx, func(r shuffler.RecordRef) error {
		if *format == "dali" {
			_, err := fmt.Fprintf(w, "%d %d\n", at, r.Len)
			at += r.Len
			return err
		}
		_, err := fmt.Fprintf(w, "%s %d %d\n", ix.Files[r.File].Path, r.Offset, r.Len)
		return err
	})
	if err != nil {
		return err
	}
	return w.Flush()
}
