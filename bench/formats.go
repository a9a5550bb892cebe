//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/datagen"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/sizing"
)

const formatsHeading = "## Record formats against TFRecord (issue 13)"

// formatsDefaultSize is the TFRecord size of each formats dataset when
// --size is not given: the section then runs alone in a few minutes. The
// text formats of the same records are two to three times larger.
const formatsDefaultSize = 256 << 20

// formatsTarget is the target: every format's warm epoch within
// this fraction of TFRecord's throughput in records/s.
const formatsTarget = 0.9

// formatSet is one format's copy of the records of one record size, and
// what was measured on it.
type formatSet struct {
	format  string
	dir     string // the files, written by `corgifs gen synthetic --format`
	bytes   int64  // of the source files
	genSecs float64
	reused  bool

	d       *daemon
	ext     string // of the served part
	partLen int64  // bytes of one served epoch (a CSV header, a tar end marker included)
	samples []sample
	index   []float64 // seconds of `corgifs index` with a fresh cache
	idxCPU  []float64 // its user+system CPU seconds
	rss     int64
	stalls  int64
}

// formatsRun is the formats benchmark of one record size.
type formatsRun struct {
	recordSize        int64 // asked for, of the TFRecord records
	features, records int
	work              string
	blockSize, buffer int64
	sets              []*formatSet // tfrecord first
	load              [2]string
}

// formatsResults is what the formats section shows.
type formatsResults struct {
	size int64 // TFRecord bytes asked for per record size
	runs []*formatsRun
}

// genMeta records the command that wrote a format's files, so that a later
// run with --work reuses them.
type genMeta struct {
	Args    []string `json:"args"`
	Bytes   int64    `json:"bytes"`
	Seconds float64  `json:"seconds"`
}

// runFormats writes, for each record size, the same synthetic records in
// every format datagen writes, times `corgifs index` of each with a fresh
// cache, mounts each with the same corgipile parameters and times warm
// epochs read with cat, the formats alternating.
func (h *harness) runFormats(ctx context.Context, work string) (*formatsResults, error) {
	res := &formatsResults{size: h.o.formatsSize()}
	for _, rs := range h.o.recordSizes {
		features, records := shape(res.size, rs)
		fr := &formatsRun{recordSize: rs, features: features, records: records,
			work: filepath.Join(work, "formats-"+formatSize(rs))}
		fmt.Fprintf(h.stderr, "formats: %s, %d records of %d features\n", recordsLabel(rs), records, features)
		for _, f := range datagen.Formats() {
			s, err := h.genFormat(ctx, fr, f)
			if err != nil {
				return nil, err
			}
			fr.sets = append(fr.sets, s)
		}
		// The defaults a mount chooses for the TFRecord set (package
		// sizing, at the default --max-memory), in bytes, for every
		// format: the text formats then have fewer records per block.
		c := sizing.Choose(sizing.Input{DatasetBytes: fr.sets[0].bytes, Parts: 1, MaxMemory: 1 << 30})
		fr.buffer, fr.blockSize = c.BufferBytes, c.BlockSize
		if err := h.timeIndex(ctx, fr); err != nil {
			return nil, err
		}
		if err := h.timeEpochs(ctx, fr); err != nil {
			return nil, err
		}
		res.runs = append(res.runs, fr)
	}
	return res, nil
}

// formatsSize is the TFRecord size of each formats dataset.
func (o options) formatsSize() int64 {
	if o.sizeSet {
		return o.size
	}
	return formatsDefaultSize
}

