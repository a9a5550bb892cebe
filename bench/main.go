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
// With --cold, --e2e, --fio and --latency (or --all) it also runs the
// measurements of issue 4, each written into its own section, and then a
// section that checks the targets against them: a cold-cache epoch
// against cat, the loopback and a pread per record (bench/randread), end to
// end against a shuffled copy (bench/shufflecopy), the fio jobs of
// bench/fio on a part file, and the first byte, epoch boundary and reader
// waits of one corgipile mount.
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

	// Which sections to run (default only warm); --all sets them all.
	warm, cold, e2e, fio, latency bool
	fioRuntime                    time.Duration
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
	o := options{size: 2 << 30, features: 240, runs: 3, parts: []int{1, 4}, out: "BENCHMARKS.md", warm: true, fioRuntime: 5 * time.Second}
	var all bool
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var((*sizeValue)(&o.size), "size", "dataset `size`, e.g. 512MiB or 2GiB (rounded to whole records)")
	fs.IntVar(&o.features, "features", o.features, "float features per record: 240 makes records of about 1 KiB")
	fs.IntVar(&o.runs, "runs", o.runs, "timed reads of each command")
	fs.Var((*partsValue)(&o.parts), "parts", "comma separated part `counts` K to read each corgifs epoch as")
	fs.StringVar(&o.work, "work", "", "work `dir`ectory: binaries, dataset, index, mount points, logs\n(default a new temporary directory, removed at the end unless --keep);\na dataset already in it with the same size and features is reused")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary work directory (default false)")
	fs.StringVar(&o.out, "out", o.out, "Markdown `file` whose sections are written (other sections are kept)")
	fs.BoolVar(&o.profile, "profile", false, "mount corgifs with --cpuprofile WORK/cpu-NAME.pprof (implies --keep) (default false)")
	fs.BoolVar(&o.warm, "warm", o.warm, "run the warm-cache epoch read (issue 2)")
	fs.BoolVar(&o.cold, "cold", false, "run the cold-cache epoch read with the per-record baselines (issue 4; drops the page cache) (default false)")
	fs.BoolVar(&o.e2e, "e2e", false, "run end to end against Shuffle Once (issue 4; drops the page cache) (default false)")
	fs.BoolVar(&o.fio, "fio", false, "run the fio jobs of bench/fio on a part file and a source file (issue 4) (default false)")
	fs.BoolVar(&o.latency, "latency", false, "run first byte, epoch boundary and reader waits (issue 4; drops the page cache) (default false)")
	fs.DurationVar(&o.fioRuntime, "fio-runtime", o.fioRuntime, "runtime of each time-based fio job")
	fs.BoolVar(&all, "all", false, "run every section: --warm --cold --e2e --fio --latency, and the issue 4 targets (default false)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: go run ./bench [flags]

Measures the throughput of reading one epoch through corgifs mounts against
a go-fuse passthrough mount and the page-cached source files, and writes
the results into --out. --all adds the issue 4 sections (cold cache, end to
end, fio, latency; about 6 minutes more). Run it as root from the repository
root.

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
	if all {
		o.warm, o.cold, o.e2e, o.fio, o.latency = true, true, true, true, true
	}
	if o.fioRuntime < time.Second {
		fmt.Fprintf(stderr, "bench: --fio-runtime must be at least 1s\n")
		return o, errors.New("usage")
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

	bins := binaries{corgifs: corgifs, loopback: loopback,
		randread: filepath.Join(work, "randread"), shufflecopy: filepath.Join(work, "shufflecopy")}
	m := describeMachine(ctx, root)
	env := &runEnv{o: o, work: work, ds: ds, bins: bins, machine: m, root: root, stderr: stderr, genTime: genTime, began: began}
	if o.cold || o.e2e {
		for _, b := range [][2]string{{bins.randread, "./bench/randread"}, {bins.shufflecopy, "./bench/shufflecopy"}} {
			fmt.Fprintf(stderr, "go build -o %s %s\n", b[0], b[1])
			if err := runIn(ctx, root, "go", "build", "-o", b[0], b[1]); err != nil {
				return err
			}
		}
	}
	write := func(heading, section string) error {
		if err := writeSection(o.out, heading, section); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\nwrote a section of %s\n\n", section, o.out)
		return nil
	}

	if o.warm {
		start := time.Now()
		b := &bench{o: o, work: work, ds: ds, stderr: stderr}
		res, err := b.runWarm(ctx, corgifs, loopback)
		if err != nil {
			return err
		}
		res.machine = m
		res.command = reproduceCommand(o)
		res.elapsed, res.genTime = time.Since(start)+genTime, genTime
		env.warm = res
		if err := write(sectionHeading, res.markdown()); err != nil {
			return err
		}
	}
	for _, s := range []struct {
		on      bool
		heading string
		run     func(context.Context) (string, error)
	}{
		{o.cold, coldHeading, env.runCold},
		{o.e2e, e2eHeading, env.runE2E},
		{o.fio, fioHeading, env.runFio},
		{o.latency, latencyHeading, env.runLatency},
	} {
		if !s.on {
			continue
		}
		section, err := s.run(ctx)
		if err != nil {
			return err
		}
		if err := write(s.heading, section); err != nil {
			return err
		}
	}
	if o.cold || o.e2e || o.latency {
		if err := write(targetsHeading, env.targetsMarkdown()); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "took %s\n", time.Since(began).Round(time.Second))
	if o.keep {
		fmt.Fprintf(stdout, "kept %s\n", work)
	}
	return nil
}

// runWarm does the warm-cache benchmark.
func (b *bench) runWarm(ctx context.Context, corgifs, loopback string) (*results, error) {
	defer b.cleanup()
	if err := b.mountAll(ctx, corgifs, loopback); err != nil {
		return nil, err
	}
	if err := b.warmUp(ctx); err != nil {
		return nil, err
	}
	if err := b.measure(ctx); err != nil {
		return nil, err
	}
	if err := b.finish(); err != nil {
		return nil, err
	}
	return b.results(), nil
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
