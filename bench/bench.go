//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/shuffler"
)

// bench holds the state of one benchmark: the mounts and what was measured.
type bench struct {
	o      options
	work   string
	ds     *dataset
	stderr io.Writer

	daemons []*daemon // every daemon started, for cleanup
	targets []*target // in table order

	loadBefore, loadAfter string // /proc/loadavg around the timed runs
}

// target is one compared command: cat of a set of files that together hold
// the dataset once.
type target struct {
	name     string
	kind     string
	strategy string // corgifs only
	parts    int    // corgifs only
	d        *daemon
	files    func(epoch int) []string
	// fresh: the files are corgifs parts kept in the kernel page cache
	// (FOPEN_KEEP_CACHE); their pages are dropped after each read so that
	// the page cache holds only the source files.
	fresh   bool
	samples []sample

	// Read just before the daemon is stopped.
	readahead string // read_ahead_kb of the mount
	rss       int64
	stats     *api.Stats
	config    *api.Config
}

// Kinds of targets.
const (
	kindSource   = "source"          // the source files
	kindLoopback = "loopback"        // go-fuse loopback, the baseline
	kindKernel   = "loopback-kernel" // go-fuse loopback with kernel FUSE passthrough
	kindCorgifs  = "corgifs"         // a corgifs mount
)

// sample is one timed read.
type sample struct {
	bytes int64
	secs  float64
	cpu   float64 // CPU seconds the daemon spent meanwhile
}

func (s sample) mbps() float64 { return float64(s.bytes) / s.secs / 1e6 }

// mountAll starts the two loopback mounts and one corgifs mount per strategy
// and part count, one after the other: the first corgifs mount builds the
// index in WORK/cache and the others load it.
func (b *bench) mountAll(ctx context.Context, corgifs, loopback string) error {
	logs := filepath.Join(b.work, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	src := b.ds.dir
	b.targets = append(b.targets, &target{
		name: "`cat` of the source files", kind: kindSource,
		files: func(int) []string { return b.ds.paths() },
	})

	for _, lb := range []struct {
		kind, name, dir string
		args            []string
	}{
		{kindLoopback, "go-fuse loopback, reads served by the daemon", "loopback", nil},
		{kindKernel, "go-fuse loopback, kernel FUSE passthrough", "loopback-kernel", []string{"--kernel-passthrough"}},
	} {
		mnt := filepath.Join(b.work, "mnt", lb.dir)
		fmt.Fprintf(b.stderr, "mounting %s at %s\n", lb.name, mnt)
		argv := append(append([]string{loopback}, lb.args...), src, mnt)
		d, err := startDaemon(ctx, lb.dir, mnt, filepath.Join(logs, lb.dir+".log"), filepath.Join(mnt, b.ds.Files[0]), argv...)
		if err != nil {
			return err
		}
		b.daemons = append(b.daemons, d)
		b.targets = append(b.targets, &target{
			name: lb.name, kind: lb.kind, d: d,
			files: func(int) []string {
				p := make([]string, len(b.ds.Files))
				for i, f := range b.ds.Files {
					p[i] = filepath.Join(mnt, f)
				}
				return p
			},
		})
	}

	for _, strategy := range []string{"corgipile", "none"} {
		for _, k := range b.o.parts {
			name := fmt.Sprintf("%s-k%d", strategy, k)
			mnt := filepath.Join(b.work, "mnt", name)
			argv := []string{corgifs, "mount", src, mnt, "--strategy", strategy, "--parts", strconv.Itoa(k),
				"--seed", "1", "--cache-dir", filepath.Join(b.work, "cache")}
			if b.o.profile {
				argv = append(argv, "--cpuprofile", filepath.Join(b.work, "cpu-"+name+".pprof"))
			}
			fmt.Fprintf(b.stderr, "mounting corgifs %s, K=%d at %s\n", strategy, k, mnt)
			d, err := startDaemon(ctx, "corgifs "+name, mnt, filepath.Join(logs, name+".log"),
				api.ConfigPath(mnt), argv...)
			if err != nil {
				return err
			}
			b.daemons = append(b.daemons, d)
			b.targets = append(b.targets, &target{
				name: fmt.Sprintf("corgifs `--strategy %s`, K=%d", strategy, k), kind: kindCorgifs, strategy: strategy, parts: k,
				d: d, fresh: true,
				files: func(epoch int) []string {
					p := make([]string, k)
					for i := range p {
						p[i] = shuffler.PartPath(mnt, epoch, i, k, ".tfrecord")
					}
					return p
				},
			})
		}
	}
	return nil
}

// warmUp reads every target once (epoch 0 of the corgifs mounts), the source
// files first, so that the page cache holds the dataset and each daemon has
// served a whole epoch. It also checks that every target serves exactly the
// bytes of the dataset.
func (b *bench) warmUp(ctx context.Context) error {
	buf := make([]byte, 1<<20)
	for _, t := range b.targets {
		start := time.Now()
		files := t.files(0)
		n, err := readAll(ctx, files, buf)
		if err != nil {
			return fmt.Errorf("warm-up of %s: %w", t.name, err)
		}
		if n != b.ds.Bytes {
			return fmt.Errorf("warm-up of %s: read %d bytes, the dataset has %d", t.name, n, b.ds.Bytes)
		}
		if t.fresh {
			dropPages(files)
		}
		fmt.Fprintf(b.stderr, "warm-up  %-36s %s in %.2fs\n", t.name, humanize.IBytes(uint64(n)), time.Since(start).Seconds())
	}
	return nil
}

// readAll reads files to their end and checks that each gives as many bytes
// as its size says.
func readAll(ctx context.Context, files []string, buf []byte) (int64, error) {
	var total int64
	for _, p := range files {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		f, err := os.Open(p)
		if err != nil {
			return total, err
		}
		var n int64
		for {
			m, err := f.Read(buf)
			n += int64(m)
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return total, err
			}
		}
		fi, err := f.Stat()
		f.Close()
		if err != nil {
			return total, err
		}
		if n != fi.Size() {
			return total, fmt.Errorf("%s: read %d bytes, its size is %d", p, n, fi.Size())
		}
		total += n
	}
	return total, nil
}