// genFormat writes (or reuses) the records of fr in format f with
// `corgifs gen synthetic`.
func (h *harness) genFormat(ctx context.Context, fr *formatsRun, f string) (*formatSet, error) {
	dir := filepath.Join(fr.work, f)
	s := &formatSet{format: f, dir: filepath.Join(dir, "src")}
	args := []string{"gen", "synthetic", "--format", f, "--records", strconv.Itoa(fr.records),
		"--features", strconv.Itoa(fr.features), "--files", strconv.Itoa(dataFiles),
		"--classes", strconv.Itoa(dataClasses), "--seed", strconv.Itoa(dataSeed), "--order", "clustered"}
	metaPath := filepath.Join(dir, "gen.json")
	var m genMeta
	if err := readJSON(metaPath, &m); err == nil && slices.Equal(m.Args, args) {
		if n, err := dirBytes(s.dir); err == nil && n == m.Bytes {
			s.bytes, s.genSecs, s.reused = m.Bytes, m.Seconds, true
			fmt.Fprintf(h.stderr, "  reusing %s (%s)\n", s.dir, fmtBytes(s.bytes))
			return s, nil
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	secs, err := timeCmd(ctx, nil, append(append([]string{h.bins.corgifs}, args...), s.dir)...)
	if err != nil {
		return nil, err
	}
	n, err := dirBytes(s.dir)
	if err != nil {
		return nil, err
	}
	s.bytes, s.genSecs = n, secs
	fmt.Fprintf(h.stderr, "  corgifs %s %s: %s in %.1fs\n", strings.Join(args, " "), s.dir, fmtBytes(n), secs)
	b, err := json.MarshalIndent(genMeta{Args: args, Bytes: n, Seconds: secs}, "", "  ")
	if err != nil {
		return nil, err
	}
	return s, os.WriteFile(metaPath, append(b, '\n'), 0o644)
}

// dirBytes is the total size of the regular files in dir.
func dirBytes(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return 0, err
		}
		if fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n, nil
}

// filesOf lists the regular files of dir.
func filesOf(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var p []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			p = append(p, filepath.Join(dir, e.Name()))
		}
	}
	return p, nil
}

// warmSource reads every source file of s once so that the page cache
// holds them.
func warmSource(ctx context.Context, s *formatSet, buf []byte) error {
	files, err := filesOf(s.dir)
	if err != nil {
		return err
	}
	n, err := readAll(ctx, files, buf)
	if err != nil {
		return err
	}
	if n != s.bytes {
		return fmt.Errorf("%s: read %d bytes, expected %d", s.dir, n, s.bytes)
	}
	return nil
}

// rotate calls fn for every set, --runs times, each round starting one set
// further so that no format always follows the same one.
func (h *harness) rotate(fr *formatsRun, fn func(r int, s *formatSet) error) error {
	n := len(fr.sets)
	for r := 1; r <= h.o.runs; r++ {
		for i := range n {
			if err := fn(r, fr.sets[(i+r-1)%n]); err != nil {
				return err
			}
		}
	}
	return nil
}

// timeIndex times `corgifs index` of every format with a new cache
// directory each time, the sources in the page cache.
func (h *harness) timeIndex(ctx context.Context, fr *formatsRun) error {
	buf := make([]byte, 1<<20)
	for _, s := range fr.sets {
		if err := warmSource(ctx, s, buf); err != nil {
			return err
		}
	}
	cache := filepath.Join(fr.work, "index-cache")
	return h.rotate(fr, func(r int, s *formatSet) error {
		if err := os.RemoveAll(cache); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, h.bins.corgifs, "index", s.dir, "--format", s.format,
			"--cache-dir", cache, "--block-size", strconv.FormatInt(fr.blockSize, 10))
		var out limitedBuffer
		cmd.Stderr = &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("corgifs index %s: %w: %s", s.dir, err, out.b)
		}
		secs := time.Since(start).Seconds()
		cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
		s.index, s.idxCPU = append(s.index, secs), append(s.idxCPU, cpu)
		gib := float64(s.bytes) / (1 << 30)
		fmt.Fprintf(h.stderr, "index run %d/%d  %-8s %6.2fs  %5.2f s/GiB, CPU %5.2f s/GiB\n", r, h.o.runs, s.format, secs,
			secs/gib, cpu/gib)
		return os.RemoveAll(cache)
	})
}

