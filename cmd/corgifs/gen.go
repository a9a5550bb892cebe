package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/corgifs/corgifs/datagen"
	"github.com/dustin/go-humanize"
)

const genUsage = `Usage: corgifs gen synthetic OUT [flags]
       corgifs gen fashion-mnist OUT [flags]

Run 'corgifs gen KIND --help' for the flags.
`

func runGen(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "fashion-mnist" {
		return runGenFashion(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "synthetic" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprint(stdout, genUsage)
			return nil
		}
		if len(args) > 0 {
			return fmt.Errorf("unknown kind %q: want synthetic or fashion-mnist (corgifs gen --help)", args[0])
		}
		fmt.Fprint(stderr, genUsage)
		return errUsage
	}
	fset := newFlagSet("gen synthetic", "OUT", `Writes OUT/data-IIIII-of-FFFFF.tfrecord: tf.train.Example records with an
int64 "label", a float "features" vector and an int64 "id". Classes are
Gaussian clusters, separable by a linear model but not trivially.
--format writes the same records, in the same order and files, as:
  csv     header id,label,f0,...; a row per record
  jsonl   {"id":...,"label":...,"features":[...]} per line
  libsvm  label qid:ID 1:v1 2:v2 ... (indexes from 1; the id is the qid,
          which sklearn's load_svmlight_file reads with query_id=True)
  wds     WebDataset tar: KEY.cls (label), KEY.id, KEY.bin (float32 LE)
  npy     a float32 array per file, columns label, id, f0, ...`, stderr)
	records := fset.Int("records", 100000, "number of records")
	features := fset.Int("features", 32, "float features per record")
	classes := fset.Int("classes", 4, "number of classes")
	order := fset.String("order", "clustered", "record order in the files: clustered (sorted by label) or shuffled")
	files := fset.Int("files", 8, "number of files")
	seed := fset.Uint64("seed", 1, "seed of the generator (the class centers depend on it alone)")
	noise := fset.Float64("noise", 1, "standard deviation of the features around their class center (the centers are 2.5\nfrom the origin): larger values make the classes overlap (3: two classes of 18 features\nare about 75% separable, a noisy tabular task)")
	firstID := fset.Int("first-id", 0, "number the records from this id on; a set made with the same --seed and\nids past another set's holds new points of the same classes (a held-out test set)")
	format := genFormatFlag(fset)
	force := fset.Bool("force", false, "write into OUT even if it is not empty (files of the same names are replaced)")
	pos, err := parse(fset, args[1:], 1)
	if err != nil {
		return err
	}
	if *order != "clustered" && *order != "shuffled" {
		return fmt.Errorf("--order %q: want clustered or shuffled", *order)
	}
	switch {
	case *records <= 0:
		return fmt.Errorf("--records %d: want at least 1", *records)
	case *features <= 0:
		return fmt.Errorf("--features %d: want at least 1", *features)
	case *classes < 2:
		return fmt.Errorf("--classes %d: want at least 2", *classes)
	case *files < 1 || *files > *records:
		return fmt.Errorf("--files %d: want 1 to --records (%d)", *files, *records)
	case !(*noise > 0) || math.IsInf(*noise, 0):
		return fmt.Errorf("--noise %v: want a positive number", *noise)
	}
	if err := checkEmptyOut(pos[0], *force); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := datagen.Synthetic{Records: *records, Features: *features, Classes: *classes,
		Clustered: *order == "clustered", Files: *files, Seed: *seed, FirstID: *firstID, Format: *format, Noise: *noise}
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

func runGenFashion(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("gen fashion-mnist", "OUT", `Converts the Fashion-MNIST idx files (gzip'd, as the Debian package
dataset-fashion-mnist installs them) into OUT/train/*.tfrecord and
OUT/test/*.tfrecord: tf.train.Example records with "image" (bytes, 784 uint8
pixels), "label" (int64) and "id" (int64). --format writes the same records as
csv (id,label,p0..p783), jsonl ("pixels"), libsvm (label qid:ID idx:pixel),
wds (KEY.cls, KEY.id and KEY.pixels: 784 raw uint8) or npy (uint8 columns
label, p0..p783).`, stderr)
	from := fset.String("from", datagen.DefaultFashionDir, "`dir`ectory holding the four idx .gz files")
	order := fset.String("order", "clustered", "record order in the files: clustered (sorted by label) or shuffled")
	files := fset.Int("files", 8, "number of training files (the test set is written as as many)")
	seed := fset.Uint64("seed", 1, "seed of the shuffled order")
	format := genFormatFlag(fset)
	force := fset.Bool("force", false, "write into OUT even if it is not empty (files of the same names are replaced)")
	pos, err := parse(fset, args, 1)
	if err != nil {
		return err
	}
	if *order != "clustered" && *order != "shuffled" {
		return fmt.Errorf("--order %q: want clustered or shuffled", *order)
	}
	if *files < 1 {
		return fmt.Errorf("--files %d: want at least 1", *files)
	}
	if err := checkEmptyOut(pos[0], *force); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	train, test, err := datagen.FashionMNIST{From: *from, Clustered: *order == "clustered", Files: *files, Seed: *seed, Format: *format}.Write(ctx, pos[0], nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %d training records (%s) and %d test records (%s) to %s\n",
		train.Records, humanize.IBytes(uint64(train.Bytes)), test.Records, humanize.IBytes(uint64(test.Bytes)), pos[0])
	return nil
}

// genFormatFlag registers gen's --format.
func genFormatFlag(fset *flag.FlagSet) *string {
	return fset.String("format", datagen.FormatTFRecord, "file `format`: "+strings.Join(datagen.Formats(), ", "))
}

// checkEmptyOut refuses an output directory that already holds something,
// so that gen never mixes a new dataset into an old one (a mount of OUT
// would serve both) unless --force.
func checkEmptyOut(dir string, force bool) error {
	if force {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s is not empty (%d entries, such as %s): choose a new directory or pass --force", dir, len(entries), entries[0].Name())
	}
	return nil
}
