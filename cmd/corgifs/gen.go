package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/corgifs/corgifs/datagen"
	"github.com/dustin/go-humanize"
)

func runGen(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "synthetic" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprintf(stdout, "Usage: corgifs gen synthetic OUT [flags]\n\nRun 'corgifs gen synthetic --help' for the flags.\n")
			return nil
		}
		fmt.Fprintf(stderr, "Usage: corgifs gen synthetic OUT [flags]\n")
		return errUsage
	}
	fset := newFlagSet("gen synthetic", "OUT", `Writes OUT/data-IIIII-of-FFFFF.tfrecord: tf.train.Example records with an
int64 "label", a float "features" vector and an int64 "id". Classes are
Gaussian clusters, separable by a linear model but not trivially.`, stderr)
	records := fset.Int("records", 100000, "number of records")
	features := fset.Int("features", 32, "float features per record")
	classes := fset.Int("classes", 4, "number of classes")
	order := fset.String("order", "clustered", "record order in the files: clustered (sorted by label) or shuffled")
	files := fset.Int("files", 8, "number of files")
	seed := fset.Uint64("seed", 1, "seed of the generator")
	pos, err := parse(fset, args[1:], 1)
	if err != nil {
		return err
	}
	if *order != "clustered" && *order != "shuffled" {
		return fmt.Errorf("--order %q: want clustered or shuffled", *order)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := datagen.Synthetic{Records: *records, Features: *features, Classes: *classes,
		Clustered: *order == "clustered", Files: *files, Seed: *seed}
	bar := progressFunc(stderr, "writing")
	var progress func(int64)
	if bar != nil {
		// The total is estimated: the exact size is known only once written.
		est := int64(*records) * int64(*features*4+64)
		progress = func(n int64) { bar(min(n, est), est) }
	}
	sum, err := g.Write(ctx, pos[0], progress)
	if err != nil {
		return err
	}
	if bar != nil {
		bar(1, 1)
	}
	fmt.Fprintf(stdout, "wrote %d records in %d files, %s, to %s\n", sum.Records, len(sum.Files), humanize.IBytes(uint64(sum.Bytes)), pos[0])
	return nil
}