// timeEpochs mounts every format with the same corgipile parameters, reads
// epoch 0 of each once, and then times `cat` of the part of a new epoch,
// the formats alternating.
func (h *harness) timeEpochs(ctx context.Context, fr *formatsRun) (err error) {
	defer func() {
		for _, s := range fr.sets {
			if s.d != nil {
				s.d.kill()
			}
		}
	}()
	cache := filepath.Join(fr.work, "cache")
	if err := os.MkdirAll(filepath.Join(fr.work, "logs"), 0o755); err != nil {
		return err
	}
	for _, s := range fr.sets {
		name := "formats-" + formatSize(fr.recordSize) + "-" + s.format
		mnt := filepath.Join(fr.work, "mnt", s.format)
		argv := []string{h.bins.corgifs, "mount", s.dir, mnt, "--format", s.format, "--strategy", "corgipile",
			"--parts", "1", "--seed", "1", "--block-size", strconv.FormatInt(fr.blockSize, 10),
			"--buffer", strconv.FormatInt(fr.buffer, 10), "--cache-dir", cache}
		if h.o.profile {
			argv = append(argv, "--cpuprofile", filepath.Join(fr.work, "cpu-"+s.format+".pprof"))
		}
		fmt.Fprintf(h.stderr, "mounting %s at %s\n", s.format, mnt)
		d, err := startDaemon(ctx, name, mnt, filepath.Join(fr.work, "logs", s.format+".log"),
			api.ConfigPath(mnt), argv...)
		if err != nil {
			return err
		}
		s.d = d
		var cfg api.Config
		if err := readJSON(api.ConfigPath(mnt), &cfg); err != nil {
			return err
		}
		s.ext = cfg.Extension
	}

	buf := make([]byte, 1<<20)
	for _, s := range fr.sets {
		if err := warmSource(ctx, s, buf); err != nil {
			return err
		}
	}
	for _, s := range fr.sets {
		start := time.Now()
		p := s.part(0)
		n, err := readAll(ctx, []string{p}, buf)
		if err != nil {
			return fmt.Errorf("warm-up of %s: %w", s.format, err)
		}
		dropPages([]string{p})
		s.partLen = n
		fmt.Fprintf(h.stderr, "warm-up  %-8s %s in %.2fs\n", s.format, fmtBytes(n), time.Since(start).Seconds())
	}

	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer devNull.Close()
	fr.load[0] = loadAverage()
	err = h.rotate(fr, func(r int, s *formatSet) error {
		t := &target{d: s.d, fresh: true, files: func(epoch int) []string { return []string{s.part(epoch)} }}
		sm, err := t.time(ctx, r, devNull)
		if err != nil {
			return fmt.Errorf("run %d of %s: %w", r, s.format, err)
		}
		if sm.bytes != s.partLen {
			return fmt.Errorf("run %d of %s: served %d bytes, epoch 0 had %d", r, s.format, sm.bytes, s.partLen)
		}
		s.samples = append(s.samples, sm)
		fmt.Fprintf(h.stderr, "run %d/%d  %-8s %8.0f MB/s %9.0f records/s (%.2fs)\n", r, h.o.runs, s.format,
			sm.mbps(), float64(fr.records)/sm.secs, sm.secs)
		return nil
	})
	fr.load[1] = loadAverage()
	if err != nil {
		return err
	}

	var errs []error
	for _, s := range fr.sets {
		st, err := corgifsStats(s.d.mnt)
		errs = append(errs, err)
		if err == nil {
			s.stalls = st.Stalls
		}
		s.rss, err = peakRSS(s.d.pid())
		errs = append(errs, err, s.d.stop())
		s.d = nil
	}
	return errors.Join(errs...)
}

// part is the path of the one part of epoch in s's mount.
func (s *formatSet) part(epoch int) string {
	return filepath.Join(s.d.mnt, fmt.Sprintf("epoch-%04d", epoch), shuffler.PartName(0, 1, s.ext))
}

// secs returns the wall times of s's timed epochs.
func (s *formatSet) secs() []float64 {
	v := make([]float64, len(s.samples))
	for i, sm := range s.samples {
		v[i] = sm.secs
	}
	return v
}

// recordsPerSec is the median, minimum and maximum records/s of s's epochs.
func (s *formatSet) recordsPerSec(records int) dist {
	v := s.secs()
	for i := range v {
		v[i] = float64(records) / v[i]
	}
	return summarize(v)
}

// mbps is the median, minimum and maximum MB/s of s's epochs.
func (s *formatSet) mbps() dist {
	v := make([]float64, len(s.samples))
	for i, sm := range s.samples {
		v[i] = sm.mbps()
	}
	return summarize(v)
}

