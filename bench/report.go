//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// sectionHeading is the heading of the section of --out this program owns.
const sectionHeading = "## Warm-cache epoch read (issue 2)"

// fileIntro starts a new --out file.
const fileIntro = `# corgifs benchmarks

Each section below is one benchmark, written by the program named in it; running
that program again replaces its own section and keeps the others. Numbers are
from a shared, noisy machine: compare medians only where the min–max ranges do
not overlap.
`

// results is what the warm section shows of one dataset.
type results struct {
	o       options
	ds      *dataset
	targets []*target
	srcRA   string // kernel readahead (KiB) of the source's file system
	load    [2]string
	cpus    string // logical CPUs of the machine
}

// machine describes where the benchmark ran.
type machine struct {
	cpu, cpus, memory, kernel, goVersion, commit, cat string
}

func (b *bench) results() *results {
	return &results{o: b.o, ds: b.ds, targets: b.targets, srcRA: readaheadKB(b.ds.dir),
		load: [2]string{b.loadBefore, b.loadAfter}, cpus: fmt.Sprint(runtime.NumCPU())}
}

// throughput returns the median, minimum and maximum MB/s of t's samples.
func (t *target) throughput() (med, lo, hi float64) {
	v := make([]float64, len(t.samples))
	for i, s := range t.samples {
		v[i] = s.mbps()
	}
	slices.Sort(v)
	n := len(v)
	if n == 0 {
		return 0, 0, 0
	}
	med = v[n/2]
	if n%2 == 0 {
		med = (v[n/2-1] + v[n/2]) / 2
	}
	return med, v[0], v[n-1]
}

// cpuPerGiB returns the daemon's CPU seconds per GiB served in the timed runs.
func (t *target) cpuPerGiB() float64 {
	var cpu float64
	var n int64
	for _, s := range t.samples {
		cpu += s.cpu
		n += s.bytes
	}
	return cpu / (float64(n) / (1 << 30))
}

// ofKind returns the targets of a kind, in table order.
func (r *results) ofKind(kind string) []*target {
	var ts []*target
	for _, t := range r.targets {
		if t.kind == kind {
			ts = append(ts, t)
		}
	}
	return ts
}

func (r *results) source() *target    { return r.ofKind(kindSource)[0] }
func (r *results) loopback() *target  { return r.ofKind(kindLoopback)[0] }
func (r *results) kernel() *target    { return r.ofKind(kindKernel)[0] }
func (r *results) corgifs() []*target { return r.ofKind(kindCorgifs) }

// warmMarkdown renders the section; took is the time of its measurements.
func (h *harness) warmMarkdown(took time.Duration) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n\n", sectionHeading)
	p("How fast a whole epoch is served when the source files are in the page cache: what is\n")
	p("measured is the cost of corgifs itself (FUSE round trips, copies, CRC checks, the\n")
	p("shuffle), not the disk's. Every command is `cat FILES > /dev/null` in its own process,\n")
	p("timed from start to exit; throughput is the bytes of one epoch over that wall time, in\n")
	p("MB/s (10^6 bytes/s). For each dataset in turn, after one untimed read of everything, the\n")
	p("commands alternate round-robin, %d timed runs each. Each corgifs run reads an epoch that no\n", h.o.runs)
	p("earlier read touched, and its pages are dropped from the kernel cache afterwards\n")
	p("(POSIX_FADV_DONTNEED), so neither helps another run.\n\n")

	p("Reproduce, as root from the repository root (run on %s, took %s, of which %s\n",
		time.Now().UTC().Format("2006-01-02"), (took + h.genTime).Round(time.Second), h.genTime.Round(time.Second))
	p("writing or checking the datasets; add `--work DIR --keep` to reuse the datasets):\n\n")
	p("    %s\n\n", reproduceCommand(h.o))
	p("%s", machineMarkdown(h.machine, "cat: "+h.machine.cat))
	p("%s", h.perDataset(func(e *runEnv) string { return e.warm.markdown() }))
	return b.String()
}

