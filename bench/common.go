//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/shuffler"
)

// binaries are the programs the benchmark builds into its work directory.
type binaries struct{ corgifs, loopback, randread, shufflecopy string }

// harness is what every section of one benchmark run shares.
type harness struct {
	o       options
	bins    binaries
	machine machine
	root    string
	stderr  io.Writer
	genTime time.Duration // writing or checking the datasets
	sets    []*runEnv     // one per dataset, in --record-sizes order
}

// runEnv is one dataset's share of a benchmark run: its work directory
// (dataset, index cache, mount points, logs) and what each section measured
// on it, for the Markdown and the targets section.
type runEnv struct {
	*harness
	work string
	ds   *dataset

	warm *results
	cold *coldResults
	e2e  *e2eResults
	lat  *latResults
	fio  *fioResults
	mem  *memResults
	s3   *s3Results

	s3speed *s3SpeedResults

	prefetch *prefetchResults
}

func (e *runEnv) logf(format string, a ...any) { fmt.Fprintf(e.stderr, format+"\n", a...) }

// dropCaches writes back dirty pages and drops the kernel's page cache,
// dentries and inodes (root only).
func dropCaches() error {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return fmt.Errorf("dropping the page cache (needs root): %w", err)
	}
	return nil
}

// dist is the median, minimum and maximum of some samples.
type dist struct{ med, lo, hi float64 }

func summarize(v []float64) dist {
	if len(v) == 0 {
		return dist{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	d := dist{med: s[n/2], lo: s[0], hi: s[n-1]}
	if n%2 == 0 {
		d.med = (s[n/2-1] + s[n/2]) / 2
	}
	return d
}

// join formats samples with format, comma separated.
func join(v []float64, format string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(s, ", ")
}

// mountCorgifs mounts the dataset with corgifs at WORK/mnt/NAME with seed 1
// and the index cache cacheDir (WORK/cache if empty), plus args.
func (e *runEnv) mountCorgifs(ctx context.Context, name, cacheDir string, args ...string) (*daemon, error) {
	if cacheDir == "" {
		cacheDir = filepath.Join(e.work, "cache")
	}
	mnt := filepath.Join(e.work, "mnt", name)
	argv := append([]string{e.bins.corgifs, "mount", e.ds.dir, mnt, "--seed", "1", "--cache-dir", cacheDir}, args...)
	if e.o.profile {
		argv = append(argv, "--cpuprofile", filepath.Join(e.work, "cpu-"+name+".pprof"))
	}
	if err := os.MkdirAll(filepath.Join(e.work, "logs"), 0o755); err != nil {
		return nil, err
	}
	e.logf("mounting corgifs %s at %s", strings.Join(args, " "), mnt)
	return startDaemon(ctx, "corgifs "+name, mnt, filepath.Join(e.work, "logs", name+".log"),
		api.ConfigPath(mnt), argv...)
}

// mountLoopback mounts the dataset with bench/loopback (reads served by
// the daemon) at WORK/mnt/NAME.
func (e *runEnv) mountLoopback(ctx context.Context, name string) (*daemon, error) {
	mnt := filepath.Join(e.work, "mnt", name)
	if err := os.MkdirAll(filepath.Join(e.work, "logs"), 0o755); err != nil {
		return nil, err
	}
	e.logf("mounting the loopback at %s", mnt)
	return startDaemon(ctx, name, mnt, filepath.Join(e.work, "logs", name+".log"),
		filepath.Join(mnt, e.ds.Files[0]), e.bins.loopback, e.ds.dir, mnt)
}

// partPath is the path of part i of K of epoch in a corgifs mount.
func partPath(mnt string, epoch, i, k int) string {
	return shuffler.PartPath(mnt, epoch, i, k, ".tfrecord")
}

// corgifsStats reads .corgifs/stats.json of a corgifs mount.
func corgifsStats(mnt string) (*api.Stats, error) {
	st := &api.Stats{}
	return st, readJSON(api.StatsPath(mnt), st)
}

// timeCmd runs argv with its output in stdout (nil: /dev/null) and returns
// its wall time.
func timeCmd(ctx context.Context, stdout io.Writer, argv ...string) (float64, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout = stdout
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	secs := time.Since(start).Seconds()
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %s", filepath.Base(argv[0]), err, stderr.b)
	}
	return secs, nil
}

// daemonUsage is what a daemon used over its life or a part of it.
type daemonUsage struct {
	rss      int64   // peak resident set size (VmHWM)
	cpu      float64 // CPU seconds
	served   int64   // bytes served meanwhile
	stats    *api.Stats
	config   *api.Config
	finished bool
}

func (u daemonUsage) cpuPerGiB() float64 { return u.cpu / (float64(u.served) / (1 << 30)) }

// stopDaemon reads the daemon's peak RSS, stats and config and stops it.
func stopDaemon(d *daemon, corgifs bool) (daemonUsage, error) {
	var u daemonUsage
	var err error
	if corgifs {
		u.stats, err = corgifsStats(d.mnt)
		if err != nil {
			d.kill()
			return u, err
		}
		u.config = &api.Config{}
		if err := readJSON(api.ConfigPath(d.mnt), u.config); err != nil {
			d.kill()
			return u, err
		}
	}
	if u.rss, err = peakRSS(d.pid()); err != nil {
		d.kill()
		return u, err
	}
	u.finished = true
	return u, d.stop()
}

// machineMarkdown is the Machine subsection.
func machineMarkdown(m machine, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Machine\n\n")
	fmt.Fprintf(&b, "- CPU: %s, %s logical CPUs\n", m.cpu, m.cpus)
	fmt.Fprintf(&b, "- Memory: %s\n", m.memory)
	fmt.Fprintf(&b, "- Kernel: %s (`uname -r`)\n", m.kernel)
	fmt.Fprintf(&b, "- Go: %s\n", m.goVersion)
	fmt.Fprintf(&b, "- corgifs: %s (`git describe --always --dirty`)\n", m.commit)
	for _, x := range extra {
		fmt.Fprintf(&b, "- %s\n", x)
	}
	b.WriteString("\n")
	return b.String()
}

// loadLine is the list item of the load averages around one dataset's
// timed runs.
func loadLine(load [2]string) string {
	return fmt.Sprintf("- Load average (1, 5, 15 min) before the timed runs: %s; after: %s.\n", load[0], load[1])
}

// sectionRest is what follows the introduction of an issue 4 section: how
// to reproduce it, the machine, and body for each dataset.
func (h *harness) sectionRest(took time.Duration, command string, body func(e *runEnv) string, machineExtra ...string) string {
	return reproduceIntro(took) + "    " + command + "\n\n" + machineMarkdown(h.machine, machineExtra...) + h.perDataset(body)
}

// perDataset renders body for each dataset under a subheading naming it;
// body's own subheadings are ####.
func (h *harness) perDataset(body func(e *runEnv) string) string {
	var b strings.Builder
	for i, e := range h.sets {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "### %s\n\n%s\n", e.ds.label(), strings.TrimRight(body(e), "\n"))
	}
	return b.String()
}