// dropPages drops the kernel's cached pages of files, so that an epoch read
// once does not fill the page cache (and push the source files out of it).
func dropPages(files []string) {
	const fadvDontNeed = 4 // POSIX_FADV_DONTNEED
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0)
		f.Close()
	}
}

// measure times every target --runs times, round-robin, each round starting
// one target further so that no target always follows the same one. Run r
// of a corgifs target reads epoch r, which no earlier read has touched.
func (b *bench) measure(ctx context.Context) error {
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer devNull.Close()
	n := len(b.targets)
	b.loadBefore = loadAverage()
	defer func() { b.loadAfter = loadAverage() }()
	for r := 1; r <= b.o.runs; r++ {
		for i := range n {
			t := b.targets[(i+r-1)%n]
			s, err := t.time(ctx, r, devNull)
			if err != nil {
				return fmt.Errorf("run %d of %s: %w", r, t.name, err)
			}
			if s.bytes != b.ds.Bytes {
				return fmt.Errorf("run %d of %s: served %d bytes, the dataset has %d", r, t.name, s.bytes, b.ds.Bytes)
			}
			t.samples = append(t.samples, s)
			fmt.Fprintf(b.stderr, "run %d/%d  %-36s %8.0f MB/s  (%.2fs)\n", r, b.o.runs, t.name, s.mbps(), s.secs)
		}
	}
	return nil
}

// loadAverage returns the 1, 5 and 15 minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// time runs `cat FILES > /dev/null` for epoch and returns its wall time, the
// bytes the files hold and the CPU time the daemon used meanwhile.
func (t *target) time(ctx context.Context, epoch int, devNull *os.File) (sample, error) {
	files := t.files(epoch)
	var cpu0 float64
	if t.d != nil {
		c, err := cpuSeconds(t.d.pid())
		if err != nil {
			return sample{}, err
		}
		cpu0 = c
	}
	secs, err := timeCmd(ctx, devNull, append([]string{"cat"}, files...)...)
	if err != nil {
		return sample{}, err
	}
	s := sample{secs: secs}
	if t.d != nil {
		c, err := cpuSeconds(t.d.pid())
		if err != nil {
			return sample{}, err
		}
		s.cpu = c - cpu0
	}
	for _, p := range files {
		fi, err := os.Stat(p)
		if err != nil {
			return sample{}, err
		}
		s.bytes += fi.Size()
	}
	if t.fresh {
		dropPages(files)
	}
	return s, nil
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.b = append(l.b, p[:min(len(p), max(0, 4096-len(l.b)))]...)
	return len(p), nil
}

// finish reads each daemon's peak RSS (and, for corgifs, its stats and
// config) and stops it, checking that it exits with status 0.
func (b *bench) finish() error {
	var errs []error
	for _, t := range b.targets {
		if t.d == nil {
			continue
		}
		if t.kind == kindCorgifs {
			t.stats, t.config = &api.Stats{}, &api.Config{}
			errs = append(errs,
				readJSON(api.StatsPath(t.d.mnt), t.stats),
				readJSON(api.ConfigPath(t.d.mnt), t.config))
		}
		t.readahead = readaheadKB(t.d.mnt)
		rss, err := peakRSS(t.d.pid())
		t.rss = rss
		errs = append(errs, err, t.d.stop())
	}
	return errors.Join(errs...)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// cleanup stops the daemons that are still running, after an error.
func (b *bench) cleanup() {
	for _, d := range b.daemons {
		d.kill()
	}
}