// markdown renders the part of the section about one dataset.
func (r *results) markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	src, pt, kpt := r.source(), r.loopback(), r.kernel()
	srcMed, _, _ := src.throughput()
	ptMed, _, _ := pt.throughput()
	gb := float64(r.ds.Bytes) / 1e9

	p("#### Setup\n\n")
	p("%s", datasetLine(r.ds))
	if c := r.corgifs(); len(c) > 0 && c[0].config != nil {
		cfg := c[0].config
		p("- corgifs: one mount (one daemon) per row, `corgifs mount SRC MNT --strategy S --parts K --seed 1`\n")
		p("  with the defaults block size %s, buffer %s of a part, --max-memory %s;\n",
			humanize.IBytes(uint64(cfg.BlockSize)), cfg.Buffer, humanize.IBytes(uint64(cfg.MaxMemory)))
		p("  the index (%d blocks) was built before timing. A corgipile buffer holds", cfg.Dataset.Blocks)
		sep := " "
		for _, t := range c {
			if t.strategy == "corgipile" && t.config != nil {
				p("%s%s at K=%d", sep, humanize.IBytes(uint64(t.config.BufferPart)), t.parts)
				sep = ", "
			}
		}
		p(".\n  The K parts of an epoch are read by one `cat`, one after the other.\n")
	}
	p("- Loopback (the passthrough baseline): `bench/loopback`, go-fuse's `fs.NewLoopbackRoot`\n")
	p("  mounted read-only with the tuning of corgifs (MaxWrite and MaxReadAhead 1 MiB,\n")
	p("  MaxBackground 16, at most 16 requests in flight, DisableSplice, DirectMount, kernel\n")
	p("  readahead raised to 4 MiB), in two\n")
	p("  mounts. In the baseline its files hide their descriptor from go-fuse, so every read is\n")
	p("  served by the daemon (pread into a buffer, written to /dev/fuse) as corgifs serves its\n")
	p("  reads. As is, go-fuse's loopback hands the descriptor to the kernel's FUSE passthrough\n")
	p("  (FOPEN_PASSTHROUGH, Linux 6.9+, root) and the kernel reads the source itself without\n")
	p("  the daemon: shown for reference, but out of reach for corgifs, whose bytes are shuffled.\n")
	p("- Kernel readahead (read_ahead_kb) when measured: source file system %s", r.srcRA)
	p(", loopback %s, kernel passthrough %s", pt.readahead, kpt.readahead)
	for _, t := range r.corgifs() {
		p(", corgifs %s K=%d %s", t.strategy, t.parts, t.readahead)
	}
	p(".\n%s\n", loadLine(r.load))

	p("#### Throughput\n\n")
	p("| command (one epoch, %.2f GB) | median MB/s | min–max MB/s | × `cat` of source | × loopback | runs in order, MB/s |\n", gb)
	p("| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, t := range r.targets {
		med, lo, hi := t.throughput()
		runs := make([]string, len(t.samples))
		for i, s := range t.samples {
			runs[i] = fmt.Sprintf("%.0f", s.mbps())
		}
		p("| %s | %.0f | %.0f–%.0f | %.2f | %.2f | %s |\n", t.name, med, lo, hi, med/srcMed, med/ptMed, strings.Join(runs, ", "))
	}
	p("\n")

	p("#### Daemons\n\n")
	p("Peak RSS is VmHWM of the daemon read just before SIGTERM (its whole life: indexing or\n")
	p("loading the index, warm-up and %d timed epochs). CPU is utime+stime spent during the\n", r.o.runs)
	p("timed runs per GiB they served. \"Read from SRC\" is the loader's bytes read over\n")
	p("bytes served, over the daemon's life (%d epochs).\n\n", r.o.runs+1)
	p("| daemon | peak RSS | --max-memory | loader peak | CPU s per GiB | read from SRC / served | stalls (s) |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	p("| loopback | %s | – | – | %.2f | – | – |\n", humanize.IBytes(uint64(pt.rss)), pt.cpuPerGiB())
	p("| loopback, kernel passthrough | %s | – | – | %.2f | – | – |\n", humanize.IBytes(uint64(kpt.rss)), kpt.cpuPerGiB())
	for _, t := range r.corgifs() {
		st, cfg := t.stats, t.config
		if st == nil || cfg == nil {
			continue
		}
		served := float64(r.ds.Bytes) * float64(r.o.runs+1)
		p("| corgifs %s, K=%d | %s | %s | %s | %.2f | %.3f | %d (%.2f) |\n", t.strategy, t.parts,
			humanize.IBytes(uint64(t.rss)), humanize.IBytes(uint64(cfg.MaxMemory)), humanize.IBytes(uint64(st.MemoryPeak)),
			t.cpuPerGiB(), float64(st.BytesRead)/served, st.Stalls, st.StallSeconds)
	}
	p("\n")

	p("#### Observations\n\n")
	p("%s\n", r.observations(srcMed, ptMed))
	return b.String()
}

