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
the whole TFRecord frame), without mounting.`, stderr)
	var d datasetFlags
	d.register(fset, true)
	epoch := fset.Int("epoch", 0, "epoch")
	part := fset.Int("part", 0, "part index i, 0 <= i < K")
	parts := fset.Int("parts", 1, "number of parts K")
	pos, err := parse(fset, args, 1)
	if err != nil {
		return err
	}
	if d.seed == "" {
		return fmt.Errorf("--seed is required: an order is only meaningful for a given seed")
	}
	log := newLogger(stderr, d.debug)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ix, pl, _, err := d.open(ctx, pos[0], log, stderr)
	if err != nil {
		return err
	}
	plan, err := pl.Plan(*epoch, *part, *parts)
	if err != nil {
		return err
	}
	ld := blockcache.NewLoader(ix, blockcache.LoaderOptions{MaxMemory: int64(d.maxMemory), Logger: log})
	s := shuffler.NewStream(pl, ld, plan)
	defer s.Close()
	w := bufio.NewWriterSize(stdout, 1<<16)
	err = s.Walk(ctx, func(r shuffler.RecordRef) error {
		_, err := fmt.Fprintf(w, "%s %d %d\n", ix.Files[r.File].Path, r.Offset, r.Len)
		return err
	})
	if err != nil {
		return err
	}
	return w.Flush()
}
