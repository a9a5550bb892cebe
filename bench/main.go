//go:build linux

// Command bench is the benchmark harness of corgifs. It measures how fast
// one epoch is served through a corgifs mount, with the corgipile and the
// none strategy, against a plain go-fuse passthrough mount of the same files
// and against reading the source files directly, and writes the results into
// sections of BENCHMARKS.md.
//
// It builds corgifs and writes one label-clustered synthetic dataset with
// datagen (16 files) per --record-sizes (by default 4 GiB of 1 KiB records
// and 4 GiB of 100 KiB records), and runs every section on each dataset in
// turn. The warm section mounts the dataset with corgifs (one mount per
// strategy and part count) and with the passthrough program in
// bench/loopback, each served by a child process, and reads everything once
// so that the page cache is warm. Then, round-robin, --runs times each, it
// times `cat FILES > /dev/null` in a separate process: all parts of a fresh
// epoch of each corgifs mount, the files of the passthrough mount, and the
// source files. Finally it reads the peak resident size and CPU time of each
// daemon from /proc and stops them.
//
// With --cold, --e2e, --fio and --latency (or --all) it also runs the
// measurements of issue 4, each written into its own section, and then a
// section that checks the targets against them: a cold-cache epoch
// against cat, the loopback and a pread per record (bench/randread), end to
// end against a shuffled copy (bench/shufflecopy), the fio jobs of
// bench/fio on a part file, and the first byte, epoch boundary and reader
// waits of one corgipile mount.
//
// With --formats it writes, per record size, the same records in every
// format of `corgifs gen synthetic --format` (256 MiB of TFRecord each
// unless --size is given; the six formats take about 12 times that) and compares a warm corgipile epoch and the index
// time of each format against TFRecord's (issue 13). Given alone, it runs
// only that section.
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command line flags.
type options struct {
	size        int64   // of each dataset
	recordSizes []int64 // one dataset per record size
	runs        int
	parts       []int
	work        string
	keep        bool
	out         string
	profile     bool
	sizeSet     bool     // --size was given (the formats section has its own default)
	formats     bool     // run the formats section (issue 13)
	s3          bool     // run the object store section (issue 14)
	s3speed     bool     // run the object store section of issue 25
	compressed  bool     // run the compressed section (issue 18)
	probe       bool     // run the probe index section (issue 14)
	probeBlocks []string // --probe-block-sizes: block sizes to time besides the default
	s3fs        bool     // run the GETs per GiB section against s3fs (issue 25)

	s3Server string // the S3 server --s3 and --s3speed start: versitygw or minio

	// Which sections to run (default only warm); --all sets them all.
	warm, cold, e2e, fio, latency, memory bool
	prefetch                              bool // double buffering against --prefetch (issue 15)
	simulate                              bool // pls at scale on a synthetic index (issue 15)
	sim                                   simOptions
	traffic                               trafficOptions // K nodes' disk-cache traffic (issue 15)
	fioRuntime                            time.Duration
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
	o := options{size: 4 << 30, recordSizes: []int64{1 << 10, 100 << 10}, runs: 3, parts: []int{1, 4},
		out: "BENCHMARKS.md", warm: true, fioRuntime: 5 * time.Second,
		sim: simOptions{size: 10e12, block: 8 << 20, parts: []int{64, 1024}, exchanges: []float64{0, 0.1, 0.3, 1}, epochs: 4}}
	var all bool
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var((*sizeValue)(&o.size), "size", "`size` of each dataset, e.g. 512MiB or 4GiB (rounded to whole records)")
	fs.Var((*sizesValue)(&o.recordSizes), "record-sizes", "comma separated record `sizes`, one dataset each, e.g. 1KiB,100KiB;\n"+
		"a record holds as many float features as come closest to its size")
	fs.IntVar(&o.runs, "runs", o.runs, "timed reads of each command")
	fs.Var((*partsValue)(&o.parts), "parts", "comma separated part `counts` K to read each corgifs epoch as (warm section)")
	fs.StringVar(&o.work, "work", "", "work `dir`ectory: binaries, and per dataset in records-SIZE/ the dataset, index,\n"+
		"mount points and logs (default a new temporary directory, removed at the end\n"+
		"unless --keep); a dataset already in it with the same parameters is reused")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary work directory (default false)")
	fs.StringVar(&o.out, "out", o.out, "Markdown `file` whose sections are written (other sections are kept)")
	fs.BoolVar(&o.profile, "profile", false, "mount corgifs with --cpuprofile WORK/records-SIZE/cpu-NAME.pprof (implies --keep) (default false)")
	fs.BoolVar(&o.warm, "warm", o.warm, "run the warm-cache epoch read (issue 2)")
	fs.BoolVar(&o.cold, "cold", false, "run the cold-cache epoch read with the per-record baselines (issue 4; drops the page cache) (default false)")
	fs.BoolVar(&o.e2e, "e2e", false, "run end to end against Shuffle Once (issue 4; drops the page cache) (default false)")
	fs.BoolVar(&o.fio, "fio", false, "run the fio jobs of bench/fio on a part file and the source files (issue 4) (default false)")
	fs.BoolVar(&o.latency, "latency", false, "run first byte, epoch boundary and reader waits (issue 4; drops the page cache) (default false)")
	fs.BoolVar(&o.memory, "memory", false, "run the daemon's peak RSS against --max-memory for 1 to 256 readers, and the read\n"+
		"amplification under a short budget (issue 12; a few minutes with --size 1GiB) (default false)")
	fs.BoolVar(&o.formats, "formats", false, "run a warm corgipile epoch and the index of the same records in every format against\n"+
		"TFRecord (issue 13; alone it skips --warm unless given, and --size defaults to 256MiB\n"+
		"of TFRecord per record size; a few minutes) (default false)")
	fs.BoolVar(&o.s3, "s3", false, "run a cold epoch from a real S3 server on 127.0.0.1 (versitygw, on PATH) against plain\n"+
		"GETs of the same objects, GETs per epoch against a GET per record, and with --disk-cache\n"+
		"an epoch from the disk cache against a cold local directory (issue 14; drops the page\n"+
		"cache; alone it skips --warm unless given) (default false)")
	fs.BoolVar(&o.s3speed, "s3speed", false, "run a cold epoch from a real S3 server on 127.0.0.1 (versitygw, on PATH) against 8 parallel\n"+
		"whole-object GETs and 24 parallel ranged GETs of the block size, and an epoch from --disk-cache\n"+
		"against a cold local directory, alternated run by run (issue 25; drops the page cache; alone it\n"+
		"skips --warm unless given) (default false)")
	fs.StringVar(&o.s3Server, "s3-server", s3Versitygw, "the S3 `server` --s3 and --s3speed start on 127.0.0.1: versitygw or minio (on PATH)")
	fs.BoolVar(&o.prefetch, "prefetch", false, "run cold epochs through mounts with --prefetch 0, 1, 2 and 4, read by a reader that\n"+
		"works on every MiB for as long as its cold read takes (waiting, or spinning a CPU), and\n"+
		"without work (issue 15; drops the page cache; 12 epochs per run, 2 minutes with --size\n"+
		"1GiB and --runs 5) (default false)")
	fs.BoolVar(&o.simulate, "simulate", false, "simulate --strategy pls on a synthetic index of --sim-size (no data, no root, no mount):\n"+
		"per node and epoch the bytes and GETs fetched through a disk cache of (1+Q)·N/K evicting by\n"+
		"Belady's rule, its peak size, and one node's plan time and memory (issue 15) (default false)")
	fs.Var((*sizeValue)(&o.sim.size), "sim-size", "`size` of the simulated dataset")
	fs.Var((*sizeValue)(&o.sim.block), "sim-block", "block `size` of the simulated dataset")
	fs.Var((*partsValue)(&o.sim.parts), "sim-parts", "comma separated node `counts` K to simulate")
	fs.Var((*fractionsValue)(&o.sim.exchanges), "sim-exchange", "comma separated exchange `fractions` Q to simulate")
	fs.IntVar(&o.sim.epochs, "sim-epochs", o.sim.epochs, "epochs to simulate")
	trafficFlags(fs, &o.traffic)
	fs.BoolVar(&o.probe, "probe", false, "time `corgifs index` of a TFRecord dataset in a MinIO S3 server on 127.0.0.1 by probing\n"+
		"against reading every byte at the default block size, with bytes, GETs and CPU of each (issues 14, 25;\n"+
		"alone it skips --warm unless given; try --size 2GiB --record-sizes 100KiB --runs 1) (default false)")
	fs.BoolVar(&o.s3fs, "s3fs", false, "count the GETs per GiB of an epoch of the first --record-sizes dataset in MinIO on 127.0.0.1,\n"+
		"read by a per-record reader in shuffled order through s3fs and by cat of a corgifs part\n"+
		"at the defaults (issue 25; needs s3fs and minio; alone it skips --warm unless given) (default false)")
	fs.Func("probe-block-sizes", "with --probe, comma separated block `sizes` (e.g. 8MiB) to time besides the default one", func(v string) error {
		o.probeBlocks = strings.Split(v, ",")
		return nil
	})
	fs.DurationVar(&o.fioRuntime, "fio-runtime", o.fioRuntime, "runtime of each time-based fio job")
	fs.BoolVar(&o.compressed, "compressed", false, "run a cold and a warm corgipile epoch and the index of a GZIP TFRecord dataset against zcat\n"+
		"and the uncompressed copy (issue 18; 1 GiB decompressed unless --size is given; drops the page cache) (default false)")
	fs.BoolVar(&all, "all", false, "run every section: --warm --cold --e2e --fio --latency --memory --prefetch --simulate --formats --compressed, and the issue 4 targets (default false)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: go run ./bench [flags]

Writes one synthetic dataset per --record-sizes, each of --size bytes, and
measures on each the throughput of reading one epoch through corgifs mounts
against a go-fuse passthrough mount and the page-cached source files; writes
the results into --out. --all adds the issue 4 sections (cold cache, end to
end, fio, latency) and checks the issue's targets; with the default datasets
that takes 15 to 20 minutes (17 to 19 on 2 vCPUs), and a few more for the
memory section of issue 12 (--memory: 48 s with --size 1GiB on 2 vCPUs) and
the formats section of issue 13 (--formats: the same records in six formats,
about 12x --size on disk per record size, 256MiB of TFRecord unless --size is
given; 3 minutes alone on 2 vCPUs, 1 when its datasets are reused).
Run it as root from the repository root.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	o.sizeSet = given["size"]
	if (o.formats || o.s3 || o.s3speed || o.simulate || o.compressed || o.probe || o.s3fs) && !given["warm"] {
		o.warm = false
	}
	if o.traffic.run && !given["warm"] {
		o.warm = false
	}
	if o.sim.epochs < 1 || o.sim.block < 1 || o.sim.size < o.sim.block {
		fmt.Fprintf(stderr, "bench: --sim-epochs must be positive and --sim-size at least --sim-block\n")
		return o, errors.New("usage")
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return o, errors.New("usage")
	}
	if o.runs < 1 || len(o.parts) == 0 || len(o.recordSizes) == 0 {
		fmt.Fprintf(stderr, "bench: --runs must be positive and --parts and --record-sizes not empty\n")
		return o, errors.New("usage")
	}
	for i, rs := range o.recordSizes {
		if rs < minRecordSize() || rs > o.size/dataFiles {
			fmt.Fprintf(stderr, "bench: a record size must be from %d bytes (one feature) to --size/%d (%d bytes), got %d\n",
				minRecordSize(), dataFiles, o.size/dataFiles, rs)
			return o, errors.New("usage")
		}
		// The datasets' directories are named after their record sizes.
		if slices.Contains(o.recordSizes[:i], rs) {
			fmt.Fprintf(stderr, "bench: --record-sizes names %s twice\n", formatSize(rs))
			return o, errors.New("usage")
		}
	}
	if o.profile {
		o.keep = true
	}
	if all {
		o.warm, o.cold, o.e2e, o.fio, o.latency, o.memory = true, true, true, true, true, true
		o.prefetch, o.simulate = true, true
		o.formats = true
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

// sizesValue is a comma separated list of byte sizes.
type sizesValue []int64

func (s *sizesValue) String() string {
	f := make([]string, len(*s))
	for i, n := range *s {
		f[i] = formatSize(n)
	}
	return strings.Join(f, ",")
}

func (s *sizesValue) Set(v string) error {
	var ns []int64
	for f := range strings.SplitSeq(v, ",") {
		n, err := parseSize(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("want sizes such as 1KiB,100KiB")
		}
		ns = append(ns, n)
	}
	*s = ns
	return nil
}

// fractionsValue is a comma separated list of fractions in [0, 1].
type fractionsValue []float64

func (f *fractionsValue) String() string { return joinFloats(*f) }

func (f *fractionsValue) Set(v string) error {
	var qs []float64
	for s := range strings.SplitSeq(v, ",") {
		q, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || !(q >= 0 && q <= 1) {
			return fmt.Errorf("want fractions from 0 to 1 such as 0,0.1,0.3,1")
		}
		qs = append(qs, q)
	}
	*f = qs
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
	if o.simulate {
		// Needs no binaries, data or root: first, and alone if it is all.
		res, err := runSimulate(o.sim)
		if err != nil {
			return fmt.Errorf("simulate: %w", err)
		}
		section := (&harness{o: o}).simulateMarkdown(res)
		if err := writeSection(o.out, simulateHeading, section); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\nwrote a section of %s\n\n", section, o.out)
		if !(o.warm || o.cold || o.e2e || o.fio || o.latency || o.memory || o.prefetch || o.formats) {
			return nil
		}
	}
	if o.traffic.run {
		o.traffic.work = o.work
		if err := runTraffic(ctx, o.traffic, o.out, stdout, stderr); err != nil {
			return fmt.Errorf("traffic: %w", err)
		}
		if !(o.warm || o.cold || o.e2e || o.fio || o.latency || o.memory || o.prefetch || o.formats) {
			return nil
		}
	}
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
	bins := binaries{corgifs: filepath.Join(work, "corgifs"), loopback: filepath.Join(work, "loopback"),
		randread: filepath.Join(work, "randread"), shufflecopy: filepath.Join(work, "shufflecopy")}
	// Only the formats section needs no dataset of datagen's and no loopback.
	needsDatasets := o.warm || o.cold || o.e2e || o.fio || o.latency || o.memory || o.prefetch || o.s3 || o.s3speed
	builds := [][2]string{{bins.corgifs, "./cmd/corgifs"}}
	if needsDatasets {
		builds = append(builds, [2]string{bins.loopback, "./bench/loopback"})
	}
	if o.cold || o.e2e {
		builds = append(builds, [2]string{bins.randread, "./bench/randread"}, [2]string{bins.shufflecopy, "./bench/shufflecopy"})
	}
	for _, b := range builds {
		fmt.Fprintf(stderr, "go build -o %s %s\n", b[0], b[1])
		if err := runIn(ctx, root, "go", "build", "-o", b[0], b[1]); err != nil {
			return err
		}
	}

	h := &harness{o: o, bins: bins, root: root, stderr: stderr}
	genStart := time.Now()
	for _, rs := range o.recordSizes {
		if !needsDatasets {
			break
		}
		dir := filepath.Join(work, datasetDir(rs))
		ds, err := ensureDataset(ctx, dir, o.size, rs, stderr)
		if err != nil {
			return err
		}
		h.sets = append(h.sets, &runEnv{harness: h, work: dir, ds: ds})
	}
	h.genTime = time.Since(genStart)
	h.machine = describeMachine(ctx, root)

	write := func(heading, section string) error {
		if err := writeSection(o.out, heading, section); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\nwrote a section of %s\n\n", section, o.out)
		return nil
	}
	// Section by section, each on every dataset, so that a section is
	// written as soon as it is complete.
	for _, s := range []struct {
		on       bool
		heading  string
		run      func(*runEnv, context.Context) error
		markdown func(*harness, time.Duration) string
	}{
		{o.warm, sectionHeading, (*runEnv).runWarm, (*harness).warmMarkdown},
		{o.cold, coldHeading, (*runEnv).runCold, (*harness).coldMarkdown},
		{o.e2e, e2eHeading, (*runEnv).runE2E, (*harness).e2eMarkdown},
		{o.fio, fioHeading, (*runEnv).runFio, (*harness).fioMarkdown},
		{o.latency, latencyHeading, (*runEnv).runLatency, (*harness).latencyMarkdown},
		{o.memory, memoryHeading, (*runEnv).runMemory, (*harness).memoryMarkdown},
		{o.s3, s3Heading, (*runEnv).runS3, (*harness).s3Markdown},
		{o.s3speed, s3SpeedHeading, (*runEnv).runS3Speed, (*harness).s3SpeedMarkdown},
		{o.prefetch, prefetchHeading, (*runEnv).runPrefetch, (*harness).prefetchMarkdown},
	} {
		if !s.on {
			continue
		}
		start := time.Now()
		for _, e := range h.sets {
			e.logf("%s: %s", strings.TrimPrefix(s.heading, "## "), e.ds.label())
			if err := s.run(e, ctx); err != nil {
				return fmt.Errorf("%s: %w", e.ds.label(), err)
			}
		}
		if err := write(s.heading, s.markdown(h, time.Since(start))); err != nil {
			return err
		}
	}
	if o.formats {
		start := time.Now()
		res, err := h.runFormats(ctx, work)
		if err != nil {
			return fmt.Errorf("formats: %w", err)
		}
		if err := write(formatsHeading, h.formatsMarkdown(res, time.Since(start))); err != nil {
			return err
		}
	}
	if o.compressed {
		start := time.Now()
		res, err := h.runCompressed(ctx, work)
		if err != nil {
			return fmt.Errorf("compressed: %w", err)
		}
		if err := write(compressedHeading, h.compressedMarkdown(res, time.Since(start))); err != nil {
			return err
		}
	}
	if o.probe {
		start := time.Now()
		res, err := runProbe(ctx, o, work, bins.corgifs)
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		if err := write(probeHeading, probeMarkdown(o, res, time.Since(start), h.machine)); err != nil {
			return err
		}
	}
	if o.s3fs {
		start := time.Now()
		res, err := runS3fs(ctx, o, work, bins.corgifs)
		if err != nil {
			return fmt.Errorf("s3fs: %w", err)
		}
		if err := write(s3fsHeading, s3fsMarkdown(o, res, time.Since(start), h.machine)); err != nil {
			return err
		}
	}
	if o.cold || o.e2e || o.latency {
		if err := write(targetsHeading, h.targetsMarkdown()); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "took %s, of which %s writing or checking the datasets\n",
		time.Since(began).Round(time.Second), h.genTime.Round(time.Second))
	if o.keep {
		fmt.Fprintf(stdout, "kept %s\n", work)
	}
	return nil
}

// runWarm does the warm-cache benchmark.
func (e *runEnv) runWarm(ctx context.Context) error {
	b := &bench{o: e.o, work: e.work, ds: e.ds, stderr: e.stderr}
	defer b.cleanup()
	if err := b.mountAll(ctx, e.bins.corgifs, e.bins.loopback); err != nil {
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
	e.warm = b.results()
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