// observations states what the numbers show, in a few sentences.
func (r *results) observations(srcMed, ptMed float64) string {
	c := r.corgifs()
	if len(c) == 0 {
		return ""
	}
	var s []string
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, t := range c {
		med, _, _ := t.throughput()
		lo, hi = min(lo, med), max(hi, med)
	}
	s = append(s, fmt.Sprintf("Through corgifs an epoch was read at %.0f–%.0f MB/s (medians over the %d corgifs rows), "+
		"%.2f–%.2f× the go-fuse loopback mount whose daemon serves the reads (%.0f MB/s) and %.2f–%.2f× `cat` of the page-cached source files (%.0f MB/s).",
		lo, hi, len(c), lo/ptMed, hi/ptMed, ptMed, lo/srcMed, hi/srcMed, srcMed))

	// CorgiPile against source order, for each K measured with both.
	var cmp []string
	for _, a := range c {
		if a.strategy != "corgipile" {
			continue
		}
		for _, b := range c {
			if b.strategy == "none" && b.parts == a.parts {
				cmp = append(cmp, fmt.Sprintf("K=%d: %s", a.parts, compare(a, b)))
			}
		}
	}
	if len(cmp) > 0 {
		s = append(s, "The CorgiPile order against the source order (--strategy none) of the same mount setup: "+strings.Join(cmp, "; ")+".")
	}

	var rssLo, rssHi int64 = math.MaxInt64, 0
	cpuLo, cpuHi := math.Inf(1), math.Inf(-1)
	var budget int64
	for _, t := range c {
		rssLo, rssHi = min(rssLo, t.rss), max(rssHi, t.rss)
		cpuLo, cpuHi = min(cpuLo, t.cpuPerGiB()), max(cpuHi, t.cpuPerGiB())
		if t.config != nil {
			budget = t.config.MaxMemory
		}
	}
	within := "within"
	if rssHi > budget {
		within = "above"
	}
	rss := humanize.IBytes(uint64(rssLo))
	if h := humanize.IBytes(uint64(rssHi)); h != rss {
		rss += "–" + h
	}
	s = append(s, fmt.Sprintf("The corgifs daemons peaked at %s resident, %s their --max-memory of %s, "+
		"and used %.2f–%.2f CPU seconds per GiB served, against %.2f for the loopback daemon.",
		rss, within, humanize.IBytes(uint64(budget)), cpuLo, cpuHi, r.loopback().cpuPerGiB()))

	worst, name := 0.0, ""
	for _, t := range r.targets {
		med, lo, hi := t.throughput()
		if spread := (hi - lo) / med; spread > worst {
			worst, name = spread, t.name
		}
	}
	if name != "" { // none with a single run
		s = append(s, fmt.Sprintf("The widest min–max range was %.0f%% of its median (%s), on a shared machine with %s logical CPUs.",
			100*worst, name, r.cpus))
	}
	return strings.Join(s, " ")
}

// compare describes target a's throughput relative to b's.
func compare(a, b *target) string {
	am, alo, ahi := a.throughput()
	bm, blo, bhi := b.throughput()
	ratio := fmt.Sprintf("%.0f against %.0f MB/s (%.2f×; daemon CPU %.2f against %.2f s/GiB)", am, bm, am/bm, a.cpuPerGiB(), b.cpuPerGiB())
	if alo <= bhi && blo <= ahi {
		return ratio + ", ranges overlap"
	}
	if am < bm {
		return ratio + ", slower beyond the run-to-run spread"
	}
	return ratio + ", faster beyond the run-to-run spread"
}

// describeMachine gathers the facts of the Machine list.
func describeMachine(ctx context.Context, root string) machine {
	m := machine{cpu: "?", cpus: fmt.Sprint(runtime.NumCPU()), memory: "?", kernel: "?",
		goVersion: runtime.Version(), commit: "?", cat: "?"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
				m.memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	first := func(dir, name string, args ...string) string {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			return "?"
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return line
	}
	m.kernel = first("", "uname", "-r")
	m.commit = first(root, "git", "describe", "--always", "--dirty")
	if strings.HasSuffix(m.commit, "-dirty") {
		m.commit += "; uncommitted changes outside bench/: " + dirtyFiles(ctx, root)
	}
	m.cat = first("", "cat", "--version")
	return m
}

// dirtyFiles lists the files of the work tree that differ from the commit,
// leaving out the benchmark's own.
func dirtyFiles(ctx context.Context, root string) string {
	cmd := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "?"
	}
	var files []string
	for line := range strings.Lines(string(out)) {
		if len(line) < 4 {
			continue
		}
		f := strings.TrimSpace(line[3:])
		if !strings.HasPrefix(f, "bench/") && f != "BENCHMARKS.md" {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return "none"
	}
	return strings.Join(files, ", ")
}

// writeSection replaces the section that starts with heading in the Markdown
// file path (up to the next "## " heading), or appends it, creating the file
// with fileIntro if it does not exist.
func writeSection(path, heading, section string) error {
	old, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		old, err = []byte(fileIntro), nil
	}
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(string(old), "\n")
	start, end := -1, len(lines)
	for i, l := range lines {
		switch {
		case start < 0 && strings.TrimRight(l, "\n") == heading:
			start = i
		case start >= 0 && strings.HasPrefix(l, "## "):
			end = i
		}
		if start >= 0 && end < len(lines) {
			break
		}
	}
	var out string
	if start < 0 {
		out = strings.TrimRight(string(old), "\n") + "\n\n" + section
	} else {
		rest := strings.Join(lines[end:], "")
		if rest != "" {
			section += "\n"
		}
		out = strings.Join(lines[:start], "") + section + rest
	}
	return os.WriteFile(path, []byte(out), 0o644)
}