// cpuPerMillion is the daemon's CPU seconds per million records served in
// the timed epochs.
func (s *formatSet) cpuPerMillion(records int) float64 {
	var cpu float64
	for _, sm := range s.samples {
		cpu += sm.cpu
	}
	return cpu / (float64(records*len(s.samples)) / 1e6)
}

// roundRatios are, per round, s's records/s over TFRecord's in that round.
func roundRatios(s, tf *formatSet) []float64 {
	v := make([]float64, min(len(s.samples), len(tf.samples)))
	for i := range v {
		v[i] = tf.samples[i].secs / s.samples[i].secs
	}
	return v
}

// formatsCommand is the command line that repeats the formats section.
func formatsCommand(o options) string {
	return fmt.Sprintf("go run ./bench --formats --size %s --record-sizes %s --runs %d",
		formatSize(o.formatsSize()), (*sizesValue)(&o.recordSizes).String(), o.runs)
}

// formatsMarkdown renders the section.
func (h *harness) formatsMarkdown(res *formatsResults, took time.Duration) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n\n", formatsHeading)
	p("The same records (`corgifs gen synthetic`: a label, an id and float features, sorted by\n")
	p("label, %d files) written in every format `gen` writes, each mounted with corgifs\n", dataFiles)
	p("(`--strategy corgipile --parts 1 --seed 1`, the same `--block-size` and `--buffer` in\n")
	p("bytes for every format: the ones corgifs would choose for the TFRecord set), and a warm\n")
	p("epoch read with `cat PART > /dev/null`: the source files are in the page cache and each\n")
	p("mount has served epoch 0. The formats alternate round-robin, %d timed runs each, each run\n", h.o.runs)
	p("reading an epoch no earlier read touched (its pages dropped afterwards). The formats hold\n")
	p("the same records in different numbers of bytes (text: floats in decimal; WebDataset: a\n")
	p("512-byte tar header and padding per member), so **records/s is the fair unit**: the ratio\n")
	p("to TFRecord is of records/s (the same as of wall time), and the target of issue 13 is\n")
	p("every format at %.1f× TFRecord or better in it. MB/s is of each format's own served bytes;\n", formatsTarget)
	p("its ratio to TFRecord is corgifs's cost per served byte, which tells a format that is slow\n")
	p("because it is larger (serving through FUSE costs per byte) from one that costs more to\n")
	p("split. Daemon CPU is utime+stime of the mount's process during the timed runs. Index time is\n")
	p("`corgifs index SRC --format F --cache-dir NEW` (a new, empty cache directory each run; the\n")
	p("source files in the page cache), alternating likewise; its CPU (user+system of the command)\n")
	p("is steadier than its wall time on a loaded machine.\n\n")
	p("Reproduce, as root from the repository root (run on %s, took %s; add `--work DIR --keep`\n",
		time.Now().UTC().Format("2006-01-02"), took.Round(time.Second))
	p("to reuse the datasets, `--profile` to write a CPU profile of each mount):\n\n")
	p("    %s\n\n", formatsCommand(h.o))
	p("%s", machineMarkdown(h.machine, "cat: "+h.machine.cat))
	for i, fr := range res.runs {
		if i > 0 {
			p("\n")
		}
		p("%s", fr.markdown(h.o))
	}
	return b.String()
}

