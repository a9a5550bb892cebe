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

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/mount"
	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// sizeFlag is a byte size given as 8MiB, 512KB or 1048576.
type sizeFlag int64

func (s *sizeFlag) String() string {
	if *s == 0 { // the zero value flag.PrintDefaults makes: no default
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
// mount, order, index, validate and tune. The options of a mount are
// generated from mount.Options and parse into c; the others are the CLI's.
type datasetFlags struct {
	// c holds the options as given.
	c mount.Config
	// refused is an option's value that c refuses (optionValue), said by
	// parse.
	refused     error
	cacheDirErr error // why there is no default --cache-dir
	debug       bool
}

// register adds the flags of the options cmd takes, and --debug.
func (d *datasetFlags) register(fs *flag.FlagSet, cmd mount.Command) {
	d.c = mount.Defaults()
	_, d.cacheDirErr = index.DefaultCacheDir()
	registerOptions(fs, cmd, &d.c, &d.refused)
	fs.BoolVar(&d.debug, "debug", false, "log debug messages")
}

// parse parses the flags (parse) and says a value of an option that the
// Config refused.
func (d *datasetFlags) parse(fs *flag.FlagSet, args []string, want int) ([]string, error) {
	pos, err := parse(fs, args, want)
	if err != nil {
		return nil, err
	}
	if d.refused != nil {
		return nil, flagError(d.refused)
	}
	return pos, nil
}

// checkFormat checks --compression, --format and the format's options.
func (d *datasetFlags) checkFormat() error {
	return flagError(d.c.CheckFormat())
}

// parseSeed returns the seed, choosing one when none was given.
func (d *datasetFlags) parseSeed() (seed uint64, chosen bool) {
	if d.c.SeedGiven {
		return d.c.Seed, false
	}
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 1, true
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
		printDefaults(fs)
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

// recordsPhrase is "N records", or that they are not known yet.
func recordsPhrase(ix *index.Index) string {
	switch {
	case ix.CountsUnknown:
		return "records not known yet (probed index)"
	case ix.Probed && ix.CountsKept() > 0:
		return strconv.FormatInt(ix.Records, 10) + " records, counted by an earlier mount (probed index)"
	}
	return strconv.FormatInt(ix.Records, 10) + " records"
}