// reproduceCommand is the command line that repeats the warm section.
func reproduceCommand(o options) string {
	return fmt.Sprintf("go run ./bench --size %s --record-sizes %s --runs %d --parts %s",
		formatSize(o.size), (*sizesValue)(&o.recordSizes).String(), o.runs, (*partsValue)(&o.parts).String())
}

// sectionCommand is the command line that repeats one issue 4 section.
func sectionCommand(o options, flag string) string {
	return fmt.Sprintf("go run ./bench --warm=false %s --size %s --record-sizes %s --runs %d",
		flag, formatSize(o.size), (*sizesValue)(&o.recordSizes).String(), o.runs)
}

// reproduceIntro is the paragraph before the command.
func reproduceIntro(took time.Duration) string {
	return fmt.Sprintf("Reproduce, as root from the repository root (run on %s, took %s; add `--work DIR --keep`\n"+
		"to reuse the datasets; `--all` runs every section in one run):\n\n",
		time.Now().UTC().Format("2006-01-02"), took.Round(time.Second))
}

// datasetLine describes the dataset in one list item.
func datasetLine(ds *dataset) string {
	s := ds.Synthetic
	made := fmt.Sprintf("written by datagen in %.1f s", ds.WriteSeconds)
	if ds.reused {
		made = fmt.Sprintf("reused (%s by an earlier run)", made)
	}
	return fmt.Sprintf("- Dataset: `datagen.Synthetic`, %d records of %d float features (%d bytes per record with framing), "+
		"%d classes sorted by label, %d files, %.2f GB (%d bytes), in WORK/%s/src; %s.\n",
		s.Records, s.Features, ds.Bytes/int64(s.Records), s.Classes, s.Files, float64(ds.Bytes)/1e9, ds.Bytes,
		datasetDir(ds.RecordSize), made)
}

// datasetDir is the subdirectory of the work directory that holds the
// dataset of records of recordSize bytes and everything made from it.
func datasetDir(recordSize int64) string { return "records-" + formatSize(recordSize) }

func fmtBytes(n int64) string { return humanize.IBytes(uint64(n)) }

// humanizeBuffer is the corgipile buffer of a daemon's config.
func humanizeBuffer(u daemonUsage) string {
	if u.config == nil {
		return "?"
	}
	return fmtBytes(u.config.BufferPart)
}

// stopMeasured stops a corgifs daemon and returns its usage, with the CPU
// seconds it spent since it had spent cpu0.
func stopMeasured(d *daemon, cpu0 float64) (daemonUsage, error) {
	cpu1, err := cpuSeconds(d.pid())
	if err != nil {
		return daemonUsage{}, err
	}
	u, err := stopDaemon(d, true)
	if err != nil {
		return daemonUsage{}, err
	}
	u.cpu = cpu1 - cpu0
	return u, nil
}