// markdown renders the part of the section about one record size.
func (fr *formatsRun) markdown(o options) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	tf := fr.sets[0]
	p("### %s\n\n", recordsLabel(fr.recordSize))
	p("- Records: %d of %d float features, %d classes sorted by label, %d files per format;\n",
		fr.records, fr.features, dataClasses, dataFiles)
	p("  `corgifs gen synthetic --format F --records %d --features %d --files %d --classes %d --seed %d`.\n",
		fr.records, fr.features, dataFiles, dataClasses, dataSeed)
	var made []string
	for _, s := range fr.sets {
		m := fmt.Sprintf("%s %.1f s", s.format, s.genSecs)
		if s.reused {
			m += " (reused)"
		}
		made = append(made, m)
	}
	p("- Written by `corgifs gen synthetic` in: %s.\n", strings.Join(made, ", "))
	p("- Mounts: `--block-size %s --buffer %s` for every format (a TFRecord block holds about %d records).\n",
		fmtBytes(fr.blockSize), fmtBytes(fr.buffer), max(1, fr.blockSize*int64(fr.records)/tf.bytes))
	p("%s\n", loadLine(fr.load))

	p("#### Warm epoch\n\n")
	p("| format | bytes per record | epoch MB | median records/s | × TFRecord (records/s) | TFRecord's bytes per record ÷ its | per-run × TFRecord | median MB/s | min–max MB/s | × TFRecord (MB/s) | daemon CPU s per M records | daemon CPU s per GiB | %.1f× in records/s |\n", formatsTarget)
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	tfRate, tfMB := tf.recordsPerSec(fr.records).med, tf.mbps().med
	var missed, missedMB []string
	for _, s := range fr.sets {
		rate := s.recordsPerSec(fr.records)
		mb := s.mbps()
		ratio := rate.med / tfRate
		verdict := "met"
		if s == tf {
			verdict = "–"
		} else if ratio < formatsTarget {
			verdict = "**missed**"
			missed = append(missed, fmt.Sprintf("%s (%.2f×)", s.format, ratio))
		}
		if r := mb.med / tfMB; s != tf && r < formatsTarget {
			missedMB = append(missedMB, fmt.Sprintf("%s (%.2f×)", s.format, r))
		}
		cpu := s.cpuPerMillion(fr.records)
		p("| %s | %.0f | %.1f | %.0f | %.2f | %.2f | %s | %.0f | %.0f–%.0f | %.2f | %.2f | %.2f | %s |\n", s.format,
			float64(s.bytes)/float64(fr.records), float64(s.partLen)/1e6, rate.med, ratio, float64(tf.partLen)/float64(s.partLen),
			join(roundRatios(s, tf), "%.2f"), mb.med, mb.lo, mb.hi, mb.med/tfMB,
			cpu, cpu*float64(fr.records)/1e6/(float64(s.partLen)/(1<<30)), verdict)
	}
	p("\n")

	p("#### Index\n\n")
	p("| format | source GiB | median s | min–max s | s per GiB | records/s | CPU s per GiB (user+sys, median) |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range fr.sets {
		d := summarize(s.index)
		gib := float64(s.bytes) / (1 << 30)
		p("| %s | %.3f | %.2f | %.2f–%.2f | %.2f | %.0f | %.2f |\n", s.format, gib, d.med, d.lo, d.hi, d.med/gib,
			float64(fr.records)/d.med, summarize(s.idxCPU).med/gib)
	}
	p("\n")

	p("#### Observations\n\n")
	lo, hi := 1e9, 0.0
	for _, s := range fr.sets[1:] {
		r := s.recordsPerSec(fr.records).med / tfRate
		lo, hi = min(lo, r), max(hi, r)
	}
	p("TFRecord served %.0f records/s (%.0f MB/s); the other formats %.2f–%.2f× that in records/s.", tfRate, tf.mbps().med, lo, hi)
	p(" Serving costs per byte (FUSE writes, source reads, copies), so a format whose records take k times TFRecord's bytes can reach about 1/k of its records/s (the column TFRecord's bytes per record ÷ its).")
	if len(missed) == 0 {
		p(" Every format met the %.1f× target.", formatsTarget)
	} else {
		p(" Below the %.1f× target: %s.", formatsTarget, strings.Join(missed, ", "))
	}
	if len(missedMB) == 0 {
		p(" In MB/s of each format's own bytes (corgifs's cost per served byte), every format was at %.1f× TFRecord or better.", formatsTarget)
	} else {
		p(" In MB/s of each format's own bytes (corgifs's cost per served byte), below %.1f× TFRecord: %s.", formatsTarget, strings.Join(missedMB, ", "))
	}
	var stalls []string
	for _, s := range fr.sets {
		if s.stalls > 0 {
			stalls = append(stalls, fmt.Sprintf("%s %d", s.format, s.stalls))
		}
	}
	if len(stalls) > 0 {
		p(" Reader stalls over each mount's life (warm-up included): %s.", strings.Join(stalls, ", "))
	}
	p(" The load average of the shared machine is above: where the per-run ratios spread widely, the medians are indicative only.\n")
	return b.String()
}
