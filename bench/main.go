//go:build linux

// Command bench is the warm-cache epoch read benchmark of corgifs. It
// measures how fast one epoch is served through a corgifs mount, with the
// corgipile and the none strategy, against a plain go-fuse passthrough mount
// of the same files and against reading the source files directly, and
// writes the results into a section of BENCHMARKS.md.
//
// It builds corgifs, writes a label-clustered synthetic dataset with datagen
// (16 files), mounts it with corgifs (one mount per strategy and part count)
// and with the passthrough program in bench/loopback, each served by a child
// process, and reads everything once so that the page cache is warm. Then,
// round-robin, --runs times each, it times `cat FILES > /dev/null` in a
// separate process: all parts of a fresh epoch of each corgifs mount, the
// files of the passthrough mount, and the source files. Finally it reads the
// peak resident size and CPU time of each daemon from /proc and stops them.
//
// Usage, as root from the repository root:
//
//	go run ./bench [flags]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command line flags.
type options struct {
	size     int64
	features int
	runs     int
	parts    []int
	work     string
	keep     bool
	out      string
	profile  bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		os.Exit(2)
	}
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{size: 2 << 30, features: 240, runs: 3, parts: []int{1, 4}, out: "BENCHMARKS.md"}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var((*sizeValue)(&o.size), "size", "dataset `size`, e.g. 512MiB or 2GiB (rounded to whole records)")
	fs.IntVar(&o.features, "features", o.features, "float features per record: 240 makes records of about 1 KiB")
	fs.IntVar(&o.runs, "runs", o.runs, "timed reads of each command")
	fs.Var((*partsValue)(&o.parts), "parts", "comma separated part `counts` K to read each corgifs epoch as")
	fs.StringVar(&o.work, "work", "", "work `dir`ectory: binaries, dataset, index, mount points, logs\n(default a new temporary directory, removed at the end unless --keep);\na dataset already in it with the same size and features is reused")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary work directory (default false)")
	fs.StringVar(&o.out, "out", o.out, "Markdown `file` whose warm-cache section is written (other sections are kept)")
	fs.BoolVar(&o.profile, "profile", false, "mount corgifs with --cpuprofile WORK/cpu-NAME.pprof (implies --keep) (default false)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: go run ./bench [flags]

Measures the throughput of reading one epoch through corgifs mounts against
a go-fuse passthrough mount and the page-cached source files, and writes
the results into --out. Run it as root from the repository root.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return o, errors.New("usage")
	}
	if o.features < 1 || o.runs < 1 || len(o.parts) == 0 {
		fmt.Fprintf(stderr, "bench: --features and --runs must be positive and --parts not empty\n")
		return o, errors.New("usage")
	}
	if o.profile {
		o.keep = true
	}
	return o, nil
}

// sizeValue is a byte size flag such as 2GiB.
type sizeValue int64

func (s *sizeValue) String() string { return formatSize(int64(*s)) }

func (s *sizeValue) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeValue(n)
	return nil
}

// partsValue is a comma separated list of part counts.
type partsValue []int

func (p *partsValue) String() string {
	s := make([]string, len(*p))
	for i, k := range *p {
		s[i] = strconv.Itoa(k)
	}
	return strings.Join(s, ",")
}

func (p *partsValue) Set(v string) error {
	var ks []int
	for f := range strings.SplitSeq(v, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return fmt.Errorf("want positive part counts such as 1,4")
		}
		ks = append(ks, k)
	}
	*p = ks
	return nil
}

// run does the whole benchmark.
func run(ctx context.Context, o options, stdout, stderr io.Writer) error {
	began := time.Now()
	work := o.work
	if work == "" {
		dir, err := os.MkdirTemp("", "corgifs-bench-")
		if err != nil {
			return err
		}
		work = dir
		if !o.keep {
			defer os.RemoveAll(work)
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	work, err := filepath.Abs(work)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "work directory %s\n", work)
	if os.Geteuid() != 0 {
		fmt.Fprintf(stderr, "warning: not root: mounts need fusermount3 and the readahead stays at the kernel default\n")
	}

	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	corgifs := filepath.Join(work, "corgifs")
	loopback := filepath.Join(work, "loopback")
	for _, b := range [][2]string{{corgifs, "./cmd/corgifs"}, {loopback, "./bench/loopback"}} {
		fmt.Fprintf(stderr, "go build -o %s %s\n", b[0], b[1])
		if err := runIn(ctx, root, "go", "build", "-o", b[0], b[1]); err != nil {
			return err
		}
	}

	genStart := time.Now()
	ds, err := ensureDataset(ctx, work, o.size, o.features, stderr)
	if err != nil {
		return err
	}
	genTime := time.Since(genStart)

	b := &bench{o: o, work: work, ds: ds, stderr: stderr}
	defer b.cleanup()
	if err := b.mountAll(ctx, corgifs, loopback); err != nil {
		return err
	}
	if err := b.warmUp(ctx); err != nil {
		return err
	}
	if err := b.measure(ctx); err != nil {
		return err
	}
	if err := b.finish(); err != nil {
		return err
	}

	res := b.results()
	res.machine = describeMachine(ctx, root)
	res.command = reproduceCommand(o)
	res.elapsed, res.genTime = time.Since(began), genTime
	section := res.markdown()
	if err := writeSection(o.out, sectionHeading, section); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\nwrote %s (took %s)\n", section, o.out, res.elapsed.Round(time.Second))
	if o.keep {
		fmt.Fprintf(stdout, "kept %s\n", work)
	}
	return nil
}

// moduleRoot returns the directory of the main module's go.mod.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the corgifs module: run from the repository root")
	}
	return filepath.Dir(mod), nil
}

// runIn runs a command in dir, passing its output through on failure.
func runIn(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// reproduceCommand is the command line that repeats this measurement.
func reproduceCommand(o options) string {
	return fmt.Sprintf("go run ./bench --size %s --features %d --runs %d --parts %s",
		formatSize(o.size), o.features, o.runs, (*partsValue)(&o.parts).String())
}
